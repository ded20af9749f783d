"""``lab view``: open a report's page, the experiment log, or two reports side by side.

Draw a report's self-contained page (index.html) or a reports folder's experiment log and print its path; with two
reports of one kind, write a page comparing them.

- ``lab view DIR``: DIR's page (``DIR/index.html``, drawn again from its files) or, for a reports
  folder, its experiment log; prints the path and opens it where a browser is available.
- ``lab view A B``: a comparison of two reports of one kind, written as a report of its own
  (``<out>/<timestamp>-compare-<kind>/index.html``, listed in the log).
- ``lab view --rebuild [ROOT]``: every report's page in ROOT drawn again, then the log.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.commands.common import add_out_arg, command_parser
from lab.kinds.compare import KIND as COMPARE
from lab.kinds.compare import Report as CompareReport
from lab.safe_text import printable


def register(subparsers: argparse._SubParsersAction) -> None:
    p = command_parser(subparsers, "view", run, __doc__)
    p.add_argument("reports", nargs="*", metavar="DIR",
                   help="a report directory or a reports folder (default: reports/); two report directories to compare")
    p.add_argument("--rebuild", action="store_true",
                   help="draw every report's page in the folder again, then the experiment log")
    p.add_argument("--no-open", action="store_true", help="print the page's path without opening a browser")
    add_out_arg(p)


def run(args: argparse.Namespace) -> int:
    from lab.views.open import open_page, rebuild_folder, show

    failed: list[str] = []
    # 1. What was asked: one folder (a report, or a reports root), two reports, or a rebuild.
    if len(args.reports) > 2:
        raise ValueError(f"DIR: {len(args.reports)} paths given; give one report or folder, or two reports to compare")
    if args.rebuild and len(args.reports) == 2:
        raise ValueError("--rebuild takes one reports folder, not two reports")
    # 2. Draw the page.
    if len(args.reports) == 2:
        page = write_comparison(Path(args.reports[0]), Path(args.reports[1]), Path(args.out))
    elif args.rebuild:
        folder = Path(args.reports[0] if args.reports else args.out)
        if (folder / "report.json").is_file():  # a report, not a folder of them: its own page is not a log's
            raise ValueError(f"--rebuild takes a reports folder, and {str(folder)!r} is one report: `lab view "
                             f"{folder}` draws its page, `lab view --rebuild {folder.parent}` every page there")
        page, count, failed = rebuild_folder(folder)
        print(f"{count} pages drawn again")
        for line in failed:  # each page not drawn, in one line; the others and the log are drawn
            print(f"lab view: error: {printable(line)}", file=sys.stderr)
    else:
        page = show(Path(args.reports[0] if args.reports else args.out))
    # 3. Say where it is (and open it where a browser is at hand).
    print(f"page: {page.resolve().as_uri()}")
    if not args.no_open and not open_page(page):
        print("no browser here: open that address on this machine, or copy the file (it is self-contained)")
    return 2 if failed else 0


def write_comparison(a: Path, b: Path, out: Path) -> Path:
    """Write the comparison of reports ``a`` and ``b`` as a report of its own under ``out``; return its page.

    Raises:
        ValueError: either is not a report directory, or the two are of different kinds.
    """
    from lab.reports import check_reports_root
    from lab.views.publish import report_folder
    from lab.views.compare import compare_html, read_pair
    from lab.views.open import drawn
    from lab.views.page import PAGE

    first, second = read_pair(a, b)
    check_reports_root(out)
    html = drawn(f"A={str(a)!r} and B={str(b)!r}", compare_html, first, second)
    with report_folder(out, COMPARE, first.kind) as rd:
        rd.write_report(CompareReport(compared_kind=first.kind, a=str(a.resolve()), b=str(b.resolve())))
        (rd.path / PAGE).write_text(html, encoding="utf-8", errors="backslashreplace")
    return rd.final / PAGE
