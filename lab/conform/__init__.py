"""Conformance: does another inference engine draw from the law it claims?

``lab conform`` (to come) tests an engine (llama.cpp's ``llama-server``, any
OpenAI-compatible URL) against the lab's own reference decode of the same weights:

* :mod:`.chains`: the reference law of one next-token step under an engine's DECLARED
  filter chain (transformers and the lab: temperature -> top-k -> top-p -> min-p;
  llama.cpp: top-k -> top-p -> min-p -> temperature).
* :mod:`.stats`: the goodness-of-fit test of token counts against that law (chi-square
  with pooled bins plus an exact check for impossible tokens), the samples a setting
  needs for a stated power, Holm across settings, greedy equality except at near-ties,
  and the logprob tolerance check.
* :mod:`.fake`: a fake engine drawing through a declared chain, with the four planted
  defects the suite must catch (the tests' engine, later the planted-defect proxy's).
* :mod:`.client` and :mod:`.answers`: the HTTP side, standard library only: requests to
  an engine's completions server with every sampling field sent, and its answers read
  field by field (:class:`~lab.conform.answers.EngineError`, one line, for anything else).
* :mod:`.fake_server`: an in-process completions server over the fake engine, so the
  client -> server -> law test path runs without a model.
* :mod:`.checks`: the checks over a client and a reference (the sampling law per setting
  with Holm, greedy equality with logprobs, the same seed), with lab.verdicts' words.

Importing the package imports nothing (numpy comes with :mod:`.chains`; torch and scipy
are imported inside the functions that need them). The design and what remains (starting
``llama-server``, the lab-side reference decode, the CLI, the report) are in
docs/design.md, "Conformance: the law each engine claims".
"""
