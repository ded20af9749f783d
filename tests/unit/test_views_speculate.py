"""The ``lab speculate`` report page (lab.views.kinds.speculate) from hand-written report directories.

Fault classes guarded: a token marked with the wrong origin (an accepted draft token drawn as the
target's, a bonus drawn as a correction), a figure on the page that differs from the report's, the
theory recomputed by the page instead of taken from lab.speculative.theory, markup injected through
a token's text, and an older report (no ``token_texts``, no per-token p(x) / q(x)) that no longer draws.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

from lab.views.publish import report_folder
from lab.speculative.drafts import Proposal
from lab.speculative.loop import round_record
from lab.speculative.theory import breakeven_alpha, expected_speedup, expected_tokens_per_round
from lab.views.core import fmt
from lab.views.files import read_report
from lab.views.kinds.speculate import generated_tokens, page
from lab.kinds.speculate import KIND as SPECULATE
from lab.views.page import PAGE, kind_page, page_html
from tests.support import speculate_report, speculate_round

pytestmark = pytest.mark.unit

EVIL = "<script>alert(1)</script>"
GAMMA = 3
COST = 0.25


def _round(i, proposed, n_acc, nxt, kind, tested, entropies, p=None, q=None, stop="gamma"):
    return speculate_round(
        round=i, proposed=proposed, n_accepted=n_acc, next_token=nxt, next_kind=kind, stop_reason=stop,
        draft_entropies=entropies, draft_normalized_entropies=[h / 10 for h in entropies],
        accepted_mask=[j < n_acc for j in range(len(proposed))], tested_mask=[j < tested for j in range(len(proposed))],
        draft_time_s=0.03, verify_time_s=0.05, n_draft_forwards=len(proposed), target_probs=p or [],
        draft_probs=q or [])


def _report() -> dict:
    """Three rounds at gamma 3: one correction after 1 kept, a bonus after 3 kept, an accepted EOS (no target token)."""
    rounds = [_round(0, [10, 11, 12], 1, 20, "correction", 2, [0.5, 1.5, 2.5], [0.9, 0.1, 0.0], [0.8, 0.6, 0.5]),
              _round(1, [13, 14, 15], 3, 21, "bonus", 3, [0.25, 0.75, 1.25], [0.7, 0.6, 0.5], [0.6, 0.5, 0.4]),
              _round(2, [16, 2], 2, None, "none", 2, [0.125, 0.0625], [0.95, 0.99], [0.9, 0.98], stop="eos")]
    n_acc, n_tested, n_tokens = 6, 7, 8
    alpha = n_acc / n_tested
    return speculate_report(
        rounds, settings={"draft": "early-exit:12", "gamma": GAMMA, "adaptive": None, "dynamic": None},
        acceptance={"alpha": alpha, "tau": n_tokens / 3, "n_rounds": 3, "n_drafted": 8, "n_drafted_tested": n_tested,
                       "n_accepted": n_acc, "expected_tokens_per_round_at_alpha": expected_tokens_per_round(alpha, GAMMA),
                       "accepted_length_histogram": [0, 1, 0, 1], "all_rounds_histogram": [0, 1, 1, 1],
                       "geometric_expected": [0.3, 0.4, 0.5, 0.8], "geometric_chi2": None, "geometric_p_value": None,
                       "tokens": n_tokens, "tokens_per_s": 12.345, "prefill_time_s": 0.1, "draft_time_s": 0.24,
                    "verify_time_s": 0.15, "overhead_time_s": 0.01, "total_time_s": 0.5, "stopped_by": "eos"},
        draft_cost={"draft_flops": 1.0, "target_flops": 4.0, "context": 256, "ratio": COST, "note": None},
        text="answer", new_token_ids=[10, 20, 13, 14, 15, 21, 16, 2],
        token_texts={"10": "The", "11": " x", "12": " y", "20": " sea", "13": " is", "14": EVIL, "15": " deep",
                     "21": "\n", "16": ".", "2": "<|im_end|>"},
    )


def _write(root: Path, data: dict) -> Path:
    with report_folder(root, "speculate", "haiku") as rd:
        rd.write_json("report.json", data)
        rd.write_text("summary.md", "# speculate\n")
        rd.write_csv("rounds.csv", [{"round": 0, "n_accepted": 1}])
    return rd.final


def _token_origins(html: str) -> list[str]:
    view = html.split('id="spec-tokens"', 1)[1].split("</div>", 1)[0]
    return re.findall(r'<span class="tok origin-(\w+)" tabindex="0"', view)


def test_speculate_page_token_origins_match_rounds(tmp_path):
    """Each generated token's class is its origin in the rounds; accepted-draft tokens number acceptance.n_accepted."""
    data = _report()
    html = (_write(tmp_path, data) / PAGE).read_text()
    origins = _token_origins(html)
    assert origins == ["accepted", "correction", "accepted", "accepted", "accepted", "bonus", "accepted", "accepted"]
    assert origins.count("accepted") == data["acceptance"]["n_accepted"]
    assert origins.count("correction") == sum(r["next_kind"] == "correction" for r in data["rounds"])
    assert origins.count("bonus") == sum(r["next_kind"] == "bonus" for r in data["rounds"])
    assert [t["id"] for t in generated_tokens(SPECULATE.read(data))] == data["new_token_ids"]
    assert "The rounds do not rebuild" not in html


def test_speculate_page_tokens_not_rebuilt_warns(tmp_path):
    """A report whose rounds do not give its new_token_ids says so instead of drawing a silent mismatch."""
    data = _report()
    data["new_token_ids"] = data["new_token_ids"][:-1]
    assert "The rounds do not rebuild" in page_html(read_report(_write(tmp_path, data)))


def test_speculate_page_tooltip_says_round_origin_entropy(tmp_path):
    """A correction's tooltip names its round, its origin, the draft token it replaced and that token's entropy."""
    html = (_write(tmp_path, _report()) / PAGE).read_text()
    tip = html.split('data-origin="correction" data-round="0">', 1)[1].split("</span></span>", 1)[0]
    assert 'href="#round-0"' in tip and ">correction<" in tip and "·x" in tip
    assert f"{fmt(1.5)} bits (of the rejected draft)" in tip


def test_speculate_page_figures_equal_report_and_theory(tmp_path):
    """Headline and theory table show the report's alpha, tau, tokens/s and lab.speculative.theory's closed forms."""
    data = _report()
    acc = data["acceptance"]
    files = read_report(_write(tmp_path, data))
    made = page(files, SPECULATE.read(files.report))
    assert fmt(acc["alpha"]) in made.headline and fmt(acc["tau"]) in made.headline
    assert fmt(acc["tokens_per_s"]) in made.headline
    assert f"theory {fmt(acc['expected_tokens_per_round_at_alpha'])}" in made.headline
    theory = next(s.html for s in made.sections if s.title == "Theory and measurement")
    row = theory.split('data-figure="tokens-per-round"', 1)[1].split("</tr>", 1)[0]
    assert f"<td>{fmt(acc['tau'])}</td><td>{fmt(expected_tokens_per_round(acc['alpha'], GAMMA))}</td>" in row
    assert fmt(expected_speedup(acc["alpha"], GAMMA, COST)) in theory.split('data-figure="speedup"', 1)[1]
    assert fmt(breakeven_alpha(GAMMA, COST)) in theory.split('data-figure="breakeven"', 1)[1]
    assert {"rounds.csv"} <= made.covers


def test_speculate_page_rounds_show_statuses_and_probs(tmp_path):
    """One <details> per round; round 0's drafts are accepted, rejected, untested, with their p(x) and q(x)."""
    html = (_write(tmp_path, _report()) / PAGE).read_text()
    assert html.count('<details class="round"') == 3
    r0 = html.split('id="round-0"', 1)[1].split("</details>", 1)[0]
    assert re.findall(r'<td class="status-(\w+)">', r0) == ["accepted", "rejected", "untested"]
    assert "p(x) target" in r0 and f"<td>{fmt(0.9)}</td><td>{fmt(0.8)}</td>" in r0
    assert "correction (target)" in r0


def test_speculate_page_escapes_token_text(tmp_path):
    """A token whose text is markup is shown as text in the token view and the rounds."""
    html = (_write(tmp_path, _report()) / PAGE).read_text()
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_speculate_page_older_report_without_new_fields_draws(tmp_path):
    """A report with no token texts, no cost ratio and no per-token p(x) / q(x) (the writer's empty values) draws:
    ids in brackets, no probability columns."""
    data = copy.deepcopy(_report())
    data["token_texts"], data["draft_cost"] = {}, None
    for r in data["rounds"]:
        r["target_probs"], r["draft_probs"] = [], []
    html = (_write(tmp_path, data) / PAGE).read_text()
    assert _token_origins(html).count("accepted") == 6
    assert "[10]" in html and "p(x) target" not in html and "holds no token texts" in html
    assert "the report has no cost ratio c" in html


def test_speculate_page_report_without_rounds_adds_nothing(tmp_path):
    """A speculate folder with no acceptance or rounds (a damaged report) gets the generic page and one line saying
    what its report.json lacks, not an error."""
    made = kind_page(read_report(_write(tmp_path, {"kind": "speculate"})))
    assert [s.title for s in made.sections] == ["Not drawn"] and made.headline == ""
    assert "(report.json: prompt: missing (Report needs it))" in made.sections[0].html


def test_speculate_page_of_a_report_in_another_shape_says_why_in_one_line(tmp_path):
    """A hand-edited report.json (a string where a round's verify time goes) is named on the page in one line, the
    field and what was found; the rest of the page is drawn, no headline made of it."""
    data = _report()
    data["rounds"][1]["verify_time_s"] = "slow"
    html = (_write(tmp_path, data) / PAGE).read_text()
    notes = re.findall(r'<p class="note">The speculate part of this page was not drawn[^\n]*</p>', html)
    assert len(notes) == 1
    assert "(report.json: rounds[1].verify_time_s: a number goes here, not a string (&#39;slow&#39;))" in notes[0]
    assert 'id="spec-tokens"' not in html and "<h2>summary.md</h2>" in html


def test_round_record_keeps_target_and_draft_prob_of_each_proposed_token():
    """round_record stores p(x) and q(x) of each proposed token, read at that token's id (not its position)."""
    tokens = torch.tensor([2, 0])
    draft_probs = torch.tensor([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1]])  # q, [k=2, V=3]
    target_probs = torch.tensor([[0.2, 0.3, 0.5], [0.25, 0.25, 0.5]])  # p at the two draft positions
    prop = Proposal(tokens, draft_probs, torch.zeros(2), torch.zeros(2), "gamma", 0.0, 2)
    rec = round_record(0, prop, 1, 1, "correction", 0.0, target_probs=target_probs)
    assert rec.target_probs == pytest.approx([0.5, 0.25]) and rec.draft_probs == pytest.approx([0.7, 0.6])
    assert round_record(0, prop, 1, 1, "correction", 0.0).target_probs == []
