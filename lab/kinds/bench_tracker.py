"""``lab bench-tracker``: the entropy tracker's overhead on decode time."""

from lab.kinds import Kind

KIND = Kind("bench-tracker", listed=20, commands=("lab.commands.bench_tracker",))
