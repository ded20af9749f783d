"""``lab intervene``: the causal chain tested by intervening on attention, on twin triples.

A triple is a clean question, its poisoned twin P (a distractor, a blank line, the question)
and its neutral twin N (relevant text of the same added length, a blank line, the question).
Every arm of each twin scores the same tokens, the target's greedy continuation of the clean
prompt (teacher-forced), with the target and its draft masked alike:

* ``A0`` no intervention; ``empty`` the mask machinery with a zero shift (must equal A0);
* ``A1`` decode queries cannot attend to the added span; ``L0.5`` / ``L0.25`` their attention
  logits onto it shifted by log(lambda) (a dose);
* ``sink`` decode queries cannot attend to position 0, the attention sink (described);
* ``C+`` decode queries cannot attend to the question (a positive control: it must move entropy);
* ``A2`` no query after the span attends to it (the twin becomes its clean prompt at the
  same positions: a position-only control).

Outcomes per arm and decode position: target entropy (bits), expected acceptance beta =
sum_x min(p(x), q(x)) (Leviathan et al. 2023), and the attention mass the target's decode
queries put on the span (the mediator) and on key 0 (Xiao et al. 2023).

Modules: :mod:`.masks` (the added span and the arms' masks) and :mod:`.score` (the
teacher-forced passes and each arm's outcomes). The names below are re-exported lazily, so
importing a light module of this package (for ``--help``) imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ARMS": "masks", "LAMBDAS": "masks", "AddedSpan": "masks", "Intervention": "masks",
    "arm_intervention": "masks", "intervention_mask": "masks", "twin_prompt_ids": "masks",
    "ArmOutcome": "score", "TwinOutcome": "score", "greedy_continuation": "score", "score_twin": "score",
    "plain_pass": "score", "intervened_logits": "score",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
