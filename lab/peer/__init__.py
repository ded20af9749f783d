"""A second runtime beside the lab: llama.cpp built from the pinned ``llama-cpp-python`` sdist.

- :mod:`lab.peer.build`: ``make peer`` (``python -m lab.peer.build``), once, never half-installed;
- :mod:`lab.peer.llamacpp`: locate the binaries, build their command lines;
- :mod:`lab.peer.parse`: parse what they print (a moved field raises, naming it);
- :mod:`lab.peer.bench`: their target alone and speculative decoding as ``lab bench`` methods;
- :mod:`lab.peer.cli`, :mod:`lab.peer.report`: ``--peer`` / ``--llama-cpp`` and the summary section.
"""
