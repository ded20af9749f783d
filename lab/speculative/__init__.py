"""Speculative decoding: a draft proposes gamma tokens, the target verifies them in one pass.

Modules, in dependency order: :mod:`.verify` and :mod:`.theory` (pure math),
the lab's one sampling filter (:mod:`lab.sampling`, re-exported as :mod:`.sampling`), :mod:`.drafts` (candidate
generation), :mod:`.results` (result types and the statistics derived from them),
:mod:`.loop` (the decode loop, on the decode core :mod:`lab.decode`) and
:mod:`.bench` (measurements).
References: Leviathan, Kalman & Matias 2023; Chen et al. 2023.
"""
