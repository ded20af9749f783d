"""``lab bench``: measuring speculative decoding on this machine (no names are re-exported here).

:mod:`lab.bench.run` (the alternating schedule of methods and the figures derived from
it) and :mod:`lab.bench.results` (those figures as types), :mod:`lab.bench.levers` and
:mod:`lab.bench.phases` (what a round's time goes to), :mod:`lab.bench.prompt_split` (the fixed
tuning / held-back split of HumanEval), :mod:`lab.bench.seed_tables` and :mod:`lab.bench.tune`
(``lab bench-seed-tables`` / ``bench-tune``), :mod:`lab.bench.peer` (llama.cpp beside the lab, the
same GGUF files), and the other benches: :mod:`lab.bench.tracker`, :mod:`lab.bench.sinks` and
:mod:`lab.bench.weights`.
"""
