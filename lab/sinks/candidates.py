"""The candidate sink statistics and how a threshold on each reads (definitions only; no I/O).

The rule of :func:`lab.sinks.calibration.choose_statistic` picks the detector's
statistic among :data:`STATISTICS`, in this order of preference (the least departure
from the SmolLM2-calibrated detector first); its choice is data
(``lab/sinks/calibrations/choice.json``, read by :func:`lab.sinks.profiles.load_choice`).
References: Gu et al. 2024 (arXiv:2410.10781) for the sink rate.

    gm_prose      robust z of the geometric mean over (layer, head), baseline content +
                  injected system prompt;
    gm_content    the same z, baseline content only;
    layer_median  median over layers of the per-layer z (geometric mean over heads,
                  content baseline): a sink stands out in most layers;
    am_content    robust z of the arithmetic mean, content baseline;
    sink_rate     Gu et al.'s fraction of (layer, head) with received attention > 0.3.
"""

from __future__ import annotations

STATISTICS = ("gm_prose", "gm_content", "layer_median", "am_content", "sink_rate")
# How a threshold on each statistic reads ("z > 3.5", "sink rate > 0.07").
STATISTIC_LABEL = {name: ("sink rate" if name == "sink_rate" else "z") for name in STATISTICS}
