"""``lab view A B``: two reports side by side; ``lab view`` itself writes no other kind."""

from lab.kinds import Kind

KIND = Kind("compare", listed=140, commands=("lab.commands.view",))
