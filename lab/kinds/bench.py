"""``lab bench``, ``lab bench-seed-tables``, ``lab bench-tune`` (and ``bench-tune-runtime``): speculative
decoding against target-only and assisted generation, the seed's tables rerun, the set-ups timed here."""

from lab.kinds import Kind

KIND = Kind("bench",
            listed=100,
            commands=("lab.commands.bench", "lab.commands.bench_seed_tables", "lab.commands.bench_tune"),
            page="lab.views.kinds.bench",
            variants=("bench-tune", "bench-tune-runtime", "bench-seed-tables"))
