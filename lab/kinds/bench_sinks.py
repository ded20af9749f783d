"""``lab bench-sinks``: the streaming sink capture's time and peak memory against plain and eager
prefill (``report.json``; ``bench.json`` before format 1)."""

from lab.kinds import Kind

KIND = Kind("bench-sinks", listed=70, commands=("lab.commands.bench_sinks",), page="lab.views.kinds.bench_sinks",
            older_file="bench.json")
