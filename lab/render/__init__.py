"""Rendering: Rich terminal output and matplotlib figures. The only place Rich lives."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (figures go to files, never to a window); imported on call,
    so a command that draws nothing never loads matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
