"""What ``lab speculate`` runs and what its report holds: decided here, drawn by :mod:`lab.render.speculative`.

:class:`SpeculateConfig` is the command's flags once checked and resolved (the draft in
force, the set-up and where each field came from, the loop's settings, the seed), built
before any model loads. Its :meth:`~SpeculateConfig.report` is ``report.json``'s content
and :meth:`~SpeculateConfig.setup_lines` / :meth:`~SpeculateConfig.summary_notes` the
set-up's lines for the terminal and ``summary.md``, so the command only loads, decodes,
renders and writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.speculative.admission import DraftCost
from lab.speculative.results import SpeculativeResult
from lab.speculative.settings import SpeculativeSettings
from lab.speculative.setups import ResolvedSetup

NOTE_STYLE = "yellow"  # a tuning file ignored, a costly draft: worth reading, not an error


@dataclass(frozen=True)
class SpeculateConfig:
    """One ``lab speculate`` run as decided before any model loads.

    Attributes:
        prompt: The user's prompt, as typed.
        system: The system prompt, or None.
        messages: The chat messages built from them (role, content).
        draft_spec: The draft in force (``--draft`` or the profile's).
        chosen: The draft set-up and where each field came from
            (:func:`lab.tuning.choose_setup`).
        settings: The loop's settings for that set-up (EOS ids are the tokenizer's, filled in
            once it is loaded).
        seed: The sampling seed (drawn when not given, and recorded).
        runtime: Whose kernels run the passes (``"torch"`` or ``"llama.cpp"``).
        runtime_source: Where that came from (``"--runtime"`` or ``"default: <why>"``).
    """

    prompt: str
    system: str | None
    messages: list[dict[str, str]]
    draft_spec: str
    chosen: ResolvedSetup
    settings: SpeculativeSettings
    seed: int
    runtime: str = "torch"
    runtime_source: str = "default"

    def setup_lines(self) -> list[tuple[str, str | None]]:
        """``(line, Rich style or None)`` for the terminal once the draft is admitted: each note, then the set-up."""
        return ([(f"note: {note}", NOTE_STYLE) for note in self.chosen.notes]
                + [(f"runtime: {self.runtime} ({self.runtime_source})", None), (self.chosen.summary_line(), None)])

    def summary_notes(self, cost: DraftCost | None) -> str:
        """The set-up, its notes and a costly draft's note, as ``summary.md``'s closing paragraphs."""
        text = f"\n**Runtime.** {self.runtime} ({self.runtime_source}).\n"
        text += f"\n**Draft set-up.** {self.chosen.summary_line().removeprefix('draft set-up: ')}.\n"
        text += "".join(f"\n{note}\n" for note in self.chosen.notes)
        if cost is not None and cost.note:
            text += f"\n**Draft cost.** {cost.note}.\n"
        return text

    def report(self, result: SpeculativeResult, *, prompt_ids: list[int], model_info: dict[str, Any],
               environment: dict[str, Any], text: str, cost: DraftCost | None,
               token_texts: dict[int, str] | None = None) -> dict[str, Any]:
        """``report.json``'s content.

        Args:
            result: The decode's :class:`~lab.speculative.results.SpeculativeResult`.
            prompt_ids: The encoded chat prompt (token ids).
            model_info: The target model's provenance record, as a dict.
            environment: :func:`lab.reports.environment` of the run.
            text: The answer as a user reads it (special tokens not shown).
            cost: The draft's FLOP cost ratio (:attr:`lab.speculative.drafts.DraftFacts.cost`), or None.
            token_texts: Each generated or proposed token id's text as decoded alone (the report page
                shows tokens with it), or None.

        Returns:
            The report: the prompt, the settings and set-up with its sources, the model, the
            acceptance figures (:meth:`~lab.speculative.results.SpeculativeResult.acceptance_summary`),
            the answer, and every round and drafted token.
        """
        setup = self.chosen.setup
        return {
            "kind": "speculate",
            "prompt": self.prompt, "system": self.system, "messages": self.messages,
            "prompt_ids": prompt_ids,
            "settings": {"draft": self.draft_spec, "gamma": self.settings.gamma, "adaptive": setup.adaptive,
                         "draft_dtype": setup.draft_dtype, "dynamic": setup.dynamic,
                         "draft_setup": self.chosen.as_dict(), "max_new_tokens": self.settings.max_new_tokens,
                         "sampling": self.settings.sampling, "seed": self.seed,
                         "runtime": self.runtime, "runtime_source": self.runtime_source},
            "model": model_info, "environment": environment,
            "acceptance": result.acceptance_summary(), "draft_cost": cost,
            "text": text, "new_token_ids": result.tokens,
            "rounds": result.rounds, "per_token": result.per_token(),
            "token_texts": {str(t): x for t, x in sorted((token_texts or {}).items())},
        }
