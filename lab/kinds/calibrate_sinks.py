"""``lab calibrate-sinks``: the attention-sink threshold calibrated on a prompt set (``report.json``;
``calibration.json`` before format 1)."""

from lab.kinds import Kind

KIND = Kind("calibrate-sinks",
            listed=40,
            commands=("lab.commands.calibrate_sinks",),
            page="lab.views.kinds.calibrate_sinks",
            older_file="calibration.json")
