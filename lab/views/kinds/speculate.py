"""The ``lab speculate`` report page: every token by origin, every round, the theory beside the measurement.

A speculative round emits the draft tokens the target kept, then one token of the target's own:
a correction (resampled from the residual where a draft token was rejected) or a bonus (every
draft token kept). The page marks each generated token by that origin, opens each round to its
proposals, and sets the measured tokens per round beside Leviathan, Kalman & Matias 2023's
closed forms (Equation 1, Theorem 3.8) from :mod:`lab.speculative.theory`, evaluated at the
report's own alpha, gamma and cost ratio c. p = target, q = draft.

Everything is read from the typed report (:class:`lab.kinds.speculate.Report`: the rounds,
``token_texts``); a report whose ``token_texts`` is empty or whose rounds' ``target_probs`` /
``draft_probs`` are empty draws with token ids in brackets and no p(x) / q(x) columns.
"""

from __future__ import annotations

import sys
from typing import Any

from lab.kinds.speculate import Report
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


def _text_of(texts: dict[str, str], token_id: int) -> str:
    """A token's text from the report's ``token_texts``; ``[id]`` where it has none."""
    text = texts.get(str(token_id))
    return text if text is not None else f"[{fmt(token_id)}]"


def _at(values: list[Any], i: int) -> Any:
    return values[i] if i < len(values) else None


def generated_tokens(report: Report) -> list[dict[str, Any]]:
    """Every generated token in order, with its origin, read from the rounds.

    Returns:
        One dict per token: ``id``, ``text``, ``origin`` (``"accepted"``, ``"correction"`` or
        ``"bonus"``), ``round``, ``index`` (position in the round's proposal, None for the target's
        token), ``entropy`` (the draft's entropy in bits at that position: of the accepted draft
        token, or of the rejected one a correction replaced; None for a bonus token), ``p`` / ``q``
        (target / draft probability of an accepted draft token, when the report has them),
        ``replaced`` (a correction: the rejected draft token's text, or None).
    """
    texts = report.token_texts
    out = []
    for r in report.rounds:
        proposed, n_acc = r.proposed, r.n_accepted
        for i, tok in enumerate(proposed[:n_acc]):
            out.append({"id": tok, "text": _text_of(texts, tok), "origin": "accepted", "round": r.round,
                        "index": i, "entropy": _at(r.draft_entropies, i),
                        "p": _at(r.target_probs, i), "q": _at(r.draft_probs, i), "replaced": None})
        nxt = r.next_token
        if nxt is not None and r.next_kind in ("correction", "bonus"):
            correction = r.next_kind == "correction"
            out.append({"id": nxt, "text": _text_of(texts, nxt), "origin": r.next_kind, "round": r.round,
                        "index": None, "entropy": _at(r.draft_entropies, n_acc) if correction else None,
                        "p": None, "q": None,
                        "replaced": _text_of(texts, proposed[n_acc]) if correction and n_acc < len(proposed) else None})
    return out


def round_views(report: Report) -> list[dict[str, Any]]:
    """The rounds as the Rounds section shows them: each proposal with its status, entropy, p(x) and q(x)."""
    texts = report.token_texts
    views = []
    for r in report.rounds[:MAX_ROUNDS_SHOWN]:
        rows = []
        for i, tok in enumerate(r.proposed):
            accepted, tested = bool(_at(r.accepted_mask, i)), bool(_at(r.tested_mask, i))
            rows.append({"i": i, "id": tok, "text": _text_of(texts, tok),
                         "status": "accepted" if accepted else "rejected" if tested else "untested",
                         "entropy": _at(r.draft_entropies, i),
                         # p(x) of an untested proposal was never used by an accept step: not shown.
                         "p": _at(r.target_probs, i) if tested else None, "q": _at(r.draft_probs, i)})
        nxt = r.next_token
        views.append({"round": r.round, "n_proposed": len(r.proposed), "n_accepted": r.n_accepted,
                      "next_kind": r.next_kind, "next_id": nxt,
                      "next_text": _text_of(texts, nxt) if nxt is not None else None,
                      "stop_reason": r.stop_reason, "draft_time_s": r.draft_time_s, "source": r.draft_source,
                      "verify_time_s": r.verify_time_s, "rows": rows})
    return views


def theory(report: Report) -> dict[str, Any]:
    """The measured figures and the closed forms at the report's alpha, gamma and c (None where not defined).

    Returns:
        ``{"alpha", "gamma", "cost_ratio", "tau", "expected_tokens", "expected_speedup",
        "breakeven_alpha", "varies"}``; ``varies``: the draft length was not fixed at gamma (an
        adaptive stop, a dynamic gamma policy, or rounds cut short), so the closed forms, which
        assume gamma drafts each round, are an upper reference only.
    """
    acc, settings = report.acceptance, report.settings
    alpha, gamma = number_or_none(acc.alpha, text=False), settings.gamma
    c = number_or_none(report.draft_cost.ratio, text=False) if report.draft_cost is not None else None
    # The closed forms' domain (lab.speculative.theory): a gamma no float holds has no theory to set beside it.
    ok = alpha is not None and 0.0 <= alpha <= 1.0 and 1 <= gamma <= sys.float_info.max
    varies = bool(settings.adaptive or settings.dynamic
                  or any(r.stop_reason in ("entropy", "pmin", "no-match") for r in report.rounds))
    return {"alpha": alpha, "gamma": gamma, "cost_ratio": c, "tau": number_or_none(acc.tau, text=False),
            "expected_tokens": expected_tokens_per_round(alpha, gamma) if ok else None,
            "expected_speedup": expected_speedup(alpha, gamma, c) if ok and c is not None and c >= 0 else None,
            "breakeven_alpha": breakeven_alpha(gamma, c) if ok and c is not None and c >= 0 else None,
            "varies": varies}


def time_figures(report: Report) -> dict[str, float | None]:
    """Mean seconds of one draft forward and of one verify pass, from the rounds' own times (None without them).

    A verify pass fused with the prefill (``prefill_positions`` > 0) is the prefill's, not counted here,
    as :attr:`lab.speculative.results.SpeculativeResult.verify_time_s` does.
    """
    rounds = report.rounds
    draft_s = sum(number_or_none(r.draft_time_s, text=False) or 0.0 for r in rounds)
    draft_n = sum(r.n_draft_forwards for r in rounds)
    verify = [number_or_none(r.verify_time_s, text=False) for r in rounds if not r.prefill_positions]
    verify = [v for v in verify if v is not None]
    return {"draft_forward_s": draft_s / draft_n if draft_n else None,
            "verify_pass_s": sum(verify) / len(verify) if verify else None}


def headline(report: Report) -> str:
    """alpha, tokens per round beside the theory, tokens/s and gamma, in a line; each measured figure checked
    against its physical range (:func:`lab.views.core.figure`)."""
    acc = report.acceptance
    th = theory(report)
    return (f"alpha {figure(acc.alpha, PROBABILITY, 'alpha')} ({figure(acc.n_accepted, COUNT, 'a count')} "
            f"of {figure(acc.n_drafted_tested, COUNT, 'a count')} tested drafts kept), "
            f"{figure(acc.tau, NONNEGATIVE, 'tokens per round')} tokens per round (theory "
            f"{fmt(th['expected_tokens'])}), {figure(acc.tokens_per_s, NONNEGATIVE, 'a speed')} tokens/s at "
            f"gamma {figure(th['gamma'], GAMMA, 'gamma')}")


def page(files: ReportFiles, report: Report) -> KindPage:
    """The speculate page's own part: tokens by origin, rounds, theory and measurement.

    Args:
        files: The report directory as read (its ``accepted_length.png``).
        report: Its ``report.json``, typed.
    """
    tokens = generated_tokens(report)
    mismatch = [t["id"] for t in tokens] != report.new_token_ids
    counts = {o: sum(t["origin"] == o for t in tokens) for o, _ in ORIGINS}
    sections = (
        Section("Tokens by origin", render("speculate_tokens.html.j2", tokens=tokens, origins=ORIGINS, counts=counts,
                                           mismatch=mismatch, has_texts=bool(report.token_texts), inline=token_inline,
                                           visible=token_cell), "tokens"),
        Section("Rounds", render("speculate_rounds.html.j2", rounds=round_views(report), n_rounds=len(report.rounds),
                                 has_probs=any(r.target_probs for r in report.rounds), visible=token_cell), "rounds"),
        Section("Theory and measurement", render("speculate_theory.html.j2", th=theory(report),
                                                 acc=report.acceptance, times=time_figures(report),
                                                 image=files.images.get("accepted_length.png")), "theory"),
    )
    return KindPage(headline=headline(report), sections=sections,
                    covers=frozenset({"rounds.csv", "accepted_length.png"}))
