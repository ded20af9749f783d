"""``lab study``: the pre-stated hypotheses over many prompts and their twins (``study.json``)."""

from lab.kinds import Kind

KIND = Kind("study",
            listed=110,
            commands=("lab.commands.study",),
            page="lab.views.kinds.study",
            exact="study.json")
