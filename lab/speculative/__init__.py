"""Speculative decoding: a draft proposes gamma tokens, the target verifies them in one pass.

Modules, in dependency order: :mod:`.verify` and :mod:`.theory` (pure math, on the
lab's one sampling filter :mod:`lab.sampling`); :mod:`.admission` (which drafts a
target admits, and their cost); :mod:`.drafts` (the :class:`~.drafts.Drafter`
interface, a model draft and prompt lookup), :mod:`.self_draft` (the early-exit draft
on the target's cache) and :mod:`.per_pass` (a draft in two dtypes, and the draft
dtype vocabulary); :mod:`.draft_specs` (drafters from spec strings); :mod:`.policies`
(each round's gamma); :mod:`.setups` (a draft set-up and where each field came from);
:mod:`.settings` (the loop's one settings object); :mod:`.results` (result types and the
statistics derived from them); :mod:`.loop` (the decode loop, on the decode core
:mod:`lab.decode`) and :mod:`.no_cache` (the same loop without KV caches); :mod:`.report`
(what ``lab speculate`` runs and reports).
Measurements live in :mod:`lab.bench`.
References: Leviathan, Kalman & Matias 2023; Chen et al. 2023.
"""
