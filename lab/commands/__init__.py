"""One module per ``lab`` subcommand; see :mod:`lab.cli`."""
