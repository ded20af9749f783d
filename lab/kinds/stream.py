"""``lab stream``: KV-cache eviction and attention sinks, perplexity and acceptance per retention policy."""

from lab.kinds import Kind

KIND = Kind("stream", listed=120, commands=("lab.commands.stream",), page="lab.views.kinds.stream")
