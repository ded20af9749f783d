"""``lab bench-sinks``: the streaming sink capture's time and peak memory against plain and eager
prefill (``bench.json``)."""

from lab.kinds import Kind

KIND = Kind("bench-sinks", listed=70, commands=("lab.commands.bench_sinks",), page="lab.views.kinds.bench_sinks")
