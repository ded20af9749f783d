"""The builders of the lab's packaged data sets: they write ``lab/data/*.jsonl`` in a checkout.

The data files ship in the wheel (``pyproject.toml``'s package-data); these builders do not:
the lab reads the files and never runs a builder. Each builder is deterministic for a given
CPython, set of installed package versions and tokenizers; the unit tier rebuilds the study sets,
the calibration's neutral variants, the intervention triples and the context measure's paired sets
and compares them with the files byte for byte. Run a builder from the repository root (``make setup-test`` installs the tokenizers
they count with; a builder names any source package it reads that is not installed; no weights)::

    python -m tools.datagen.make_health_validation     # health_validation.jsonl, length_reference_docstrings.jsonl
    python -m tools.datagen.make_context_validation    # context_{selection,validation,heldback}.jsonl
    python -m tools.datagen.make_length_reference      # length_reference.jsonl
    python -m tools.datagen.make_intervention_triples  # distractors.jsonl, intervention_{pilot,triples}.jsonl
    python -m tools.datagen.make_study_twins           # prompts.jsonl's twins, calibration_neutral.jsonl
    python -m tools.datagen.make_prompts_large         # prompts_large.jsonl
    python -m tools.datagen.make_prompts_power         # prompts_power.jsonl

The builders read one another's files (the distractor sample, the sets whose text another set
must not share): after rebuilding one file, run the unit tier, whose regeneration tests name any
other file that no longer matches its builder.
:mod:`tools.datagen.make_neutral_twins` holds the rules the twin builders share.
"""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[2] / "lab" / "data"  # the checkout's lab/data, which the wheel ships
