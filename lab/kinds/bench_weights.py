"""``lab bench-weights``: time and numerics of float32, bfloat16, int8 and q4 weights on a GGUF model."""

from lab.kinds import Kind

KIND = Kind("bench-weights", listed=80, commands=("lab.commands.bench_weights",))
