"""``lab sinks``: attention received per key over one prompt's prefill, its sinks and template positions."""

from lab.kinds import Kind

KIND = Kind("sinks", listed=30, commands=("lab.commands.sinks",), page="lab.views.kinds.sinks")
