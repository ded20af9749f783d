"""``lab study``: the pre-stated hypotheses over many prompts and their twins (``report.json``;
``study.json`` before format 1)."""

from lab.kinds import Kind

KIND = Kind("study",
            listed=110,
            commands=("lab.commands.study",),
            page="lab.views.kinds.study",
            older_file="study.json")
