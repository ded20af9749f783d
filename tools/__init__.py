"""Scripts run from a checkout of the lab, never shipped in its wheel (``tools`` is not a package of it)."""
