"""Part 2's per-prompt score: graded context health (no names are re-exported here).

:mod:`lab.health.measures` holds the candidate measures and their properties (pure
math on received attention); :mod:`lab.health.calibration` the rule that chooses one.
"""
