"""``lab calibrate-health``: the context-health candidates evaluated on the calibration prompts, one
chosen (``calibration.json``)."""

from lab.kinds import Kind

KIND = Kind("calibrate-health", listed=50, commands=("lab.commands.calibrate_health",))
