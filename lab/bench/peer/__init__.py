"""A second runtime beside the lab: llama.cpp built from the pinned ``llama-cpp-python`` sdist.

- :mod:`lab.runtime.build` (built there because the lab's own llama.cpp runtime shares the compile): ``make peer``
  (``python -m lab.runtime.build``), once, never half-installed;
- :mod:`lab.bench.peer.llamacpp`: locate the binaries, build their command lines;
- :mod:`lab.bench.peer.parse`: parse what they print (a moved field raises, naming it);
- :mod:`lab.bench.peer.bench`: their target alone and speculative decoding as ``lab bench`` methods;
- :mod:`lab.bench.peer.cli`, :mod:`lab.bench.peer.report`: ``--peer`` / ``--llama-cpp`` and the summary section.
"""
