"""lab: an LLM inference-internals laboratory.

Parts: the entropy tracker (:mod:`lab.entropy`, :mod:`lab.tracker`), the
attention-sink detector (:mod:`lab.sinks.scores`), speculative decoding
(:mod:`lab.speculative`) and the empirical study (:mod:`lab.study`). Every decode
(tracker, target-only baseline, the speculative loop's prefill) runs on the decode
core :mod:`lab.decode`. Models load through :mod:`lab.models.loading`; reports are written
by :mod:`lab.reports`.
"""

__version__ = "0.1.0"
