"""The ``lab speculate`` report page: every token by origin, every round, the theory beside the measurement.

A speculative round emits the draft tokens the target kept, then one token of the target's own:
a correction (resampled from the residual where a draft token was rejected) or a bonus (every
draft token kept). The page marks each generated token by that origin, opens each round to its
proposals, and sets the measured tokens per round beside Leviathan, Kalman & Matias 2023's
closed forms (Equation 1, Theorem 3.8) from :mod:`lab.speculative.theory`, evaluated at the
report's own alpha, gamma and cost ratio c. p = target, q = draft.

Everything is read from ``report.json`` (the rounds, ``token_texts``); a report written before
``token_texts`` or the rounds' ``target_probs`` / ``draft_probs`` existed still draws, with token
ids in brackets and no p(x) / q(x) columns.
"""

from __future__ import annotations

import sys
from typing import Any

from lab.numbers import number_or_none
from lab.ranges import COUNT, GAMMA, NONNEGATIVE, PROBABILITY
from lab.speculative.theory import breakeven_alpha, expected_speedup, expected_tokens_per_round
from lab.views.core import KindPage, Section, figure, fmt, render, token_cell, token_inline
from lab.views.files import ReportFiles

# Rounds drawn as <details>; a longer run's other rounds are in rounds.csv and report.json.
MAX_ROUNDS_SHOWN = 400
# The origins a generated token can have, in the legend's order: (class suffix, legend label).
ORIGINS = (("accepted", "draft token, accepted by the target"),
           ("correction", "target's correction (resampled where a draft token was rejected)"),
           ("bonus", "bonus token (every draft token kept)"))


def _text_of(texts: dict[str, str], token_id: Any) -> str:
    """A token's text from the report's ``token_texts``; ``[id]`` in a report without it."""
    text = texts.get(str(token_id))
    return text if isinstance(text, str) else f"[{fmt(token_id)}]"


def _at(values: Any, i: int) -> Any:
    return values[i] if isinstance(values, list) and i < len(values) else None


def generated_tokens(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every generated token in order, with its origin, read from the rounds.

    Returns:
        One dict per token: ``id``, ``text``, ``origin`` (``"accepted"``, ``"correction"`` or
        ``"bonus"``), ``round``, ``index`` (position in the round's proposal, None for the target's
        token), ``entropy`` (the draft's entropy in bits at that position: of the accepted draft
        token, or of the rejected one a correction replaced; None for a bonus token), ``p`` / ``q``
        (target / draft probability of an accepted draft token, when the report has them),
        ``replaced`` (a correction: the rejected draft token's text, or None).
    """
    texts = report.get("token_texts") or {}
    out = []
    for r in report.get("rounds") or []:
        proposed = r.get("proposed") or []
        n_acc = int(r.get("n_accepted") or 0)
        for i, tok in enumerate(proposed[:n_acc]):
            out.append({"id": tok, "text": _text_of(texts, tok), "origin": "accepted", "round": r.get("round"),
                        "index": i, "entropy": _at(r.get("draft_entropies"), i),
                        "p": _at(r.get("target_probs"), i), "q": _at(r.get("draft_probs"), i), "replaced": None})
        nxt = r.get("next_token")
        if nxt is not None and r.get("next_kind") in ("correction", "bonus"):
            correction = r["next_kind"] == "correction"
            out.append({"id": nxt, "text": _text_of(texts, nxt), "origin": r["next_kind"], "round": r.get("round"),
                        "index": None, "entropy": _at(r.get("draft_entropies"), n_acc) if correction else None,
                        "p": None, "q": None,
                        "replaced": _text_of(texts, proposed[n_acc]) if correction and n_acc < len(proposed) else None})
    return out


def round_views(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The rounds as the Rounds section shows them: each proposal with its status, entropy, p(x) and q(x)."""
    texts = report.get("token_texts") or {}
    views = []
    for r in (report.get("rounds") or [])[:MAX_ROUNDS_SHOWN]:
        proposed = r.get("proposed") or []
        rows = []
        for i, tok in enumerate(proposed):
            accepted, tested = bool(_at(r.get("accepted_mask"), i)), bool(_at(r.get("tested_mask"), i))
            rows.append({"i": i, "id": tok, "text": _text_of(texts, tok),
                         "status": "accepted" if accepted else "rejected" if tested else "untested",
                         "entropy": _at(r.get("draft_entropies"), i),
                         # p(x) of an untested proposal was never used by an accept step: not shown.
                         "p": _at(r.get("target_probs"), i) if tested else None, "q": _at(r.get("draft_probs"), i)})
        nxt = r.get("next_token")
        views.append({"round": r.get("round"), "n_proposed": len(proposed), "n_accepted": r.get("n_accepted"),
                      "next_kind": r.get("next_kind"), "next_id": nxt,
                      "next_text": _text_of(texts, nxt) if nxt is not None else None,
                      "stop_reason": r.get("stop_reason"), "draft_time_s": r.get("draft_time_s"),
                      "source": r.get("draft_source") if isinstance(r.get("draft_source"), str) else "",
                      "verify_time_s": r.get("verify_time_s"), "rows": rows})
    return views


def theory(report: dict[str, Any]) -> dict[str, Any]:
    """The measured figures and the closed forms at the report's alpha, gamma and c (None where not defined).

    Returns:
        ``{"alpha", "gamma", "cost_ratio", "tau", "expected_tokens", "expected_speedup",
        "breakeven_alpha", "varies"}``; ``varies``: the draft length was not fixed at gamma (an
        adaptive stop, a dynamic gamma policy, or rounds cut short), so the closed forms, which
        assume gamma drafts each round, are an upper reference only.
    """
    acc = report.get("acceptance") or {}
    settings = report.get("settings") or {}
    alpha, gamma = number_or_none(acc.get("alpha"), text=False), settings.get("gamma")
    cost = report.get("draft_cost")
    c = number_or_none(cost.get("ratio"), text=False) if isinstance(cost, dict) else None
    # The closed forms' domain (lab.speculative.theory): a gamma no float holds has no theory to set beside it.
    ok = alpha is not None and 0.0 <= alpha <= 1.0 and isinstance(gamma, int) and 1 <= gamma <= sys.float_info.max
    rounds = report.get("rounds") or []
    varies = bool(settings.get("adaptive") or settings.get("dynamic")
                  or any(r.get("stop_reason") in ("entropy", "pmin", "no-match") for r in rounds))
    return {"alpha": alpha, "gamma": gamma, "cost_ratio": c, "tau": number_or_none(acc.get("tau"), text=False),
            "expected_tokens": expected_tokens_per_round(alpha, gamma) if ok else None,
            "expected_speedup": expected_speedup(alpha, gamma, c) if ok and c is not None and c >= 0 else None,
            "breakeven_alpha": breakeven_alpha(gamma, c) if ok and c is not None and c >= 0 else None,
            "varies": varies}


def time_figures(report: dict[str, Any]) -> dict[str, float | None]:
    """Mean seconds of one draft forward and of one verify pass, from the rounds' own times (None without them).

    A verify pass fused with the prefill (``prefill_positions`` > 0) is the prefill's, not counted here,
    as :attr:`lab.speculative.results.SpeculativeResult.verify_time_s` does.
    """
    rounds = report.get("rounds") or []
    draft_s = sum(number_or_none(r.get("draft_time_s"), text=False) or 0.0 for r in rounds)
    draft_n = sum(int(r.get("n_draft_forwards") or 0) for r in rounds)
    verify = [number_or_none(r.get("verify_time_s"), text=False) for r in rounds if not r.get("prefill_positions")]
    verify = [v for v in verify if v is not None]
    return {"draft_forward_s": draft_s / draft_n if draft_n else None,
            "verify_pass_s": sum(verify) / len(verify) if verify else None}


def headline(report: dict[str, Any]) -> str:
    """alpha, tokens per round beside the theory, tokens/s and gamma, in a line; each measured figure checked
    against its physical range (:func:`lab.views.core.figure`)."""
    acc = report.get("acceptance") or {}
    if not acc:
        return ""
    th = theory(report)
    return (f"alpha {figure(acc.get('alpha'), PROBABILITY, 'alpha')} ({figure(acc.get('n_accepted'), COUNT, 'a count')} "
            f"of {figure(acc.get('n_drafted_tested'), COUNT, 'a count')} tested drafts kept), "
            f"{figure(acc.get('tau'), NONNEGATIVE, 'tokens per round')} tokens per round (theory "
            f"{fmt(th['expected_tokens'])}), {figure(acc.get('tokens_per_s'), NONNEGATIVE, 'a speed')} tokens/s at "
            f"gamma {figure(th['gamma'], GAMMA, 'gamma')}")


def page(files: ReportFiles) -> KindPage:
    """The speculate page's own part: tokens by origin, rounds, theory and measurement."""
    report = files.report
    if not report.get("rounds") and not report.get("acceptance"):
        return KindPage()
    tokens = generated_tokens(report)
    ids = report.get("new_token_ids")
    mismatch = isinstance(ids, list) and [t["id"] for t in tokens] != ids
    counts = {o: sum(t["origin"] == o for t in tokens) for o, _ in ORIGINS}
    raw_rounds = report.get("rounds") or []
    sections = (
        Section("Tokens by origin", render("speculate_tokens.html.j2", tokens=tokens, origins=ORIGINS, counts=counts,
                                           mismatch=mismatch, has_texts=bool(report.get("token_texts")), inline=token_inline,
                                           visible=token_cell), "tokens"),
        Section("Rounds", render("speculate_rounds.html.j2", rounds=round_views(report), n_rounds=len(raw_rounds),
                                 has_probs=any(r.get("target_probs") for r in raw_rounds), visible=token_cell), "rounds"),
        Section("Theory and measurement", render("speculate_theory.html.j2", th=theory(report),
                                                 acc=report.get("acceptance") or {}, times=time_figures(report),
                                                 image=files.images.get("accepted_length.png")), "theory"),
    )
    return KindPage(headline=headline(report), sections=sections,
                    covers=frozenset({"rounds.csv", "accepted_length.png"}))
