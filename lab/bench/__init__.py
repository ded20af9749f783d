"""``lab bench``: measuring speculative decoding on this machine (no names are re-exported here).

:mod:`lab.bench.run` (the alternating schedule of methods and the figures derived from
it), :mod:`lab.bench.levers` and :mod:`lab.bench.phases` (what a round's time goes to),
:mod:`lab.bench.prompt_split` (the fixed tuning / held-back split of HumanEval) and
:mod:`lab.bench.peer` (llama.cpp beside the lab, the same GGUF files).
"""
