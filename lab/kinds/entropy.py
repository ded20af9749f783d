"""``lab entropy``: one prompt decoded with the entropy tracker (``report.json``, ``tokens.csv``, ``entropy.png``,
``summary.md``)."""

from lab.kinds import Kind

KIND = Kind("entropy", listed=10, commands=("lab.commands.entropy",), page="lab.views.kinds.entropy")
