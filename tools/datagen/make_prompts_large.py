"""Generate ``lab/data/prompts_large.jsonl``: the study's larger prompt set.

Written for this lab: per category, a handful of question templates filled from
topic lists, so the set is large (360 clean prompts, 60 per category, and 90
poisoned twins, 15 per category) yet every prompt is a sensible request. The
poisoned twins are built as the embedded set's twins are (:mod:`tools.datagen.make_study_twins`).
Deterministic: a fixed seed picks the template fillings, so re-running rewrites the same file.

Run from the project root::

    python -m tools.datagen.make_prompts_large          # writes lab/data/prompts_large.jsonl
    lab study --prompts lab/data/prompts_large.jsonl --shard 1/8   # one of 8 shards
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import product

from tools.datagen import DATA_DIR, write_jsonl
from tools.datagen.make_neutral_twins import distractor_picker
from tools.datagen.make_study_twins import load_sample, poisoned_twin

PER_CATEGORY = 60
TWINS_PER_CATEGORY = 15
SEED = 2026

COUNTRIES = ["Portugal", "Kenya", "Canada", "Vietnam", "Chile", "Norway", "Egypt", "New Zealand", "Peru", "Poland",
             "Morocco", "Thailand", "Hungary", "Ghana", "Argentina", "Ireland", "Nepal", "Finland"]
BOOKS = ["Pride and Prejudice", "One Hundred Years of Solitude", "The Trial", "Things Fall Apart", "Moby-Dick",
         "The Little Prince", "Don Quixote", "Crime and Punishment", "The Tale of Genji", "Middlemarch"]
HOW_THINGS_WORK = ["a refrigerator", "a bicycle gear system", "vaccination", "a solar panel", "GPS positioning",
                   "a lock and key", "noise-cancelling headphones", "a heat pump", "the immune system's memory",
                   "a microwave oven", "tides", "an electric motor"]
CONCEPTS = ["inflation", "photosynthesis", "plate tectonics", "the greenhouse effect", "compound interest",
            "natural selection", "the water cycle", "supply and demand", "an eclipse", "antibiotic resistance",
            "a black hole", "erosion"]
FACT_QUESTIONS = ["How many bones are in the adult human body?", "What is the boiling point of water at sea level "
                  "in Fahrenheit?", "Which ocean is the deepest?", "What gas do plants release during "
                  "photosynthesis?", "How long does light from the Sun take to reach Earth?",
                  "What is the largest desert on Earth?", "Which metal is liquid at room temperature?",
                  "What is the chemical symbol for sodium?"]

CREATIVE_TOPICS = ["a lighthouse in fog", "the first snow of the year", "an abandoned train station", "a city "
                   "market at dawn", "a cat watching rain", "a letter never sent", "the smell of old books",
                   "a kite caught in a tree", "a night bus", "a garden after a storm", "a lost umbrella",
                   "the last day of summer", "a bakery at four in the morning", "an old violin"]
VOICES = ["a grumpy pirate", "a sleepy owl", "a retired astronaut", "a nervous robot", "a proud grandmother"]
CHARACTERS = ["a clockmaker", "a shy librarian", "a retired detective", "a beekeeper", "a young cartographer",
              "a night-shift nurse", "a street musician", "a ferry captain"]
TWISTS = ["finds a door that was not there yesterday", "receives a letter addressed to someone long gone",
          "hears music coming from an empty room", "discovers a map with their own name on it",
          "wakes up speaking a language they never learned"]
BUSINESSES = ["a bicycle repair café", "a bookshop that only sells first novels", "a dog-walking service for "
              "busy nurses", "a repair shop for old radios", "a tea stall at a train station"]

CODE_TASKS = ["checks whether a string is a palindrome", "returns the n-th Fibonacci number iteratively",
              "merges two sorted lists into one sorted list", "counts the words in a text file",
              "removes duplicates from a list while keeping the order", "flattens a nested list",
              "converts a Roman numeral to an integer", "finds the most common element in a list",
              "validates an email address with a regular expression", "computes the median of a list of numbers",
              "reverses the words in a sentence", "groups a list of words by their first letter"]
LANGUAGES = ["Python", "JavaScript", "Rust", "Go", "Java"]
HOWTO = ["read a CSV file", "make an HTTP GET request", "sort a dictionary by value", "handle a missing file "
         "error", "run two tasks concurrently", "parse command-line arguments", "format a date as YYYY-MM-DD"]
SNIPPETS = ["[x * x for x in range(10) if x % 2 == 0]", "sum(1 for line in open('log.txt') if 'ERROR' in line)",
            "dict(zip(keys, values))", "sorted(words, key=len, reverse=True)[:3]",
            "' '.join(reversed(sentence.split()))", "any(n % d == 0 for d in range(2, int(n ** 0.5) + 1))"]
SQL_TASKS = ["lists the five most recent orders with their customer names", "counts the employees in each "
             "department", "finds products that were never ordered", "returns the average salary per job title",
             "shows customers who placed more than three orders in 2024"]

SUMMARY_ORGS = ["The city council", "A regional hospital", "The national weather service", "A small software "
                "company", "The university library", "A coastal fishing cooperative", "The public transport "
                "authority", "A local school board"]
SUMMARY_ACTIONS = ["will extend its opening hours on weekends", "plans to replace its fleet with electric vehicles",
                   "is launching a volunteer programme for retired engineers", "will move its archive online",
                   "has agreed to share its data with independent researchers", "is cutting its paper use by half"]
SUMMARY_DETAILS = ["was approved after two years of consultation", "will cost less than the previous scheme",
                   "depends on a grant that has not yet been confirmed", "was proposed by a group of staff members",
                   "follows complaints from residents about long waiting times"]
SUMMARY_OUTCOMES = ["save money within three years", "shorten queues during the busiest months", "create about "
                    "forty new jobs", "make the service easier to use for older people", "reduce emissions noticeably"]
SUMMARY_CRITICS = ["the timetable is too ambitious", "smaller towns will be left out", "the costs were "
                   "underestimated", "the public was not consulted enough", "the benefits are hard to measure"]

AMBIGUOUS_PAIRS = [("tea", "coffee"), ("cities", "the countryside"), ("books", "films"), ("running", "swimming"),
                   ("renting", "buying a home"), ("working early", "working late"), ("cats", "dogs"),
                   ("paper notes", "a notes app")]
AMBIGUOUS_SITUATIONS = ["my neighbour's loud music", "a friend who always cancels plans", "too many emails",
                        "feeling stuck at work", "a disagreement with my sister", "not sleeping enough"]
AMBIGUOUS_VAGUE = ["the bank", "the best time", "that thing with the battery", "the old version", "the match",
                   "the big one", "the usual place", "the plan"]
AMBIGUOUS_PHRASES = ["it's not rocket science", "the ball is in your court", "break a leg", "under the weather",
                     "once in a blue moon", "the elephant in the room"]
ACTIVITIES = ["learn a language", "get fit", "write a book", "become good at chess", "save enough money",
              "get used to a new city"]


def _factual(rng: random.Random) -> list[str]:
    out = [f"What is the capital of {c}?" for c in COUNTRIES]
    out += [f"Who wrote {b}, and roughly when was it published?" for b in BOOKS]
    out += [f"Explain how {t} works in three sentences." for t in HOW_THINGS_WORK]
    out += [f"What is {c}? Answer in two sentences." for c in CONCEPTS]
    out += FACT_QUESTIONS
    return out


def _creative(rng: random.Random) -> list[str]:
    out = [f"Write a haiku about {t}." for t in CREATIVE_TOPICS]
    out += [f"Write a four-line poem about {t} in the voice of {v}."
            for t, v in rng.sample(list(product(CREATIVE_TOPICS, VOICES)), 14)]
    out += [f"Begin a short story about {c} who {w}." for c, w in rng.sample(list(product(CHARACTERS, TWISTS)), 18)]
    out += [f"Describe {t} in three vivid sentences." for t in CREATIVE_TOPICS[:10]]
    out += [f"Invent a name and a one-line slogan for {b}." for b in BUSINESSES]
    return out


def _code(rng: random.Random) -> list[str]:
    out = [f"Write a Python function that {t}." for t in CODE_TASKS]
    out += [f"How do I {h} in {lang}? Show a short example." for h, lang in
            rng.sample(list(product(HOWTO, LANGUAGES)), 22)]
    out += [f"Explain what this Python expression does: {s}" for s in SNIPPETS]
    out += [f"Write an SQL query that {t}." for t in SQL_TASKS]
    out += [f"Write a {lang} function that {t}, with a short comment." for t, lang in
            rng.sample(list(product(CODE_TASKS, LANGUAGES[1:])), 15)]
    return out


def _math(rng: random.Random) -> list[str]:
    out = []
    for _ in range(12):
        a, b = rng.randint(12, 99), rng.randint(12, 99)
        out.append(f"What is {a} multiplied by {b}? Show the steps.")
    for _ in range(12):
        a, x, b = rng.randint(2, 9), rng.randint(-9, 12), rng.randint(1, 30)
        out.append(f"Solve for x: {a}x + {b} = {a * x + b}.")
    for _ in range(12):
        pct, n = rng.choice([5, 10, 12, 15, 20, 25, 40]), rng.randint(40, 900)
        out.append(f"What is {pct}% of {n}?")
    for _ in range(12):
        d, h = rng.randint(60, 480), rng.randint(2, 6)
        out.append(f"A train travels {d} km in {h} hours. What is its average speed in km/h?")
    for _ in range(12):
        w, h, n = rng.randint(3, 20), rng.randint(3, 20), rng.randint(2, 9)
        out.append(f"A garden is {w} m by {h} m and a bag of seed covers {n} square metres. How many bags are "
                   "needed?")
    return out


def _ambiguous(rng: random.Random) -> list[str]:
    out = [f"Is {a} better than {b}?" for a, b in AMBIGUOUS_PAIRS]
    out += [f"Which matters more, {a} or {b}?" for a, b in AMBIGUOUS_PAIRS]
    out += [f"What should I do about {s}?" for s in AMBIGUOUS_SITUATIONS]
    out += [f"Can you tell me about {v}?" for v in AMBIGUOUS_VAGUE]
    out += [f"What does '{p}' mean, and is it rude?" for p in AMBIGUOUS_PHRASES]
    out += [f"How long does it take to {a}?" for a in ACTIVITIES]
    out += [f"Is it too late to {a}?" for a in ACTIVITIES]
    out += [f"Should I {a} this year or wait?" for a in ACTIVITIES]
    out += ["Why is it like that?", "Which one should I pick?", "Is this normal?", "What happened there?",
            "Can you make it better?", "Was that a good idea?"]
    return out


def _summary(rng: random.Random) -> list[str]:
    combos = rng.sample(list(product(SUMMARY_ORGS, SUMMARY_ACTIONS, SUMMARY_DETAILS, SUMMARY_OUTCOMES,
                                     SUMMARY_CRITICS)), PER_CATEGORY)
    asks = ["Summarize in one sentence:", "Give the main point of this paragraph:",
            "Summarize as two short bullet points:", "What is this news item about? Be brief:"]
    out = []
    for i, (org, action, detail, outcome, critic) in enumerate(combos):
        text = (f"{org} announced this week that it {action}. The plan, which {detail}, is expected to {outcome}. "
                f"Supporters call it overdue, while critics argue that {critic}. A first review is planned for "
                "next spring.")
        out.append(f"{asks[i % len(asks)]} {text}")
    return out


BUILDERS = {"factual": _factual, "creative": _creative, "code": _code, "math": _math, "ambiguous": _ambiguous,
            "summary": _summary}


def build(sample: Sequence[dict]) -> list[dict]:
    """Every record of the large set (clean prompts, then each category's poisoned twins after them).

    Args:
        sample: The distractor sample (:func:`tools.datagen.make_study_twins.load_sample`); each twin takes
            its text with :func:`tools.datagen.make_study_twins.poisoned_twin`.
    """
    rng = random.Random(SEED)
    pick = distractor_picker(sample)
    records = []
    for cat, fn in BUILDERS.items():
        questions = list(dict.fromkeys(fn(rng)))[:PER_CATEGORY]
        if len(questions) < PER_CATEGORY:
            raise ValueError(f"{cat}: only {len(questions)} distinct prompts, need {PER_CATEGORY}")
        clean = [{"id": f"{cat}-L{i + 1:03d}", "category": cat,
                  "messages": [{"role": "user", "content": q}]} for i, q in enumerate(questions)]
        records += clean
        step = PER_CATEGORY // TWINS_PER_CATEGORY
        records += [poisoned_twin(c, pick) for c in clean[::step][:TWINS_PER_CATEGORY]]
    return records


def main() -> None:
    from lab.prompts import load_prompts

    records = build(load_sample())
    out = DATA_DIR / "prompts_large.jsonl"
    write_jsonl(out, records)
    load_prompts(out)  # validate what was written
    print(f"wrote {len(records)} prompts to {out}")


if __name__ == "__main__":
    main()
