"""``lab calibrate-health``: the context-health candidates evaluated on the calibration prompts, one
chosen (``report.json``; ``calibration.json`` before format 1)."""

from lab.kinds import Kind

KIND = Kind("calibrate-health", listed=50, commands=("lab.commands.calibrate_health",),
            older_file="calibration.json")
