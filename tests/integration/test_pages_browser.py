"""Every report page the tier wrote, opened from disk in a real browser (Debian's headless Chromium).

These tests run last in the integration tier, and the two that open every page and the log run last
in this file (after the comparisons it writes) (``conftest.py`` moves them there), so they see the
reports the tier's other tests wrote into the run folder; a kind the run folder lacks (this file
run alone) is made here with the embedded model in a few seconds. Each page must open from
``file://`` with no console error and no request leaving the disk; tokens show their
alternatives on hover and on keyboard focus; every plotted point of a study page links to its
prompt's row; the experiment log lists every run. Each page's screenshot is saved into the run
folder's ``screenshots/``, beside the tier's index.

Fault classes guarded: a page that fetches a script, a font or a plot (offline it breaks, and it
leaks that the page was opened), a script error that leaves a view half-drawn, a tooltip that
only a mouse can open, a plotted point that cannot be traced to its prompt, a run missing from
the log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.views.page import PAGE
from tests.support import report_dirs

pytestmark = pytest.mark.integration

# The quick kinds this file makes itself when the run folder has none (the embedded model, few tokens).
QUICK = {
    "entropy": ["entropy", "Name three primary colours.", "--max-new-tokens", "24"],
    "speculate": ["speculate", "Write a haiku about the sea.", "--max-new-tokens", "24", "--draft", "early-exit:24"],
    "sinks": ["sinks", "Summarize: The quick brown fox jumps over the lazy dog. The dog did not react."],
}


def _reports(folder: Path, kind: str) -> list[Path]:
    from lab.views.files import kind_of

    return [p for p in report_dirs(folder) if kind_of(p.name) == kind]


@pytest.fixture(scope="module")
def run_folder(lab_log_dir: Path, smollm2) -> Path:
    """The tier's run folder, with at least one report of each quick kind in it."""
    from lab import cli

    for kind, argv in QUICK.items():
        if not _reports(lab_log_dir, kind):
            assert cli.main([*argv, "--model", "smollm2", "--out", str(lab_log_dir)]) == 0
    return lab_log_dir


def _shot(browser, folder: Path, name: str) -> Path:
    shots = folder / "screenshots"
    shots.mkdir(exist_ok=True)
    return browser.screenshot(shots / f"{name}.png")


def test_entropy_token_shows_its_alternatives_on_hover_and_on_focus(browser, run_folder):
    """A token's alternatives are hidden until the mouse is on it, and show on keyboard focus too."""
    report = _reports(run_folder, "entropy")[-1]
    browser.open(report / PAGE)
    assert browser.script("return document.querySelectorAll('.tok').length") > 0
    assert not browser.visible(".tok .alts")
    browser.hover(".tok")
    assert browser.visible(".tok .alts"), "hovering a token shows no alternatives"
    _shot(browser, run_folder, "entropy-hover")
    browser.hover("h1")
    browser.focus(".tok:nth-of-type(2)")
    shown = browser.script("var t = document.activeElement; return t.classList.contains('tok') && "
                           "getComputedStyle(t.querySelector('.alts')).display !== 'none'")
    assert shown, "a focused token shows no alternatives"


def test_speculate_page_marks_every_token_by_origin_and_rounds_expand(browser, run_folder):
    """Each generated token carries its origin (accepted draft, correction, bonus); a round opens to its
    proposals; a focused token shows its round."""
    report = _reports(run_folder, "speculate")[-1]
    opened = browser.open(report / PAGE)
    assert not opened.console_errors and not opened.remote_requests, opened
    origins = browser.script("return Array.from(document.querySelectorAll('#spec-tokens .tok')).map(t => t.dataset.origin)")
    assert origins and set(origins) <= {"accepted", "correction", "bonus"}
    browser.focus("#spec-tokens .tok")
    assert browser.script("return getComputedStyle(document.activeElement.querySelector('.alts')).display") != "none"
    browser.script("document.querySelector('details.round > summary').click()")
    assert browser.script("return document.querySelector('details.round').open") is True
    assert browser.script("return document.querySelector('details.round').querySelectorAll('tr[data-status]').length") > 0
    _shot(browser, run_folder, "speculate-round-open")


def test_compare_page_aligns_the_tokens_of_two_entropy_runs(browser, run_folder, lab_log):
    """``lab view A B`` on two entropy runs of one prompt (greedy, and sampled): every aligned pair has
    its token on both sides, and the page opens offline."""
    from lab import cli

    prompt = "Name two planets."
    runs = []
    for extra in ([], ["--temperature", "0.7", "--seed", "1"]):
        rc, report = lab_log.cli(["entropy", prompt, "--max-new-tokens", "16", "--model", "smollm2", *extra])
        assert rc == 0
        runs.append(report)
    assert cli.main(["view", str(runs[0]), str(runs[1]), "--out", str(run_folder), "--no-open"]) == 0
    (page,) = [p / PAGE for p in _reports(run_folder, "compare") if runs[0].name in (p / "report.json").read_text()]
    opened = browser.open(page)
    assert not opened.console_errors and not opened.remote_requests, opened
    a = browser.script("return Array.from(document.querySelectorAll('#entropy-diff-a .tok[id]')).map(t => t.id)")
    b = browser.script("return Array.from(document.querySelectorAll('#entropy-diff-b .tok[id]')).map(t => t.id)")
    assert a and [x.removesuffix("-a") for x in a] == [x.removesuffix("-b") for x in b]
    _shot(browser, run_folder, "compare-entropy")


@pytest.fixture(scope="module")
def study_folder(run_folder: Path) -> Path:
    """A study report in the run folder: the tier's own (tests/integration/test_study.py), else a reduced
    one made here (14 prompts, 24 tokens: about two minutes)."""
    from lab import cli

    if not _reports(run_folder, "study"):
        assert cli.main(["study", "--limit", "14", "--max-new-tokens", "24", "--resamples", "199",
                         "--out", str(run_folder)]) == 0
    return _reports(run_folder, "study")[-1]


def test_study_page_every_plotted_point_links_to_its_prompt_row(browser, study_folder, run_folder):
    """Every point of every plot links to a prompt row that exists; following one marks that row."""
    opened = browser.open(study_folder / PAGE)
    assert not opened.console_errors and not opened.remote_requests, opened
    hrefs = browser.script("return Array.from(document.querySelectorAll('svg a')).map(a => a.getAttribute('href'))")
    assert hrefs, "the study page has no linked points"
    missing = browser.script("return arguments[0].filter(h => !document.getElementById(decodeURIComponent(h.slice(1))))",
                             hrefs)
    assert not missing, f"points linking to no row: {missing[:5]}"
    browser.script("location.hash = arguments[0]", hrefs[0])
    assert browser.script("return document.getElementById(decodeURIComponent(location.hash.slice(1))).classList"
                          ".contains('linked')")
    _shot(browser, run_folder, "study-point-linked")


def test_two_studies_side_by_side_open_offline(browser, study_folder, run_folder):
    """``lab view A B`` on studies: each hypothesis with both effects and intervals (here the tier's study beside
    itself, which checks the page, not a difference)."""
    from lab import cli

    assert cli.main(["view", str(study_folder), str(study_folder), "--out", str(run_folder), "--no-open"]) == 0
    page = [p for p in _reports(run_folder, "compare") if "study" in p.name][-1] / PAGE
    opened = browser.open(page)
    assert not opened.console_errors and not opened.remote_requests, opened
    assert browser.script("return document.querySelectorAll('table').length") > 0
    _shot(browser, run_folder, "compare-study")


def test_every_report_page_opens_offline_without_console_error(browser, run_folder, lab_log):
    """Every report folder of the run has a page; each opens with no console error and no request."""
    from lab.views.files import kind_of

    folders = [p for p in report_dirs(run_folder) if p.name != "screenshots"]
    missing = [p.name for p in folders if not (p / PAGE).is_file()]
    assert not missing, f"report folders without a page: {missing}"
    bad, kinds = {}, set()
    for folder in folders:
        opened = browser.open(folder / PAGE)
        _shot(browser, run_folder, folder.name)
        kinds.add(kind_of(folder.name))
        if opened.console_errors or opened.remote_requests:
            bad[folder.name] = (opened.console_errors, opened.remote_requests)
    assert not bad, f"pages with console errors or requests: {bad}"
    lab_log.record(pages=len(folders), kinds=" ".join(sorted(k for k in kinds if k)))


def test_experiment_log_lists_every_run_and_opens_offline(browser, run_folder):
    """The run folder's log (index.html) has one row per report folder, and links to each page."""
    from lab.views.log import rebuild_log

    log = rebuild_log(run_folder)  # the last report written rebuilt it; a screenshot folder is no run
    opened = browser.open(log)
    _shot(browser, run_folder, "experiment-log")
    assert not opened.console_errors and not opened.remote_requests, opened
    names = browser.script("return Array.from(document.querySelectorAll('#log tbody tr td:last-child a')).map(a => a.textContent)")
    expected = {p.name for p in report_dirs(run_folder) if p.name != "screenshots"}
    assert set(names) == expected


# A report's SVGs as a hostile user would leave them beside a report: each tries to run script (setting the title or
# adding a marker element), restyle or blank the page, or make a request off the disk.
HOSTILE_SVG = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'
HOSTILE_SVGS = {
    "cdata-title.svg": f"<svg {HOSTILE_SVG}><title><![CDATA[</title></svg><img src=x onerror=\"document.title='PWNED'\">]]>"
                       "</title><rect width='10' height='10'/></svg>",
    "cdata-desc.svg": f"<svg {HOSTILE_SVG}><desc><![CDATA[</desc></svg><img src=x onerror=\"document.body.insertAdjacentHTML("
                      "'beforeend','<b id=pwned></b>')\">]]></desc><rect width='10' height='10'/></svg>",
    "style.svg": f"<svg {HOSTILE_SVG}><style>body{{display:none}} h1{{visibility:hidden}}</style><rect/></svg>",
    "style-root.svg": f'<svg {HOSTILE_SVG} style="position:fixed;inset:0;z-index:99;background:red"><rect/></svg>',
    "script.svg": f"<svg {HOSTILE_SVG}><script>document.title='PWNED'</script><rect/></svg>",
    "handler.svg": f"<svg {HOSTILE_SVG} onload=\"document.title='PWNED'\"><rect onclick=\"document.title='PWNED'\"/></svg>",
    "href.svg": f'<svg {HOSTILE_SVG}><image xlink:href="http://127.0.0.1:9/leak.png" width="5" height="5"/>'
                f'<rect style="fill:url(http://127.0.0.1:9/fill#x)"/></svg>',
}


def test_hostile_svgs_beside_a_report_run_no_script_and_load_nothing(browser, tmp_path):
    """Security: SVGs beside a report (CDATA that an HTML parser ends early inside <title> and <desc>, a stylesheet,
    a styled outer <svg>, script, handlers, outside references) open in Chromium with no script run (the title and
    the DOM unchanged), the page not blanked, and no request leaving the disk; and a script pasted into a page by
    hand does not run either (the policy allows the lab's own scripts by hash only)."""
    from lab.views.page import write_page

    run = tmp_path / "20261205-010101-entropy-hostile"
    run.mkdir()
    (run / "summary.md").write_text("# entropy\n\n**Mean entropy 1.0 bits.**\n", encoding="utf-8")
    for name, svg in HOSTILE_SVGS.items():
        (run / name).write_text(svg, encoding="utf-8")
    page = write_page(run)
    opened = browser.open(page)
    title = browser.script("return document.title")
    assert "PWNED" not in title, title
    assert not browser.script("return document.getElementById('pwned') !== null"), "a handler inserted an element"
    assert not browser.script("return Array.from(document.images).some(i => i.hasAttribute('onerror'))")
    assert browser.script("return getComputedStyle(document.body).display !== 'none' && "
                          "getComputedStyle(document.querySelector('h1')).visibility === 'visible'")
    assert not opened.remote_requests, opened.remote_requests
    assert not opened.console_errors, opened.console_errors
    # The policy as the last wall: a script written into the page by hand is refused by the browser.
    text = page.read_text(encoding="utf-8").replace("</body>", "<script>document.title='PWNED'</script></body>")
    pasted = run / "pasted.html"
    pasted.write_text(text, encoding="utf-8")
    opened = browser.open(pasted)
    assert "PWNED" not in browser.script("return document.title")
    assert any("Content Security Policy" in e for e in opened.console_errors), opened.console_errors
