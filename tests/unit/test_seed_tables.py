"""``lab bench-seed-tables``: the seed's Part 3 schedules, its figures beside the measured ones.

Fault classes: a preset that drifts from the seed's set-up (gammas, tokens, repeats, sampling);
a report whose rows are not the rows the seed printed; a finding stated against the wrong figure.
The speeds themselves are not tested (no test depends on timing).
"""

from __future__ import annotations

from lab.bench.results import Spread
from lab.bench.seed_tables import SEED_SAMPLING, _findings, seed_passage, seed_prompt, seed_table_configs


def test_seed_table_configs_are_the_seeds_set_up():
    c = seed_table_configs()
    sweep, caching = c["gamma_sweep"], c["caching"]
    assert (sweep.gammas, sweep.max_new_tokens, sweep.repeats) == ((4, 6), 500, 5)
    assert sweep.sampling == SEED_SAMPLING and (SEED_SAMPLING.temperature, SEED_SAMPLING.top_p) == (0.7, 0.9)
    assert caching.no_cache and caching.max_new_tokens == 100 and caching.sampling == SEED_SAMPLING
    short = seed_table_configs(max_new_tokens=4, repeats=1)
    assert all((b.max_new_tokens, b.repeats) == (4, 1) for b in short.values())


def test_seed_passage_is_real_structured_text_with_its_source():
    p = seed_passage()
    assert p["text"].startswith("Exceptions") and "try" in p["text"] and len(p["text"].split()) > 250
    assert "Footnotes" not in p["text"] and len(p["sha256"]) == 64 and "Language Reference" in p["source"]
    assert seed_prompt(p).startswith("Write a detailed summary")


def test_findings_follow_their_rules_with_a_negative_case():
    rows = [{"row": "gamma 4", "lab": {"speedup": Spread(1.02, 1.02, 1.02)}},
            {"row": "gamma 6", "lab": {"speedup": Spread(1.04, 1.04, 1.04)}}]
    held = {f["finding"]: f["holds"] for f in _findings(rows, 2.12)}
    assert all(held.values()), held  # the seed's own figures satisfy every rule
    rows[1]["lab"]["speedup"] = Spread(1.40, 1.40, 1.40)
    broken = {f["finding"]: f["holds"] for f in _findings(rows, 1.1)}
    assert not any(broken.values()), broken
