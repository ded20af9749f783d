"""``lab stream``: KV-cache eviction and attention sinks (StreamingLLM, Xiao et al. 2023).

Modules, in dependency order: :mod:`.policies` (pure visibility functions),
:mod:`.analysis` (chunk statistics and the pre-stated test, numpy/scipy only),
:mod:`.perplexity` (masked one-pass NLL and the recompute oracle), :mod:`.detect`
(the sink detector on the text's first chunk), :mod:`.acceptance` (speculative
decoding with an evicting draft) and :mod:`.experiment` (the run behind the CLI).
"""
