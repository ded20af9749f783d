"""Result types of the speculative loop and of the target-only baseline, with the statistics derived from them.

:class:`RoundRecord` keeps one draft-verify-accept round; :class:`SpeculativeResult`
keeps raw counts (accepted, tested, drafted, the accepted-length histogram) and
derives the rates (alpha, tau) and the goodness of fit of the histogram to the
truncated geometric law (:meth:`SpeculativeResult.geometric_fit`), so renderers and
reports only display. :class:`TargetOnlyResult` is the baseline of ``lab bench``.
p = target, q = draft (Leviathan et al. 2023).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lab.kinds.speculate import Round
from lab.sampling import SamplingConfig
from lab.speculative.theory import accepted_length_pmf, expected_tokens_per_round, geometric_fit


class RoundRecord(Round):
    """One draft-verify-accept round: the report's :class:`lab.kinds.speculate.Round` (NaN where the file holds
    null), with what follows from it."""

    @property
    def emitted(self) -> list[int]:
        kept = self.proposed[: self.n_accepted]
        return kept + ([self.next_token] if self.next_token is not None else [])

    @property
    def n_tested(self) -> int:
        """Proposed tokens the target tested."""
        return sum(self.tested_mask)

    @property
    def mean_draft_entropy(self) -> float:
        """Mean draft entropy (bits) over the proposed tokens; NaN for a round that proposed none."""
        return sum(self.draft_entropies) / len(self.draft_entropies) if self.draft_entropies else float("nan")

    def follows_geometric_law(self, gamma: int) -> bool:
        """Whether the truncated geometric law at maximum draft length ``gamma`` describes this round:
        the full ``gamma`` tokens drafted (a gamma policy's shorter rounds follow another truncation),
        not cut by EOS, the budget or an adaptive stop."""
        return len(self.proposed) == gamma and self.stop_reason == "gamma" and self.next_kind != "none"


@dataclass
class SpeculativeResult:
    """The outcome of :func:`lab.speculative.loop.speculative_generate`.

    The rounds are the record; every count is derived from them, then the rates:
    ``alpha`` = ``n_accepted / n_drafted_tested`` (only tokens the target actually
    tested), ``tau`` = mean tokens emitted per round (accepted + correction/bonus;
    compare with :func:`lab.speculative.theory.expected_tokens_per_round`).

    Attributes:
        tokens: new token ids (the prompt excluded), at most max_new_tokens.
        rounds: per-round records.
        gamma: the maximum draft length.
        prompt_length: prompt tokens.
        stopped_by: ``"eos"`` or ``"max_new_tokens"``.
        prefill_time_s, total_time_s: wall times (the rounds hold the draft and verify
            times); the orchestration overhead is ``total - prefill - draft - verify``. With the
            prefill fused into the first verify pass, ``prefill_time_s`` is that pass (which also
            verified the first round's drafts) and ``verify_time_s`` leaves it out.
        draft_name, sampling, adaptive, gamma_policy: what was run.
    """

    tokens: list[int]
    rounds: list[RoundRecord]
    gamma: int
    prompt_length: int
    stopped_by: str
    prefill_time_s: float
    total_time_s: float
    draft_name: str
    sampling: SamplingConfig
    adaptive: str | None = None
    gamma_policy: str | None = None

    @property
    def n_drafted(self) -> int:
        """Tokens proposed."""
        return sum(len(r.proposed) for r in self.rounds)

    @property
    def n_drafted_tested(self) -> int:
        """Proposed tokens the target tested."""
        return sum(r.n_tested for r in self.rounds)

    @property
    def n_accepted(self) -> int:
        """Proposed tokens kept."""
        return sum(r.n_accepted for r in self.rounds)

    @property
    def accepted_length_histogram(self) -> list[int]:
        """``[gamma + 1]`` counts of rounds by n_accepted, over the rounds the truncated geometric
        law describes (:meth:`RoundRecord.follows_geometric_law`)."""
        return _histogram([r for r in self.rounds if r.follows_geometric_law(self.gamma)], self.gamma)

    @property
    def all_rounds_histogram(self) -> list[int]:
        """The same over every round."""
        return _histogram(self.rounds, self.gamma)

    @property
    def draft_time_s(self) -> float:
        return sum(r.draft_time_s for r in self.rounds)

    @property
    def verify_time_s(self) -> float:
        """Target verify passes, seconds; a pass fused with the prefill counts as the prefill."""
        return sum(r.verify_time_s for r in self.rounds if not r.prefill_positions)

    @property
    def n_verify_passes(self) -> int:
        """Verify passes timed in :attr:`verify_time_s` (the fused first one is the prefill)."""
        return sum(1 for r in self.rounds if not r.prefill_positions)

    @property
    def alpha(self) -> float:
        return self.n_accepted / self.n_drafted_tested if self.n_drafted_tested else float("nan")

    @property
    def tau(self) -> float:
        return len(self.tokens) / len(self.rounds) if self.rounds else float("nan")

    @property
    def decode_time_s(self) -> float:
        return self.total_time_s - self.prefill_time_s

    @property
    def decode_tokens(self) -> int:
        """Tokens emitted in :attr:`decode_time_s`: all of them, less those of a first round whose verify pass
        was the fused prefill (that pass's time is :attr:`prefill_time_s`, so its tokens are not the decode's)."""
        fused = self.rounds[0].emitted if self.rounds and self.rounds[0].prefill_positions else []
        return len(self.tokens) - len(fused)

    @property
    def overhead_time_s(self) -> float:
        return self.total_time_s - self.prefill_time_s - self.draft_time_s - self.verify_time_s

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.total_time_s if self.total_time_s > 0 else float("nan")

    @property
    def expected_tokens_per_round(self) -> float:
        """Tokens per round the i.i.d. law predicts at the measured :attr:`alpha` (Leviathan et al.
        2023, Eq. 1; compare with :attr:`tau`); NaN when nothing was tested."""
        return math.nan if math.isnan(self.alpha) else expected_tokens_per_round(self.alpha, self.gamma)

    def geometric_fit(self) -> dict[str, Any]:
        """Chi-square fit of :attr:`accepted_length_histogram` to the truncated geometric law at :attr:`alpha`.

        See :func:`lab.speculative.theory.geometric_fit`: ``{"expected", "chi2",
        "p_value", "bins"}``; a small p-value says acceptances are not i.i.d.
        """
        return geometric_fit(self.accepted_length_histogram, self.alpha)

    def expected_histogram(self) -> list[float]:
        """Expected counts of :attr:`accepted_length_histogram` under the truncated geometric law at :attr:`alpha`."""
        n = sum(self.accepted_length_histogram)
        if not n or math.isnan(self.alpha):
            return [0.0] * (self.gamma + 1)
        return [n * p for p in accepted_length_pmf(self.alpha, self.gamma)]

    def acceptance_summary(self) -> dict[str, Any]:
        """The acceptance figures in one dict (``lab speculate``'s panel, ``summary.md`` and
        ``report.json``): the raw counts, the rates derived from them, the histograms, the
        geometric fit, and the time split; every value derived from the rounds."""
        fit = self.geometric_fit()
        return {
            "alpha": self.alpha, "tau": self.tau, "n_rounds": len(self.rounds), "n_drafted": self.n_drafted,
            "n_drafted_tested": self.n_drafted_tested, "n_accepted": self.n_accepted,
            "expected_tokens_per_round_at_alpha": self.expected_tokens_per_round,
            "accepted_length_histogram": self.accepted_length_histogram,
            "all_rounds_histogram": self.all_rounds_histogram,
            "geometric_expected": fit["expected"], "geometric_chi2": fit["chi2"], "geometric_p_value": fit["p_value"],
            "tokens": len(self.tokens), "tokens_per_s": self.tokens_per_s,
            "prefill_time_s": self.prefill_time_s, "draft_time_s": self.draft_time_s,
            "verify_time_s": self.verify_time_s, "overhead_time_s": self.overhead_time_s,
            "total_time_s": self.total_time_s, "stopped_by": self.stopped_by,
        }

    def per_token(self) -> list[dict[str, Any]]:
        """One dict per drafted token: round, index, draft_entropy_bits,
        draft_normalized_entropy, accepted, tested, token_id."""
        rows = []
        for r in self.rounds:
            for i, tok in enumerate(r.proposed):
                rows.append({"round": r.round, "index": i, "token_id": tok,
                             "draft_entropy_bits": r.draft_entropies[i],
                             "draft_normalized_entropy": r.draft_normalized_entropies[i],
                             "accepted": r.accepted_mask[i], "tested": r.tested_mask[i]})
        return rows


def _histogram(rounds: list[RoundRecord], gamma: int) -> list[int]:
    counts = [0] * (gamma + 1)
    for r in rounds:
        counts[r.n_accepted] += 1
    return counts


@dataclass
class TargetOnlyResult:
    """Plain decoding with the target alone (the baseline of ``lab bench``)."""

    tokens: list[int]
    prefill_time_s: float
    forward_time_s: float
    total_time_s: float
    stopped_by: str

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.total_time_s if self.total_time_s > 0 else float("nan")

    @property
    def decode_step_time_s(self) -> float:
        """Mean wall time of one one-token decode forward (prefill excluded)."""
        steps = max(1, len(self.tokens) - 1)
        return (self.forward_time_s - self.prefill_time_s) / steps
