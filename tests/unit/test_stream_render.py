"""``lab stream``'s summary reads the statistics it prints from :class:`lab.stream.experiment.StreamResult`."""

from __future__ import annotations

from lab.render.stream import acceptance_detail_lines
from lab.stream.experiment import StreamResult


def _row(policy: str, agree: int, *, mode: str = "greedy", budget: int | None = 12) -> dict:
    return {"policy": policy, "mode": mode, "n_accepted": 5, "n_tested": 12, "top1_n": 40,
            "top1_agree_target": agree, "top1_agree_dense_draft": 33, "mean_overlap": 0.71, "budget": budget,
            "rounds_compared": 6, "rounds_proposals_differ": 0, "rounds_tested_differ": 0,
            "rounds_accepted_differ": 0}


def _result(acceptance: list[dict]) -> StreamResult:
    return StreamResult(config=None, input_ids=None, detection=None, runs=[], summary=[], tests=[],
                        recompute_check=None, acceptance=acceptance, bench={}, rolling={})


def test_stream_result_greedy_top1_range_spans_greedy_drafts_only_and_is_printed_as_is():
    """Fault class: a statistic computed while rendering (the summary's top-1 range taken over other rows,
    or recomputed apart from the result): the range is the greedy drafts' fewest and most agreeing positions."""
    result = _result([_row("dense", 31, budget=None), _row("window:12", 27), _row("sinks:4+12", 35),
                      _row("window:12", 2, mode="sampled")])
    assert result.greedy_top1_agree_range == (27, 35)
    assert "top-1 matches the target's at 27 to 35 of them" in "\n".join(acceptance_detail_lines(result))


def test_stream_result_without_the_large_sample_check_has_no_top1_range():
    rows = [{k: v for k, v in _row("dense", 31).items() if not k.startswith("top1")}]
    assert _result(rows).greedy_top1_agree_range is None and acceptance_detail_lines(_result(rows)) == []
