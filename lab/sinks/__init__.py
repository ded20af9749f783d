"""Part 2, the attention-sink detector (no names are re-exported here).

From the math up: :mod:`lab.sinks.scores` (received attention, sink rate, robust z:
pure tensors), :mod:`lab.sinks.structure` (which positions the chat template fixes),
:mod:`lab.sinks.capture` (streaming capture of received attention during prefill),
:mod:`lab.sinks.candidates` (the candidate statistics), :mod:`lab.sinks.profiles` (the
one loader of the packaged calibrations: the chosen statistic and default threshold in
``lab/sinks/calibrations/choice.json``, each model's threshold in
``lab/sinks/calibrations/<profile>.json``), :mod:`lab.sinks.prefill` (the prefill
analysis) and :mod:`lab.sinks.calibration` (the rule whose results those files hold).
References: Xiao et al. 2023 (StreamingLLM); Gu et al. 2024 (When attention sink emerges).
"""
