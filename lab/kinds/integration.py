"""The integration tier's run log (``pytest -m integration`` writes it; no subcommand does)."""

from lab.kinds import Kind

KIND = Kind("integration", listed=150)
