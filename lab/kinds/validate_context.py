"""``lab validate-context``: the per-prompt context measure judged on labelled documentation nobody
here wrote."""

from lab.kinds import Kind

KIND = Kind("validate-context",
            listed=60,
            commands=("lab.commands.validate_context",),
            page="lab.views.kinds.validate_context")
