"""The draft dtype vocabulary (``--draft-dtype``): one definition for the study, the CLI and the help.

Names only, no torch, so that ``lab --help`` and the study's settings validation stay
light; :mod:`lab.speculative.per_pass` maps the names to torch dtypes and builds the drafts.
"""

from __future__ import annotations

DTYPE_NAMES = ("float32", "float16", "bfloat16")
# `--draft-dtype per-pass`: float32 prefill (fast on a CPU without bf16 arithmetic), bfloat16 steps.
PER_PASS_ALIAS = "per-pass"
PER_PASS_DEFAULT = ("float32", "bfloat16")
PER_PASS_SPEC = ":".join(PER_PASS_DEFAULT)  # "float32:bfloat16", the alias spelled PREFILL:STEP
# The named choices (one dtype, or the per-pass default under both spellings); the study accepts
# only these, `lab bench` any PREFILL:STEP pair of DTYPE_NAMES (lab.speculative.per_pass.parse_draft_dtype).
DRAFT_DTYPE_CHOICES = (*DTYPE_NAMES, PER_PASS_SPEC, PER_PASS_ALIAS)
# The commands' help for --draft-dtype, after their own first words.
DRAFT_DTYPE_HELP = (f"one dtype ({', '.join(DTYPE_NAMES)}), or per pass shape PREFILL:STEP (e.g. {PER_PASS_SPEC}: the "
                    f"prompt's pass in {PER_PASS_DEFAULT[0]}, one-token steps and short catch-ups in "
                    f"{PER_PASS_DEFAULT[1]}) or {PER_PASS_ALIAS} (= {PER_PASS_SPEC}; lab.speculative.per_pass)")
