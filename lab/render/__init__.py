"""Rendering: Rich terminal output and matplotlib figures. The only place Rich lives."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (figures go to files, never to a window); imported on call,
    so a command that draws nothing never loads matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi: int = 110, tight: bool = True) -> None:
    """Write ``fig`` to ``path`` (laid out tight first, unless ``tight`` is False) and close it."""
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
