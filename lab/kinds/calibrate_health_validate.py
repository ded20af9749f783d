"""``lab calibrate-health --validate``: the context-health measure judged on labelled text
(``report.json``; ``validation.json`` before format 1); written by the calibrate-health command, so it
lists no command of its own."""

from lab.kinds import Kind

KIND = Kind("calibrate-health-validate", listed=55, page="lab.views.kinds.calibrate_health_validate",
            older_file="validation.json")
