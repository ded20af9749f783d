"""``lab intervene``: what a context added masked out, and what moves in entropy and acceptance."""

from lab.kinds import Kind

KIND = Kind("intervene", listed=130, commands=("lab.commands.intervene",), page="lab.views.kinds.intervene")
