"""Re-export of :mod:`lab.sampling`, the lab's one sampling filter (its old home).

The filter moved to the ground floor so the decode core no longer imports upward
from :mod:`lab.speculative`; this module keeps ``lab.speculative.sampling`` imports
working. New code imports :mod:`lab.sampling`.
"""

from lab.sampling import SamplingConfig, apply_processors, filter_logits, sample, sampling_probs

__all__ = ["SamplingConfig", "apply_processors", "filter_logits", "sample", "sampling_probs"]
