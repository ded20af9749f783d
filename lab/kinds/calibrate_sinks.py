"""``lab calibrate-sinks``: the attention-sink threshold calibrated on a prompt set (``calibration.json``)."""

from lab.kinds import Kind

KIND = Kind("calibrate-sinks",
            listed=40,
            commands=("lab.commands.calibrate_sinks",),
            page="lab.views.kinds.calibrate_sinks")
