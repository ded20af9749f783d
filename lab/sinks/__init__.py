"""Part 2, the attention-sink detector (no names are re-exported here).

From the math up: :mod:`lab.sinks.scores` (received attention, sink rate, robust z:
pure tensors), :mod:`lab.sinks.structure` (which positions the chat template fixes),
:mod:`lab.sinks.capture` (streaming capture of received attention during prefill),
:mod:`lab.sinks.profiles` (each model's calibrated statistic and threshold, read from
``lab/sinks/calibrations/<profile>.json``), :mod:`lab.sinks.prefill` (the prefill
analysis) and :mod:`lab.sinks.calibration` (the rule that writes those files).
References: Xiao et al. 2023 (StreamingLLM); Gu et al. 2024 (When attention sink emerges).
"""
