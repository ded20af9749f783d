"""``lab speculate``: one prompt through speculative decoding, accepted drafts, corrections and bonus
tokens replayed, theory beside measurement."""

from lab.kinds import Kind

KIND = Kind("speculate", listed=90, commands=("lab.commands.speculate",), page="lab.views.kinds.speculate")
