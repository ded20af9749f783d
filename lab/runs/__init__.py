"""What every experiment's run shares, one home each: atomic files, the work directory's lock, shards.

- :mod:`lab.runs.files`: a run's JSON written whole or absent (:func:`~lab.runs.files.write_json_atomic`,
  through the lab's one atomic writer :func:`lab.files.write_text_atomic`), a unit's work-file name and a
  settings key;
- :mod:`lab.runs.locks`: the ``flock`` that keeps a second process out of a work directory
  (:func:`~lab.runs.locks.hold`), shared by the shards of one run;
- :mod:`lab.runs.shards`: the K-th of N round-robin slices of a run's units (:func:`~lab.runs.shards.deal`).

The study (:mod:`lab.study`) and the intervention (:mod:`lab.intervene`) import these; stdlib only, so
any layer of the lab may.
"""
