"""Report pages and the experiment log under hostile report folders: bad files get one line on the page,
never a traceback, a lost log, a script that runs or a file from outside the report.

Fault classes guarded: JSON nested past Python's recursion limit killing the page and the whole log; a
non-object report.json read as an empty report without a word; a link in a report folder embedding a file
from outside it (/etc/passwd) into a page; a FIFO read for ever; a report's SVG inlined with its script, event
handler, foreign HTML or outside reference; a file or folder name used unquoted as an href (``javascript:``,
``#``, ``?``); a report.json of the wrong shape raising out of a kind's page; a page that cannot be written
ending ``lab view`` as "an error the lab did not foresee" (exit 1) instead of one line (exit 2).
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from lab import cli
from lab.views.core import content_security_policy
from lab.views.files import read_report
from lab.views.svg import inline_svg
from lab.views.log import rebuild_log
from lab.views.page import PAGE, write_page
from tests.provenance import ENVIRONMENT, MODEL_SOURCE, environment_json, machine_load_json, model_json
from tests.support import entropy_report, entropy_step, speculate_report, speculate_round

pytestmark = pytest.mark.unit

SVG_NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'


def _dir(root: Path, name: str, files: dict[str, str | bytes]) -> Path:
    path = root / name
    path.mkdir(parents=True)
    for file, data in files.items():
        (path / file).write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_read_report_json_nested_10000_deep_names_it_and_log_still_written(tmp_path):
    """RecursionError from json.loads escaped read_report: no page, and one such folder lost the whole log."""
    run = _dir(tmp_path, "20261205-010101-entropy-deep", {"report.json": "[" * 10_000 + "]" * 10_000})
    assert any("nested too deeply" in p for p in read_report(run).problems)
    assert write_page(run).is_file()
    assert "20261205-010101-entropy-deep" in rebuild_log(tmp_path).read_text(encoding="utf-8")


@pytest.mark.parametrize("text, words", [("[1, 2]", "an array"), ("null", "null"), ("3", "a single value")])
def test_read_report_json_not_an_object_is_named_a_problem(tmp_path, text, words):
    """A report.json that is a list or null was read as {} without a word on the page."""
    files = read_report(_dir(tmp_path, "20261205-010101-entropy-x", {"report.json": text}))
    assert files.report == {} and any(words in p and "report.json" in p for p in files.problems)


def test_read_report_link_to_outside_file_is_not_embedded(tmp_path):
    """A symlink named like a CSV embedded /etc/passwd (any file the viewer can read) into the page."""
    secret = tmp_path / "secret.txt"
    secret.write_text("name,pw\nroot,SECRET-VALUE\n")
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x"})
    (run / "leak.csv").symlink_to(secret)
    (run / "loop.md").symlink_to(run / "loop.md")
    files = read_report(run)
    assert "leak.csv" not in files.csvs and any("leak.csv: not read (a link)" in p for p in files.problems)
    assert "SECRET-VALUE" not in write_page(run).read_text(encoding="utf-8")


def test_read_report_fifo_named_report_json_does_not_hang(tmp_path):
    """A FIFO named report.json (or a link to one) must be named, not opened and waited on."""
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x"})
    os.mkfifo(run / "report.json")
    files = read_report(run)
    assert any("report.json: not read (not a regular file)" in p for p in files.problems)


@pytest.mark.parametrize("svg", [
    f"<svg {SVG_NS}><script>alert(1)</script></svg>",
    f'<svg {SVG_NS} onload="alert(1)"><rect/></svg>',
    f"<svg {SVG_NS}><foreignObject><div>x</div></foreignObject></svg>",
    f'<svg {SVG_NS}><image xlink:href="http://example.com/x.png"/></svg>',
    f'<svg {SVG_NS}><image href="file:///etc/passwd"/></svg>',
    f"<svg {SVG_NS}></svg><script>alert(2)</script>",
    f"<svg {SVG_NS}><!--><script>alert(3)</script>--></svg>",
    f"<svg {SVG_NS}><?x a><script>alert(4)</script>?></svg>",
    f'<svg {SVG_NS}><a href="javascript:alert(5)"><rect/></a></svg>',
    f'<svg {SVG_NS}><rect style="fill:url(http://x/y)"/></svg>',
    f"<svg {SVG_NS}><style>body{{display:none}}</style></svg>",
    f"<svg {SVG_NS}><style><![CDATA[*{{stroke-linejoin: round; stroke-linecap: butt}} body{{display:none}}]]></style></svg>",
    f'<svg {SVG_NS} style="position:fixed;inset:0;z-index:99;background:white"><rect/></svg>',
    f"<svg {SVG_NS}><title><rect/></title></svg>",
    f'<svg {SVG_NS}><rect xmlns:x="urn:x" x:onload="alert(6)"/></svg>',
    f'<svg {SVG_NS}><html:img xmlns:html="http://www.w3.org/1999/xhtml" src="#"/></svg>',
])
def test_page_svg_with_script_or_outside_reference_is_an_img_not_inline(tmp_path, svg):
    """A report's SVG was inlined as is: its script, handler, foreign HTML or outside reference reached the page."""
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x", "plot.svg": svg})
    files = read_report(run)
    assert "plot.svg" not in files.svgs and files.images["plot.svg"].startswith("data:image/svg+xml;base64,")
    assert any("plot.svg: shown as an image" in p for p in files.problems)
    page = write_page(run).read_text(encoding="utf-8")
    assert "alert(" not in page and "http://x" not in page and "etc/passwd" not in page


def test_inline_svg_passes_the_labs_own_linked_plot():
    """The sanitizer must keep what the lab writes: matplotlib's SVG (its one stylesheet, in CDATA too), comments,
    same-page links."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.scatter([1, 2], [3, 4]).set_urls(["#prompt-a", "#prompt-b"])
    ax.imshow([[0, 1], [1, 0]])
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    inline = inline_svg(text[text.find("<svg"):])
    assert inline is not None and 'xlink:href="#prompt-a"' in inline and "<image " in inline
    assert "<metadata" not in inline and "purl.org" not in inline
    inline = inline_svg(f"<svg {SVG_NS}><style><![CDATA[*{{stroke-linejoin: round; stroke-linecap: butt}}]]></style>"
                        f'<!-- 0.5 --><a href="#prompt-x"><use xlink:href="#m1" clip-path="url(#c1)"/></a></svg>')
    assert inline is not None and "<!--" not in inline and "CDATA" not in inline


def test_inline_svg_drops_metadata_with_what_it_holds(tmp_path):
    """A <metadata> holding HTML (a refresh to an outside address) reached the page; it is never shown, so it is
    not written at all."""
    svg = f'<svg {SVG_NS}><metadata><meta http-equiv="refresh" content="0;url=http://x"/></metadata><rect/></svg>'
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x", "plot.svg": svg})
    assert read_report(run).svgs["plot.svg"].endswith("<rect></rect></svg>")
    assert "http://x" not in write_page(run).read_text(encoding="utf-8")


@pytest.mark.parametrize("part", ["title", "desc", "text"])
def test_inline_svg_cdata_closing_its_element_for_an_html_parser_stays_text(tmp_path, part):
    """Security: a CDATA section in an SVG's <title> or <desc> is text to the XML check, but the browser's HTML
    parser ends it at the first '>' and builds what follows (``</svg><img onerror=...>``), so a handler ran on
    the page. Inlined markup is written anew from the checked tree: the same bytes reach the page as text."""
    svg = (f"<svg {SVG_NS}><{part}><![CDATA[</{part}></svg><img src=x onerror=\"document.title='PWNED'\">]]>"
           f"</{part}></svg>")
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x", "plot.svg": svg})
    inline = read_report(run).svgs["plot.svg"]
    assert "<img" not in inline and "&lt;img src=x" in inline and "<![CDATA[" not in inline
    page = write_page(run).read_text(encoding="utf-8")
    assert "<img src=x" not in page and "&lt;img src=x onerror=" in page


def test_page_csp_lets_only_the_labs_own_scripts_run(tmp_path):
    """Security: the pages' policy allowed any inline script ('unsafe-inline'), so markup that slipped into a page
    ran. Script runs by hash only, and each script a page holds is one the policy names."""
    import base64
    import hashlib
    import html
    import re

    policy = content_security_policy()
    script_src = policy.split("script-src", 1)[1].split(";", 1)[0]
    assert "'unsafe-inline'" not in script_src and "default-src 'none'" in policy
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x"})
    page = write_page(run).read_text(encoding="utf-8")
    shipped = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert shipped and html.unescape(shipped.group(1)) == policy
    scripts = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    assert scripts
    for body in scripts:
        digest = base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode("ascii")
        assert f"'sha256-{digest}'" in script_src


def test_read_report_png_that_is_not_a_png_is_named_not_embedded(tmp_path):
    """Any bytes named .png were embedded as an image the browser shows broken, with no word why."""
    files = read_report(_dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x", "a.png": "<script>"}))
    assert "a.png" not in files.images and any("a.png: not shown (not a PNG image)" in p for p in files.problems)


def test_read_report_ragged_csv_keeps_extra_cells_and_names_it(tmp_path):
    """A ragged CSV's extra cells went under a column named None and missing ones read as '-', without a word."""
    files = read_report(_dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x", "a.csv": "a,b\n1,2,3\n4\n"}))
    assert None not in files.csvs["a.csv"][0] and files.csvs["a.csv"][0]["(extra cells)"] == ["3"]
    assert any("a.csv: some rows have more or fewer cells" in p for p in files.problems)


def test_page_and_log_links_quote_hostile_names(tmp_path):
    """File and folder names went into href unquoted: ``javascript:...`` ran, ``#`` and ``?`` cut the link."""
    weird = '20261205-010101-entropy-a b"<x>#?%\né'
    write_page(_dir(tmp_path, weird, {"summary.md": "x"}))
    run = _dir(tmp_path, "javascript:alert(1)", {"summary.md": "x", "javascript:alert(2)": "x"})
    page = write_page(run).read_text(encoding="utf-8")
    assert 'href="./javascript%3Aalert%282%29"' in page and 'href="javascript:' not in page
    log = rebuild_log(tmp_path).read_text(encoding="utf-8")
    assert 'href="./javascript%3Aalert%281%29/index.html"' in log
    assert 'href="./20261205-010101-entropy-a%20b%22%3Cx%3E%23%3F%25%0A%C3%A9/index.html"' in log
    assert "<x>" not in log


def test_page_report_of_wrong_shape_keeps_generic_page_and_says_why(tmp_path):
    """A report.json of the wrong shape (environment a list, alternatives a number) raised out of the page; the
    entropy report is typed (lab.kinds.entropy.Report), so the first field of the wrong shape is named."""
    data = entropy_report([entropy_step(alternatives=5)], environment=[None])
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"report.json": json.dumps(data), "summary.md": "**V.**"})
    page = write_page(run).read_text(encoding="utf-8")
    assert "was not drawn" in page and "<h2>summary.md</h2>" in page
    assert "(report.json: environment: an object goes here, not an array of 1)" in page


def test_view_page_that_cannot_be_written_exits_2_with_one_line(tmp_path, capsys):
    """An index.html that cannot be replaced (a folder there; a read-only folder) ended as exit 1, 'not foreseen'."""
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "x"})
    (run / PAGE).mkdir()
    assert cli.main(["view", "--no-open", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "its page could not be written" in err


def test_view_rebuild_with_unreadable_folder_names_it(tmp_path, capsys):
    """--rebuild over a folder whose page cannot be written: one line naming it, exit 2, never a traceback."""
    _dir(tmp_path, "20261205-010101-entropy-ok", {"summary.md": "x"})
    bad = _dir(tmp_path, "20261205-010101-entropy-bad", {"summary.md": "x"})
    (bad / PAGE).mkdir()
    assert cli.main(["view", "--no-open", "--rebuild", str(tmp_path)]) == 2
    assert "20261205-010101-entropy-bad" in capsys.readouterr().err


def test_page_embedded_json_cannot_be_closed_by_token_text(tmp_path):
    """Token text with </script>, <!--, U+2028, RTL override, NUL or a lone surrogate must stay text."""
    text = "</script><script>alert(1)</script><!--]]>\u2028\u202e\x00"
    steps = [entropy_step(token_text=text), entropy_step(token_text="\ud800")]
    data = json.dumps(entropy_report(steps, prompt=text))  # ensure_ascii: the surrogate is written as \ud800
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"report.json": data, "summary.md": "x"})
    page = write_page(run).read_text(encoding="utf-8", errors="strict")
    assert "<script>alert(1)" not in page and page.count("</script>") == page.count("<script")
    assert "was not drawn" not in page and 'id="tok-1"' in page


def test_log_folder_name_not_utf8_is_linked_by_its_bytes(tmp_path):
    """A folder name that is not UTF-8 (a lone surrogate once decoded) made the log's write raise: no log."""
    run = Path(os.fsdecode(os.fsencode(tmp_path) + b"/20261205-010101-entropy-\xff"))
    run.mkdir()
    (run / "summary.md").write_text("x")
    write_page(run)
    assert 'href="./20261205-010101-entropy-%FF/index.html"' in rebuild_log(tmp_path).read_text(encoding="utf-8")


LONG_INTEGER = "1" * 5001  # past Python's 4,300-digit int-to-text limit


def test_view_rebuild_report_json_with_5001_digit_integer_draws_every_page_and_the_log(tmp_path, capsys):
    """One bad file stopping every page: a 5,001-digit integer in one report.json ended --rebuild with Python's
    own digit-limit message, no file named, no other page and no log."""
    big = _dir(tmp_path, "20261205-010101-entropy-big", {"report.json": '{"seed": ' + LONG_INTEGER + "}"})
    ok = _dir(tmp_path, "20261205-010102-entropy-ok", {"summary.md": "**ok.**"})
    assert cli.main(["view", "--no-open", "--rebuild", str(tmp_path)]) == 0
    assert "report.json: not read (an integer of 5,001 digits)" in (big / PAGE).read_text(encoding="utf-8")
    assert (ok / PAGE).is_file() and big.name in (tmp_path / PAGE).read_text(encoding="utf-8")
    assert cli.main(["view", "--no-open", str(big)]) == 0
    assert cli.main(["view", "--no-open", "--out", str(tmp_path / "out"), str(big), str(big)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "report.json: not read (an integer of 5,001 digits)" in err


def test_view_rebuild_page_not_drawn_costs_that_page_only(tmp_path, capsys):
    """One bad folder stopping every page: a page that could not be drawn ended --rebuild there, leaving the
    pages after it and the log undrawn; now each failure is one line and the rest is drawn (exit 2)."""
    bad = _dir(tmp_path, "20261205-010101-entropy-bad", {"summary.md": "x"})
    (bad / PAGE).mkdir()
    ok = _dir(tmp_path, "20261205-010102-entropy-ok", {"summary.md": "x"})
    assert cli.main(["view", "--no-open", "--rebuild", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad.name in err[0] and "could not be written" in err[0]
    assert (ok / PAGE).is_file() and ok.name in (tmp_path / PAGE).read_text(encoding="utf-8")


SPOOF = "\u202e", "\u202c", "\u200b"  # right-to-left override, pop directional formatting, zero-width space


def test_pages_and_log_show_control_characters_escaped_as_the_terminal_does(tmp_path):
    """A raw control character on a page: the entropy page's prompt, model name, tokens, a CSV cell, the log's
    folder name and the comparison page carried raw U+202E / U+202C / U+200B where summary.md escapes them."""
    text = "evil\u202etxt.exe\u202c zero\u200bwidth"
    steps = [entropy_step(token_text=text, alternatives=[{"token_id": 1, "token_text": text, "prob": 0.5}])]
    report = json.dumps(entropy_report(steps, prompt=text, context=text, model=model_json(model=text),
                                       context_measure={"value": 1.0, "n_context": 3, "measure": "lookback_heads",
                                                        "file": None, "verdicts": {}, "unmeasurable": None}))
    runs = [_dir(tmp_path, f"20261205-01010{i}-entropy-x\u202ey", {"report.json": report, "summary.md": "x",
                                                                  "extra.csv": f"col\u200b\n{text}\n"})
            for i in (1, 2)]
    pages = [write_page(run).read_text(encoding="utf-8") for run in runs]
    pages.append(rebuild_log(tmp_path).read_text(encoding="utf-8"))
    assert cli.main(["view", "--no-open", "--out", str(tmp_path / "out"), str(runs[0]), str(runs[1])]) == 0
    pages.append(next((tmp_path / "out").glob("*-compare-entropy*/index.html")).read_text(encoding="utf-8"))
    for page in pages:
        assert not any(c in page for c in SPOOF)
        assert "evil\\u202etxt.exe\\u202c zero\\u200bwidth" in page or "x\\u202ey" in page
    assert "prompt: evil\\u202etxt.exe\\u202c zero\\u200bwidth" in pages[0]


def test_entropy_page_and_log_show_impossible_figures_as_out_of_range(tmp_path):
    """An impossible number shown as fact: a hand-edited mean entropy of 1e308 was printed with 309 digits in the
    headline and the log row; an entropy above log2 V, a negative one or a probability above 1 was not flagged."""
    steps = [entropy_step(token_text="a", entropy_bits=20.0, normalized_entropy=1.2, chosen_prob=1.5,
                          varentropy_bits2=-1.0),
             entropy_step(token_text="b", entropy_bits=-1.0, normalized_entropy=0.1, chosen_prob=0.5)]
    report = entropy_report(steps, {"n_steps": 2, "mean_entropy_bits": 1e308}, vocab_size=60000)
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"report.json": json.dumps(report)})
    page = write_page(run).read_text(encoding="utf-8")
    log = rebuild_log(tmp_path).read_text(encoding="utf-8")
    headline = "mean entropy 1e+308 (out of range: entropy above log2 V = 15.9 bits) bits"
    assert headline in page and headline in log and "0" * 20 not in page + log
    for words in ("20 (out of range: entropy above log2 V = 15.9 bits)", "-1 (out of range: entropy must be",
                  "1.2 (out of range: H / log2 V must be in [0, 1])", "1.5 (out of range: a probability must be",
                  "-1 (out of range: varentropy must be"):
        assert words in page, words


def _page_and_log(root: Path, name: str, files: dict[str, str | bytes]) -> tuple[str, str]:
    """A report folder's page and the log beside it, their character references read (``>=``, not ``&gt;=``)."""
    run = _dir(root, name, files)
    return (html.unescape(write_page(run).read_text(encoding="utf-8")),
            html.unescape(rebuild_log(root).read_text(encoding="utf-8")))


def test_sinks_page_and_log_show_impossible_shares_as_out_of_range(tmp_path):
    """An impossible number shown as fact: a hand-edited sink rate of 1.5 (a share) was printed in the sinks
    headline and the log row as a rate, attention received of 1.5 drawn as a bar at 1, a context health of -1 shown
    as a reading."""
    from tests.support import sinks_report

    report = sinks_report(["<s>", "a"], ["bos", "content"], [1.5, 0.01], [True, False], sink_rate=[1.5, 0.0],
                          context_health=-1.0, position0_share=1.5)
    page, log = _page_and_log(tmp_path, "20261205-010101-sinks-x", {"report.json": json.dumps(report)})
    headline = "(sink rate 1.5 (out of range: a sink rate must be in [0, 1]))"
    assert headline in page and headline in log
    assert "-1 (out of range: context health must be in [0, 10]) / 10" in page + log
    assert 'data-received="1.5 (out of range: attention received must be in [0, 1])"' in page
    assert "1.5 (out of range: a share must be in [0, 1])" in page


@pytest.mark.parametrize("min_observers, words", [
    (3, "the last 2 positions have too few observers to flag"),
    (-7777.5, "min_observers -7.78e+03 (out of range: a count must be an integer >= 0)")])
def test_sinks_page_observer_count_that_is_no_count_is_out_of_range(tmp_path, min_observers, words):
    """An impossible number shown as fact: a hand-edited min_observers of -7777.5 was printed as "the last -7778.5
    positions have too few observers to flag". A count that is no integer is a report of another shape
    (lab.kinds.sinks.Report): the page names it in one line; the words for it stay unobserved()'s (its doctest)."""
    from lab.views.kinds.sinks import unobserved
    from tests.support import sinks_report

    report = sinks_report(["<s>", "a"], ["bos", "content"], [0.5, 0.01], [True, False], min_observers=min_observers)
    page, _ = _page_and_log(tmp_path, "20261205-010101-sinks-x", {"report.json": json.dumps(report)})
    shown = (words if isinstance(min_observers, int)
             else f"analysis.min_observers: an integer goes here, not the number {min_observers}")
    assert shown in page and unobserved(min_observers) == words and "-7778.5" not in page


def test_speculate_page_shows_impossible_round_and_token_figures_as_out_of_range(tmp_path):
    """An impossible number shown as fact: beyond its headline the speculate page printed a round's draft entropy
    of -1 bits, a p(x) of 1.5 and a negative draft time, and the theory table an alpha of 1.5, as measurements."""
    rounds = [speculate_round(draft_entropies=[-1.0], target_probs=[1.5], draft_probs=[0.5], draft_time_s=-0.5)]
    report = speculate_report(rounds, {"alpha": 1.5, "n_accepted": 1, "n_drafted_tested": 1, "tau": 2.0,
                                       "tokens_per_s": 3.0}, {"gamma": 2}, token_texts={"5": "a", "6": "b"})
    page, log = _page_and_log(tmp_path, "20261205-010101-speculate-x", {"report.json": json.dumps(report)})
    assert "alpha 1.5 (out of range: alpha must be in [0, 1])" in log
    for words in ("-1 (out of range: entropy must be a finite number >= 0) bits",
                  "<td>-1 (out of range: entropy must be", "<td>1.5 (out of range: a probability must be in [0, 1])</td>",
                  "draft -0.5 (out of range: a time must be a finite number >= 0) s",
                  "<td>1.5 (out of range: alpha must be in [0, 1]) (1 / 1)</td>"):
        assert words in page, words


def test_stream_page_and_log_show_impossible_p_value_perplexity_and_time_as_out_of_range(tmp_path):
    """An impossible number shown as fact: a stream report's p-value of 1.5 was printed in its headline and log
    row, a perplexity below 1 and a negative wall time in its policy table."""
    from tests.support import stream_policy_row, stream_report, stream_test

    report = stream_report(tests=[stream_test("sinks vs window", p_value=1.5, reject=False)],
                           policies=[stream_policy_row("window:8", "window", 8, ratio_to_dense=-1.0)])
    csv_text = "policy,budget,ppl,ppl_low,ppl_high,ratio_to_dense,wall_s\nwindow:8,8,0.5,0.4,0.6,1.1,-2\n"
    page, log = _page_and_log(tmp_path, "20261205-010101-stream-x",
                              {"report.json": json.dumps(report), "policies.csv": csv_text})
    for words in ("(p 1.5 (out of range: a p-value must be in [0, 1]))",
                  "window:8 -1 (out of range: a perplexity ratio must be a finite number >= 0)"):
        assert words in page and words in log, words
    assert "0.5 (out of range: a perplexity must be a finite number >= 1)" in page
    assert "-2 (out of range: a time must be a finite number >= 0)" in page


def test_bench_page_and_log_show_impossible_speed_and_alpha_as_out_of_range(tmp_path):
    """An impossible number shown as fact: a bench's negative tokens/s was its headline and log row, an alpha of
    1.5 a cell of its results table."""
    from tests.support import bench_method_json, bench_report_json

    report = bench_report_json({"speculative g4": bench_method_json(4, alpha=1.5)},
                               by_group={"all": {"speculative g4": {"e2e_tokens_per_s": -5.0, "decode_tokens_per_s": None,
                                                                    "e2e_speedup": None, "decode_speedup": None,
                                                                    "prefill_phase_s": None, "n_runs": 1}}})
    page, log = _page_and_log(tmp_path, "20261205-010101-bench-x", {"report.json": json.dumps(report)})
    headline = "fastest: speculative g4, -5 (out of range: a speed must be a finite number >= 0) tokens/s"
    assert headline in page and headline in log
    assert '<td data-col="alpha">1.5 (out of range: alpha must be in [0, 1])</td>' in page


def test_study_page_and_log_show_impossible_correlation_p_value_and_rate_as_out_of_range(tmp_path):
    """An impossible number shown as fact: a study's rho of 1.5 was its headline and log row, a p-value of 1.5 a
    verdict and a prompt's alpha of 1.5 a row of its prompt table."""
    from tests.study_fakes import study_report

    study = study_report([{"name": "H2", "verdict": "supported", "effect_name": "spearman_rho", "effect": 1.5,
                           "p_value": 1.5, "p_holm": 0.01, "n": 10}])
    csv_text = "id,category,alpha\nq1,factual,1.5\n"
    page, log = _page_and_log(tmp_path, "20261205-010101-study-x",
                              {"study.json": json.dumps(study), "per_prompt.csv": csv_text, "summary.md": "# Study\n"})
    headline = "H2 supported (spearman_rho 1.5 (out of range: spearman_rho must be in [-1, 1]))"
    assert headline in page and headline in log
    assert "1.5 (out of range: a p-value must be in [0, 1])" in page
    assert "<td>1.5 (out of range: alpha must be in [0, 1])</td>" in page


def test_bench_sinks_and_health_validation_headlines_show_impossible_figures_as_out_of_range():
    """An impossible number shown as fact: a bench-sinks time ratio of -2 and a health validation's rho of 1.5 and
    share of 1.5 were printed in their headlines (the log's rows) as measurements."""
    from lab.views.kinds import bench_sinks, calibrate_health_validate

    from lab.kinds.bench_sinks import KIND as BENCH_SINKS

    line = bench_sinks.headline(BENCH_SINKS.read({
        "model": "m", "environment": environment_json(), "torch_threads": 1, "results": [],
        "machine_load": machine_load_json(),
        "comparison": {"length": 4096, "time_ratio": -2.0, "capture_extra_bytes": 2**30, "plain_extra_bytes": 2**30}}))
    assert "-2 (out of range: a time ratio must be a finite number >= 0)x" in line
    from lab.kinds.calibrate_health_validate import Bars, Figures, Report

    fig = Figures(name="m", n=9, n_measurable=9, rho=1.5, p=0.5, low_share=0.5, high_share=1.0, low=0.0, median=5.0,
                  high=10.0, control=False, saturated_share=1.5, length_neutral=False, unsaturated=False, valid=True)
    f = calibrate_health_validate.figures(Report(
        measure="m", valid=True, bars=Bars(max_length_rho=0.2, max_saturated_share=0.05, end_margin=0.1,
                                           min_measurable=10),
        figures=fig, by_source={}, candidates={}, valid_candidates=(), prompts=(), model=MODEL_SOURCE,
        environment=ENVIRONMENT, prompts_file="v.jsonl", reference_file=None))
    line = calibrate_health_validate.headline(f)
    assert "rho with length 1.5 (out of range: rho must be in [-1, 1])" in line
    assert "1.5 (out of range: a share must be in [0, 1]) at an end" in line


@pytest.mark.parametrize("svg", [
    f'<svg {SVG_NS}><rect width="9" height="9" style="fill:u\\72l(http://x/esc)"/></svg>',
    f'<svg {SVG_NS}><rect width="9" height="9" style="background-image:image-set(\'http://x/is\' 1x)"/></svg>',
    f'<svg {SVG_NS}><rect width="9" height="9" fill="src(\'http://x/s\')"/></svg>',
])
def test_inline_svg_css_escape_or_url_free_function_is_an_img(svg):
    """Outside reference past the url( check: a CSS escape spelling url( or a function taking a bare string
    (image-set) reached the page inline, and the browser asked for the file (the policy alone stopped it)."""
    assert inline_svg(svg) is None


@pytest.mark.parametrize("attribute", ['overflow="visible"', 'transform="scale(60)"', 'class="tok"',
                                       'opacity="0"', 'xml:base="http://x/"'])
def test_inline_svg_outer_svg_attribute_that_could_cover_the_page_is_an_img(attribute):
    """Page blanked by an SVG: overflow="visible" or a transform on the outer <svg> (presentation attributes, no
    style needed) laid a white rectangle over the whole page."""
    svg = f'<svg {SVG_NS} width="100" height="100" {attribute}><rect x="-5000" y="-5000" width="20000" height="20000"/></svg>'
    assert inline_svg(svg) is None
    assert inline_svg(f'<svg {SVG_NS} width="100" height="100" viewBox="0 0 100 100" version="1.1"><rect/></svg>')


def test_figure_integer_no_float_holds_with_a_format_is_shown_out_of_range():
    """A page not drawn for one figure: figure() with a format asked math.isfinite of a 400-digit integer, whose
    OverflowError cost the kind's whole page (an entropy table, a stream policy) instead of that one figure."""
    from lab.ranges import PROBABILITY
    from lab.views.core import figure

    assert figure(10**400, PROBABILITY, "p", spec=".2f") == "1.00000e+400 (out of range: p must be in [0, 1])"


def test_speculate_page_integer_of_hundreds_of_digits_is_not_printed_whole(tmp_path):
    """A number of hundreds of digits on a page: a round number and token ids of 401 digits (printed by the
    templates as they are) and a gamma of 401 digits (the theory's refusal echoed it whole as the page's
    "not drawn" reason) filled lines of the speculate page."""
    huge = 10**400 + 7
    rounds = [speculate_round(round=huge, proposed=[huge, 5], n_accepted=0, accepted_mask=[False, False],
                              tested_mask=[True, False], draft_entropies=[1.0, 1.0],
                              draft_normalized_entropies=[0.1, 0.1], next_token=huge, next_kind="correction")]
    report = speculate_report(rounds, {"alpha": 0.5, "n_accepted": 1, "n_drafted_tested": 2, "tau": 1.5,
                                       "tokens_per_s": 3.0}, {"gamma": huge})
    page, log = _page_and_log(tmp_path, "20261205-010101-speculate-x", {"report.json": json.dumps(report)})
    assert "not in the shape" not in page
    assert not re.search(r"\d{40}", page) and not re.search(r"\d{40}", log)
    assert "1.00000e+400" in page


def test_intervene_and_study_confidence_level_out_of_range_is_said(tmp_path):
    """An impossible number shown as fact: a confidence level of -7777.5 was printed as "at -777750.0%" beside
    an interval (and one no float holds stopped the page)."""
    from tests.study_fakes import study_report

    test = {"name": "H1", "verdict": "supported", "effect": 0.1, "ci_low": 0.0, "ci_high": 0.2, "ci_level": -7777.5,
            "p_value": 0.01, "p_holm": 0.01, "n": 10}
    page, _ = _page_and_log(tmp_path, "20261205-010101-study-x",
                            {"study.json": json.dumps(study_report([test])), "summary.md": "# Study\n"})
    assert "at -7.78e+03 (out of range: a confidence level must be in [0, 1])" in page
    test["ci_level"] = 0.975
    page, _ = _page_and_log(tmp_path, "20261205-010102-study-y",
                            {"study.json": json.dumps(study_report([test])), "summary.md": "# Study\n"})
    assert "at 97.5%" in page


def test_stream_recompute_tolerance_out_of_range_is_said(tmp_path):
    """An impossible number shown as fact: a negative recompute tolerance was printed as "within -777750%"."""
    from tests.support import stream_report

    report = stream_report(recompute_check={"tolerance": -7777.5, "recompute": "recompute:16", "sinks": "sinks:4+12",
                                            "ratio": 0.98, "low": 0.96, "high": 0.99, "n_targets": 77, "within": True})
    page, _ = _page_and_log(tmp_path, "20261205-010101-stream-x", {"report.json": json.dumps(report)})
    assert "within -7777.5 (out of range: a tolerance must be a finite number >= 0)" in page


def test_view_rebuild_link_back_up_the_tree_is_not_followed(tmp_path):
    """A loop followed: --rebuild went into an integration folder's link to its parent, drawing every page again
    at each depth (twice as many per level with two such links) until the path was too long."""
    from lab.views.open import rebuild_folder

    _dir(tmp_path, "20261205-010101-entropy-x", {"summary.md": "**ok.**"})
    run = _dir(tmp_path, "20261205-010102-integration", {"index.json": '{"counts": {}}'})
    (run / "20261205-010103-integration-up").symlink_to("..")
    (run / "20261205-010104-integration-up2").symlink_to("..")
    _, count, failed = rebuild_folder(tmp_path)
    assert (count, failed) == (1, [])


def test_kind_of_folder_name_with_a_newline_keeps_its_kind_and_date():
    """A page silently less than it is: a report folder whose name held a newline was read as of no kind and no
    date (the pattern's '.' and '$' stop at a newline), so its page lost the kind's sections, its log row the kind."""
    from lab.views.files import kind_of, stamp_of

    assert kind_of("20261205-010101-entropy-new\nline") == "entropy"
    assert kind_of("20261205-010101-entropy-x\n") == "entropy"
    assert stamp_of("20261205-010101-entropy-new\nline") == "2026-12-05 01:01:01"


def test_page_not_drawn_reason_is_one_short_line_naming_the_kind(tmp_path):
    """A reason of thousands of characters (a hand-edited value echoed whole, over several lines) and "a entropy
    report" in the line that says why a kind's part of a page was not drawn: the typed read names the field and
    shows the value cut, on one line."""
    from lab.views.page import page_html
    from tests.support import entropy_report

    report = entropy_report(prompt=["9" * 5000 + "\nmore"])  # a list where the prompt's text goes
    run = _dir(tmp_path, "20261205-010101-entropy-x", {"report.json": json.dumps(report)})
    html_text = page_html(read_report(run))
    assert "not in the shape of a report of kind entropy (report.json: prompt: a string goes here, not an array" \
        in html_text
    assert "9" * 201 not in html_text and "more" not in html_text.split("report.json: prompt:")[1].split("</p>")[0]
