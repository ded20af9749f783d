"""Conformance: does another inference engine draw from the law it claims?

``lab conform`` (issue 67) tests an engine (llama.cpp's ``llama-server``, any
OpenAI-compatible URL) against the lab's own reference decode of the same weights. This
package is its engine-agnostic core, pure math on numbers (no model, no HTTP, no files):

* :mod:`.chains`: the reference law of one next-token step under an engine's DECLARED
  filter chain (transformers and the lab: temperature -> top-k -> top-p -> min-p;
  llama.cpp: top-k -> top-p -> min-p -> temperature).
* :mod:`.stats`: the goodness-of-fit test of token counts against that law (chi-square
  with pooled bins plus an exact check for impossible tokens), the samples a setting
  needs for a stated power, Holm across settings, greedy equality except at near-ties,
  and the logprob tolerance check.
* :mod:`.fake`: a fake engine drawing through a declared chain, with the four planted
  defects the suite must catch (the tests' engine, later the planted-defect proxy's).

Importing the package imports nothing (numpy comes with :mod:`.chains`; torch and scipy
are imported inside the functions that need them). The design and what remains (the
HTTP client, starting ``llama-server``, the CLI, the report) are in docs/design.md,
"Conformance: the law each engine claims".
"""
