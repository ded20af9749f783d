"""``lab intervene`` end to end on a tiny model: the report, resume, damaged records, shards, the lock, the flags.

A tiny random Llama (eager attention, ChatML word tokenizer) stands in for the target, its first
layer for the draft (``early-exit:1``); a triple file in the study prompt format is written per
module. One whole run is shared by the tests that read or copy its output; each copies it before
changing anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re
import shutil
import types
from pathlib import Path

import pytest

from lab.analysis.intervention import ARMS
from lab.cli import main
from lab.intervene.record import TripleLabels, TripleRecord, load_record
from lab.intervene.run import load_triples
from lab.schemas import FileSchemaError
from tests import support

pytestmark = pytest.mark.unit

# Four clean questions in four categories; --limit 3 takes one of each of the first three. Every word is
# in the tiny tokenizer's vocabulary, so the added span is whole tokens.
CLEAN = (("factual", "factual-0", "what is the capital of france ?"),
         ("math", "math-1", "what is 2 and 3 ?"),
         ("code", "code-2", "how can you make a long list of words ?"),
         ("creative", "creative-3", "when did he see the water ?"))
DISTRACTORS = {"d0": "the the the of of of", "d1": "hello world hello world", "d2": "0 1 2 3 4 5 6 7"}
NEUTRAL = "paris is the capital of france"
RUN = ["--model", "smollm2", "--draft", "early-exit:1", "--pilot-limit", "0", "--limit", "3"]
REPORT_FILES = {"index.html", "report.json", "summary.md", "triples.csv", "arms.png"}
SAME_NUMBERS = ("settings", "decides", "analysis", "controls", "pilot", "power", "seconds", "triples")


def triple_rows(bad_twin: str | None = None) -> list[dict]:
    """The triple file's records: each clean prompt, its poisoned twin (distractor, blank line, question) and
    its neutral twin (relevant text, blank line, question); ``bad_twin``'s text ends with another question."""
    rows = []
    for i, (cat, pid, question) in enumerate(CLEAN):
        label = f"d{i % len(DISTRACTORS)}"
        rows.append({"id": pid, "category": cat, "messages": [{"role": "user", "content": question}]})
        rows.append({"id": f"{pid}-P", "category": cat, "twin_of": pid, "variant": "poisoned", "distractor": label,
                     "messages": [{"role": "user", "content": f"{DISTRACTORS[label]}\n\n{question}"}]})
        neutral = f"{NEUTRAL}\n\n{question}" if f"{pid}-N" != bad_twin else f"{NEUTRAL}\n\nwhat is 2 and 4 ?"
        rows.append({"id": f"{pid}-N", "category": cat, "twin_of": pid, "variant": "neutral",
                     "messages": [{"role": "user", "content": neutral}]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def patch_eager_loader(monkeypatch) -> list:
    """:func:`tests.support.patch_tiny_loader`, but the tiny Llama is built with the attention the caller
    asks for (``load_models`` asks for eager). Returns the list each load's name is appended to."""
    from lab.models import loading
    from lab.models.source import ModelSource, register_source

    tok = support.chatml_tokenizer()
    calls: list = []

    def tiny_load(name, **kw):
        calls.append(name)
        model = support.tiny_llama(vocab_size=len(tok), max_positions=4096,
                                   attn_implementation=kw.get("attn_implementation") or "sdpa")
        register_source(model, ModelSource(model=name, device="cpu", dtype="float32"))
        return model, tok

    monkeypatch.setattr(loading, "load_model", tiny_load)
    monkeypatch.setattr(loading, "check_model_available", lambda name: None)
    return calls


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``lab ARGV`` with stdout and stderr captured (for module-scoped fixtures, where capsys is not)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def reports(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if "-intervene-" in p.name and not p.name.startswith("."))


def work_dir(out: Path) -> Path:
    (work,) = [p for p in out.iterdir() if p.name.startswith(".intervene-work-")]
    return work


def record_file(out: Path, question_id: str) -> Path:
    from lab.intervene.run import RECORDS_DIR
    from lab.runs.files import work_file_name

    return work_dir(out) / RECORDS_DIR / work_file_name(question_id)


@pytest.fixture(scope="module")
def triples_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("triples") / "triples.jsonl", triple_rows())


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory, triples_file, one_torch_thread):
    """One whole run of the brief's command: ``(out, stdout, stderr, loads)``."""
    out = tmp_path_factory.mktemp("whole") / "reports"
    with pytest.MonkeyPatch.context() as mp:
        loads = patch_eager_loader(mp)
        rc, stdout, stderr = run_cli(["intervene", *RUN, "--triples", str(triples_file), "--out", str(out)])
    assert rc == 0, stderr
    return out, stdout, stderr, loads


def copied_run(whole_run, tmp_path) -> Path:
    """The whole run's reports root, copied (the work directory's name does not depend on --out)."""
    out = tmp_path / "reports"
    shutil.copytree(whole_run[0], out)
    return out


@pytest.mark.slow
def test_intervene_tiny_run_writes_report_with_controls_and_exact_empty_mask(whole_run):
    out, stdout, _, loads = whole_run
    (rd,) = reports(out)
    assert {p.name for p in rd.iterdir()} == REPORT_FILES
    assert loads == ["smollm2"]  # the target once; the early-exit draft is its own first layer
    report = json.loads((rd / "report.json").read_text())
    assert isinstance(report["decides"], bool)
    assert set(report["controls"]) == {"empty_mask", "position_only", "label_swap", "c_plus", "manipulation"}
    assert report["decides"] == all(report["controls"].values())  # no pilot: the main run's controls decide
    assert report["pilot"] is None and report["analysis"]["n_triples"] == 3
    assert report["analysis"]["n_distractors"] == 3
    assert [t["question_id"] for t in report["triples"]] == ["factual-0", "math-1", "code-2"]
    for t in report["triples"]:
        assert len(t["continuation"]) <= 24
        for twin in t["twins"].values():
            assert twin["empty_max_diff_bits"] <= 1e-4
            assert all(len(a["entropy_bits"]) == len(t["continuation"]) for a in twin["arms"].values())
    assert report["analysis"]["empty_mask"]["max_diff_bits"] <= 1e-4 and report["controls"]["empty_mask"]
    rows = (rd / "triples.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 3 * 2 * len(ARMS)  # header, then (triple, twin, arm)
    assert (rd / "arms.png").read_bytes()[:4] == b"\x89PNG"
    summary = (rd / "summary.md").read_text()
    assert summary.startswith("# lab intervene") and "## Controls" in summary
    assert ("CONTROLS FAILED" in summary) != report["decides"]
    assert f"report: {rd}" in stdout and "[bold" not in stdout


@pytest.mark.slow
def test_intervene_rerun_reuses_records_without_loading_and_reports_the_same(whole_run, tmp_path, monkeypatch,
                                                                             capsys):
    out = copied_run(whole_run, tmp_path)
    (first,) = reports(out)
    loads = patch_eager_loader(monkeypatch)
    assert main(["intervene", *RUN, "--triples", str(whole_run_triples(whole_run)), "--out", str(out)]) == 0
    assert loads == []
    assert "note:" not in capsys.readouterr().err
    second = next(p for p in reports(out) if p != first)
    a, b = (json.loads((p / "report.json").read_text()) for p in (first, second))
    assert {k: a[k] for k in SAME_NUMBERS} == {k: b[k] for k in SAME_NUMBERS}
    assert Path(b["work_dir"]) == work_dir(out) and Path(a["work_dir"]).name == work_dir(out).name


def whole_run_triples(whole_run) -> str:
    return json.loads(next(iter(reports(whole_run[0]))).joinpath("report.json").read_text())["settings"]["triples_file"]


def _truncate(path: Path, other: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def _short_entropy(path: Path, other: Path) -> None:
    data = json.loads(path.read_text())
    data["twins"]["P"]["arms"]["A1"]["entropy_bits"].pop()
    path.write_text(json.dumps(data))


def _nan(path: Path, other: Path) -> None:
    data = json.loads(path.read_text())
    data["twins"]["N"]["arms"]["A0"]["entropy_bits"][0] = math.nan
    path.write_text(json.dumps(data))


def _other_question(path: Path, other: Path) -> None:
    shutil.copyfile(other, path)


def _edit(path: Path, other: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data, json.loads(other.read_text()))
    path.write_text(json.dumps(data))


def _entropy_below_zero(path: Path, other: Path) -> None:
    _edit(path, other, lambda data, _: data["twins"]["P"]["arms"]["A1"]["entropy_bits"].__setitem__(0, -50.0))


def _distractor_edited(path: Path, other: Path) -> None:
    _edit(path, other, lambda data, _: data.update(distractor="d2"))


def _twin_of_another_triple(path: Path, other: Path) -> None:
    _edit(path, other, lambda data, theirs: data["twins"].update(N=theirs["twins"]["N"]))


@pytest.mark.slow
@pytest.mark.parametrize("damage,needle", [(_truncate, "not JSON"), (_short_entropy, "per-position lists"),
                                           (_nan, "finite"), (_other_question, "belongs to 'factual-0'"),
                                           (_entropy_below_zero, "minimum"),
                                           (_distractor_edited, "distractor 'd2' is not the triple file's 'd1'"),
                                           (_twin_of_another_triple, "not the triple file's neutral twin")],
                         ids=["truncated", "entropy-list-length", "nan", "another-question", "entropy-below-zero",
                              "distractor-edited", "twin-of-another-triple"])
def test_intervene_damaged_record_is_named_once_and_scored_again(whole_run, tmp_path, monkeypatch, capsys,
                                                                 damage, needle):
    """Fault class: a hand-edited or truncated record entering the analysis, or failing the run, instead of
    being redone on resume; or its note wrapped over several lines (a long record path split the note)."""
    out = copied_run(whole_run, tmp_path)
    (first,) = reports(out)
    victim = record_file(out, "math-1")
    damage(victim, record_file(out, "factual-0"))
    loads = patch_eager_loader(monkeypatch)
    assert main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and str(victim) in notes[0] and "'math-1'" in notes[0], notes
    assert needle in notes[0]
    assert loads == ["smollm2"]
    triple = next(t for t in load_triples(whole_run_triples(whole_run)) if t.id == "math-1")
    assert load_record(victim, triple.labels()).question_id == "math-1"  # redone, whole again
    second = next(p for p in reports(out) if p != first)
    a, b = (json.loads((p / "report.json").read_text()) for p in (first, second))
    assert [t["twins"] for t in a["triples"]] == [t["twins"] for t in b["triples"]]  # greedy: the same numbers
    assert a["analysis"] == b["analysis"]


@pytest.mark.slow
def test_intervene_shards_then_plain_run_scores_nothing_new_and_only_it_reports(triples_file, tmp_path, monkeypatch,
                                                                                capsys, one_torch_thread):
    out = tmp_path / "reports"
    argv = ["intervene", *RUN, "--new-tokens", "3", "--triples", str(triples_file), "--out", str(out)]
    loads = patch_eager_loader(monkeypatch)
    assert main([*argv, "--shard", "1/2"]) == 0
    assert "shard 1/2" in capsys.readouterr().out and reports(out) == []
    assert len(list((work_dir(out) / "records").iterdir())) == 2  # triples 1 and 3 of 3
    assert main([*argv, "--shard", "2/2"]) == 0
    assert reports(out) == [] and len(list((work_dir(out) / "records").iterdir())) == 3
    assert loads == ["smollm2", "smollm2"]
    assert main(argv) == 0
    assert loads == ["smollm2", "smollm2"]  # the plain run scored nothing: no model loaded
    (rd,) = reports(out)
    report = json.loads((rd / "report.json").read_text())
    assert [t["question_id"] for t in report["triples"]] == ["factual-0", "math-1", "code-2"]
    assert all(len(t["continuation"]) <= 3 for t in report["triples"])


@pytest.mark.slow
def test_intervene_second_whole_run_while_locked_is_refused_in_one_line(whole_run, tmp_path, monkeypatch, capsys):
    from lab.runs.locks import hold

    out = copied_run(whole_run, tmp_path)
    loads = patch_eager_loader(monkeypatch)
    with hold(work_dir(out), None, "intervention"):
        rc = main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out)])
        shard_rc = main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out),
                         "--shard", "1/2"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == shard_rc == 2 and len(lines) == 2, lines
    assert all(line.startswith("lab intervene: error: ") for line in lines)
    assert "another whole run of this intervention is already running" in lines[0]
    assert "an unsharded run of this intervention is already running" in lines[1]
    assert loads == [] and len(reports(out)) == 1


@pytest.mark.slow
def test_intervene_work_dir_with_another_runs_settings_is_refused_in_one_line(whole_run, tmp_path, capsys,
                                                                              no_model_loading):
    out = copied_run(whole_run, tmp_path)
    path = work_dir(out) / "settings.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "new_tokens": 7}))
    rc = main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "settings of another run" in lines[0], lines
    assert len(reports(out)) == 1


@pytest.mark.slow
def test_intervene_another_seed_re_analyses_the_same_records_without_a_model(whole_run, tmp_path, no_model_loading):
    """The seed drives only the analysis' label swaps and bootstraps: a new seed reads the finished records
    (no model loads) and writes a report stating its seed."""
    out = copied_run(whole_run, tmp_path)
    assert main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out),
                 "--seed", "7"]) == 0
    seeds = sorted((json.loads((rd / "report.json").read_text())["settings"]["seed"],
                    json.loads((rd / "report.json").read_text())["analysis"]["seed"]) for rd in reports(out))
    assert seeds == [(0, 0), (7, 7)]


def _bad_files(tmp_path: Path, triples_file: Path) -> dict[str, list[str]]:
    clean_only = write_jsonl(tmp_path / "clean.jsonl", [r for r in triple_rows() if "twin_of" not in r])
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "a", "category": "math", "messages": [{"role": "user", "content": "caf\xe9"}]}\n')
    unlabelled = write_jsonl(tmp_path / "unlabelled.jsonl", [{k: v for k, v in r.items() if k != "distractor"}
                                                             for r in triple_rows()])
    return {"no-triple": ["--triples", str(clean_only)], "not-utf8": ["--triples", str(latin)],
            "no-label": ["--triples", str(unlabelled)],
            "missing": ["--triples", str(tmp_path / "none.jsonl")],
            "shared": ["--triples", str(triples_file), "--pilot", str(triples_file), "--pilot-limit", "2"]}


@pytest.mark.parametrize("argv,flag", [
    (["--pilot-limit", "13"], "--pilot-limit"),
    (["--limit", "0"], "--limit"),
    (["--new-tokens", "0"], "--new-tokens"),
    (["--shard", "3/2"], "--shard"),
    (["--pilot-limit", "0", "--shard", "5/5"], "--shard"),  # the file holds 4 triples
    (["--shard", "1/" + "9" * 300], "--shard"),
    (["--draft", "prompt-lookup"], "--draft"),
    (["--dense-rows", "2"], "--dense-rows"),  # float32 weights are dense already
    (["--dense-rows", "0", "--weights", "q4"], "--dense-rows"),
    (["--pilot", "PILOT", "--pilot-limit", "0"], "--pilot"),
    (["no-triple"], "--triples"),
    (["not-utf8"], "--triples"),
    (["no-label"], "--triples"),
    (["missing"], "--triples"),
    (["shared"], "--pilot"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_intervene_bad_flag_exits_2_naming_it_before_any_model_loads(argv, flag, triples_file, tmp_path, capsys,
                                                                     no_model_loading):
    """Fault class: a bad flag or file refused after the model loaded, with a traceback, or naming a
    parameter the user never typed (``prompts=`` for ``--triples``); more shards than triples (empty shards,
    or a lock file name past the file system's limit); a poisoned twin without the distractor label the
    analysis clusters on (unlabelled triples silently pooled as one distractor text)."""
    files = _bad_files(tmp_path, triples_file)
    argv = files.get(argv[0], [a.replace("PILOT", str(triples_file)) for a in argv])
    if "--triples" not in argv:
        argv = [*argv, "--triples", str(triples_file)]
    if "--draft" not in argv:
        argv = ["--draft", "early-exit:1", *argv]
    out = tmp_path / "reports"
    rc = main(["intervene", *argv, "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("lab intervene: error: ") and flag in lines[0], lines
    assert "prompts=" not in lines[0]
    assert not out.exists() or reports(out) == []


@pytest.mark.slow
def test_intervene_twin_not_ending_with_its_clean_prompt_exits_2_before_any_load(tmp_path, monkeypatch, capsys,
                                                                                one_torch_thread):
    bad = write_jsonl(tmp_path / "bad.jsonl", triple_rows(bad_twin="math-1-N"))
    patch_eager_loader(monkeypatch)
    out = tmp_path / "reports"
    rc = main(["intervene", *RUN, "--new-tokens", "2", "--triples", str(bad), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "'math-1-N'" in lines[0], lines
    assert not out.exists()  # refused from the tokenizer alone, before a model loads or a directory is made


def test_intervene_help_describes_the_arms_and_the_tests(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["intervene", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for arm in ("A0", "empty", "A1", "A2", "sink", "C+", "L0.5", "L0.25"):
        assert re.search(rf"(?<![\w.+]){re.escape(arm)}(?![\w.+])", text), arm
    for words in ("difference in differences", "H4b", "dose-response", "Holm", "position-only control",
                  "positive control", "decides nothing"):
        assert words in text, words


def _record(question_id: str = "math-1", n: int = 3) -> TripleRecord:
    from lab.intervene.masks import ARMS, AddedSpan
    from lab.intervene.score import ArmOutcome, TwinOutcome

    def twin(variant: str, k: float) -> TwinOutcome:
        def bits(j: int, arm: str) -> tuple[float, ...]:  # the empty arm reproduces A0 to 1e-7 bits
            return tuple(0.1 * k + (1e-7 * k if arm == "empty" else j / 7) + i / 3 for i in range(n))

        arms = {arm: ArmOutcome(entropy_bits=bits(j, arm), beta=tuple(0.5 + 0.01 * (i + j) for i in range(n)),
                                span_mass=0.0 if arm == "A1" else 0.2 / (j + 1), sink_mass=0.6 - 0.05 * j)
                for j, arm in enumerate(ARMS)}
        gap = max(abs(a - b) for a, b in zip(arms["empty"].entropy_bits, arms["A0"].entropy_bits))
        return TwinOutcome(prompt_id=f"{question_id}-{variant[0].upper()}", variant=variant, n_prompt=20,
                           span=AddedSpan(5, 11), n_decode=n, arms=arms, empty_max_diff_bits=gap)

    return TripleRecord(question_id=question_id, category="math", distractor="d1", continuation=(4, 9, 4)[:n],
                        twins={"P": twin("poisoned", 1.0), "N": twin("neutral", 2.0)}, seconds=0.25)


def test_triple_record_round_trip_gives_equal_summary(tmp_path):
    rec = _record()
    path = tmp_path / "math-1.json"
    path.write_text(json.dumps(rec.to_json()))
    labels = TripleLabels("math-1", "math", "d1", {"P": "math-1-P", "N": "math-1-N"})
    back = load_record(path, labels)
    assert back.summary() == rec.summary()
    assert back.to_json() == rec.to_json()
    with pytest.raises(FileSchemaError, match="belongs to 'math-1'"):
        load_record(path, dataclasses.replace(labels, question_id="code-2"))


def test_render_console_failed_controls_line_is_styled_not_markup():
    """Fault class: Rich markup printed literally ("[bold red]...[/]") on the lab's markup-free consoles."""
    from lab.render.console import SafeConsole
    from lab.render.intervention import render_console

    analysis = types.SimpleNamespace(n_triples=3, n_distractors=3, tests=[], controls={"c_plus": False})
    console = SafeConsole(file=io.StringIO(), width=100)
    render_console(types.SimpleNamespace(decides=False, analysis=analysis), console)
    text = console.file.getvalue()
    assert "controls failed: this run decides nothing" in text and "[bold" not in text and "[/]" not in text
    assert "c_plus FAILED" in text


def _folder_for_record(work: Path) -> None:
    victim = next((work / "records").glob("math-1-*.json"))
    victim.unlink()
    victim.mkdir()


def _file_for_records(work: Path) -> None:
    shutil.rmtree(work / "records")
    (work / "records").write_text("")


def _file_for_work_dir(work: Path) -> None:
    shutil.rmtree(work)
    work.write_text("")


def _folder_for_lock(work: Path) -> None:
    from lab.runs.locks import lock_path

    lock_path(work).unlink(missing_ok=True)
    lock_path(work).parent.mkdir(exist_ok=True)
    lock_path(work).mkdir()


def _fifo_for_settings(work: Path) -> None:
    import os

    (work / "settings.json").unlink()
    os.mkfifo(work / "settings.json")


@pytest.mark.slow
@pytest.mark.parametrize("damage,needle", [(_folder_for_record, "is a folder where the record of 'math-1' goes"),
                                           (_file_for_records, "cannot use the work directory"),
                                           (_file_for_work_dir, "cannot use the work directory"),
                                           (_folder_for_lock, "cannot lock the intervention's work directory"),
                                           (_fifo_for_settings, "settings.json is not a valid intervention "
                                                                "settings file: not a regular file")],
                         ids=["record-folder", "records-file", "work-dir-file", "lock-folder", "settings-fifo"])
def test_intervene_work_dir_of_wrong_kinds_exits_2_in_one_line_before_any_load(whole_run, tmp_path, capsys,
                                                                               no_model_loading, damage, needle):
    """Fault class: a work directory whose parts are not what the run writes (a folder where a record or
    the lock goes, a file where a folder goes) failing as "an error the lab did not foresee", after the
    model loaded; or a FIFO for settings.json blocking the run forever."""
    import signal

    class Blocked(Exception):  # not an OSError, which the code under test may catch
        pass

    def give_up(signum, frame):
        raise Blocked("the run blocked reading the work directory")

    out = copied_run(whole_run, tmp_path)
    damage(work_dir(out))
    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(10)
    try:
        rc = main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out)])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and needle in lines[0], lines
    assert len(reports(out)) == 1


@pytest.mark.slow
def test_intervene_record_that_cannot_be_written_exits_1_naming_it_and_what_is_kept(whole_run, tmp_path, monkeypatch,
                                                                                   capsys):
    """Fault class: a full disk or a read-only folder while a record is written failing as "an error the
    lab did not foresee" instead of one line naming the record and the finished triples kept."""
    import errno

    from lab.runs import files as run_files  # records are written through lab.runs.workdir.WorkDir.save

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = copied_run(whole_run, tmp_path)
    next((work_dir(out) / "records").glob("math-1-*.json")).unlink()
    patch_eager_loader(monkeypatch)
    monkeypatch.setattr(run_files, "write_json_atomic", full)
    rc = main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1, lines
    assert "writing the record of 'math-1'" in lines[0] and "No space left" in lines[0]
    assert f"kept in {work_dir(out)}" in lines[0] and "did not foresee" not in lines[0]
    assert len(reports(out)) == 1


@pytest.mark.slow
def test_intervene_interrupt_says_the_finished_triples_are_kept(whole_run, tmp_path, monkeypatch, capsys):
    """Fault class: an interrupted run's one line hiding that its finished triples are kept and that the same
    command continues from them."""
    from lab.intervene import run as iv

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    out = copied_run(whole_run, tmp_path)
    next((work_dir(out) / "records").glob("math-1-*.json")).unlink()
    patch_eager_loader(monkeypatch)
    monkeypatch.setattr(iv, "score_triple", interrupted)
    rc = main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 130 and len(lines) == 1, lines
    assert "interrupted" in lines[0] and f"kept in {work_dir(out)}" in lines[0]


@pytest.mark.slow
def test_intervene_new_tokens_past_the_context_exits_2_naming_the_flag(triples_file, tmp_path, monkeypatch, capsys,
                                                                       one_torch_thread):
    """Fault class: a --new-tokens past the model's context refused in words naming a parameter the user never
    typed (``max_new_tokens=``), or only at the triple that first meets it. The context is unknown before the
    load here (a GGUF profile not yet dequantized): the loaded model's is checked."""
    from lab.models import loading

    monkeypatch.setattr(loading, "known_context_length", lambda name: None)
    patch_eager_loader(monkeypatch)  # 4096 positions
    out = tmp_path / "reports"
    rc = main(["intervene", *RUN, "--new-tokens", "5000", "--triples", str(triples_file), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert "--new-tokens=5000" in lines[0] and "'factual-0'" in lines[0] and "context of 4096" in lines[0], lines
    assert "max_new_tokens" not in lines[0]
    assert not list((work_dir(out) / "records").iterdir())  # refused before the first triple was scored


def test_intervene_draft_model_with_another_vocabulary_exits_2_before_any_load(triples_file, tmp_path, monkeypatch,
                                                                              capsys, no_model_loading):
    """Fault class: a draft model whose vocabulary is not the target's accepted, so beta compares the target's
    p with q over other tokens (a silently wrong number), or an id past the draft's vocabulary crashing it."""
    from lab.models import loading

    draft = tmp_path / "other-draft"
    draft.mkdir()
    real = loading.load_tokenizer
    monkeypatch.setattr(loading, "load_tokenizer",
                        lambda name: support.gemma_tokenizer() if name == str(draft) else real(name))
    monkeypatch.setattr(loading, "check_draft_available", lambda name: None)
    out = tmp_path / "reports"
    rc = main(["intervene", "--model", "smollm2", "--draft", str(draft), "--pilot-limit", "0", "--limit", "3",
               "--triples", str(triples_file), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"lab intervene: error: --draft='{draft}' has a different vocabulary"), lines
    assert not out.exists()


def _settings(**changes):
    from lab.intervene.run import InterventionSettings

    base = dict(model="smollm2", draft="early-exit:1", weights="float32", draft_weights="float32", dtype="float32",
                device="cpu", triples_file="t.jsonl", triples_sha256="0" * 64, pilot_file="p.jsonl",
                pilot_sha256="1" * 64, limit=None, pilot_limit=1, new_tokens=3, seed=0)
    return InterventionSettings(**{**base, **changes})


def test_build_report_one_triple_pilot_is_reported_with_its_controls(tmp_path):
    """Fault class: a pilot of one triple scored, excluded from the analysis, and then dropped from the report
    (neither named nor its controls checked), so a failed control in it went unseen."""
    from lab.intervene.report import build_report

    main_records = [_record(f"q-{i}") for i in range(3)]
    report = build_report(_settings(), [_record("pilot-0")], main_records, work=tmp_path)
    assert report.pilot is not None and report.pilot_ids == ("pilot-0",)
    assert set(report.pilot.controls) == set(report.analysis.controls)
    assert report.power == ()  # one triple gives no SD: no power table
    assert report.decides == (report.analysis.decides and report.pilot.controls_passed)


def test_build_report_carries_the_arm_means_that_summary_markdown_prints(tmp_path):
    """Fault class: a statistic computed while rendering (the renderer recomputing the per-arm means the
    report already carries, so the two could differ)."""
    import dataclasses

    from lab.analysis.effects import MeanInterval
    from lab.analysis.intervention import ArmMeans, arm_means
    from lab.intervene.report import build_report
    from lab.render.intervention import summary_markdown

    report = build_report(_settings(pilot_limit=0), [], [_record(f"q-{i}") for i in range(3)], work=tmp_path)
    assert report.arms == arm_means(report.main)
    planted = ArmMeans({k: MeanInterval(1.2345, 0.0, 0.95, 3) for k in report.arms.by_arm}, report.arms.dose_gap)
    text = summary_markdown(dataclasses.replace(report, arms=planted))
    assert "| A0 | 1.2345 | 1.2345 | 1.2345 | 1.2345 | 1.2345 | 1.2345 |" in text


def test_report_json_of_a_run_with_a_pilot_is_its_typed_report_key_for_key_in_order(tmp_path):
    """Fault class: a typed report (lab.kinds.intervene.Report) that differs from what the writer writes (a key
    added, dropped or moved, a NaN figure refused) changing report.json's bytes or refusing a run's report."""
    from lab.intervene.report import build_report
    from lab.kinds.intervene import KIND as INTERVENE
    from lab.render.intervention import report_json
    from lab.reports import to_jsonable
    from lab.typed import to_json

    main_records = [dataclasses.replace(_record(f"q-{i}"), distractor=f"d{i % 3}", vocab_size=64 if i else None)
                    for i in range(4)]  # a record from before vocab_size was kept, and three with it
    pilot = [_record("p-1"), _record("p-2")]
    data = to_jsonable(report_json(build_report(_settings(pilot_limit=2), pilot, main_records, work=tmp_path),
                                   tmp_path))
    assert data["power"] and data["pilot"] and data["analysis"]["did_entropy"]["estimate"] is None  # NaN: untested
    assert "vocab_size" not in data["triples"][0] and data["triples"][1]["vocab_size"] == 64
    written = {k: v for k, v in data.items() if k != "kind"}
    assert json.dumps(to_json(INTERVENE.read(data))) == json.dumps(written)


def test_summary_markdown_labels_with_pipes_and_line_breaks_stay_in_their_cell(tmp_path):
    """Fault class: a user's distractor label or id holding ``|`` or a line break splitting summary.md's tables
    and headings (a row read under the wrong columns)."""
    import dataclasses

    from lab.intervene.report import build_report
    from lab.render.intervention import summary_markdown

    main_records = [dataclasses.replace(_record(f"q-{i}"), distractor=f"a|b\n# c{i}") for i in range(3)]
    pilot = [_record("p|1\n## x"), _record("p-2")]
    text = summary_markdown(build_report(_settings(pilot_limit=2), pilot, main_records, work=tmp_path))
    rows = [line for line in text.splitlines() if line.startswith("| a\\|b")]
    assert len(rows) == 3 and all(line.count(" | ") == 3 for line in rows), rows
    assert "| a\\|b\\n# c0 |" in text and "p\\|1\\n## x" in text
    assert not any(line.startswith(("# c", "## x")) for line in text.splitlines())


@pytest.mark.slow
def test_intervene_triple_past_a_known_context_exits_2_before_any_load(triples_file, tmp_path, monkeypatch, capsys,
                                                                      no_model_loading):
    """Fault class: a triple too long for the context (its twin plus --new-tokens) refused only after the
    model's weights loaded, when the context is known from the model's config alone."""
    from lab.models import loading

    monkeypatch.setattr(loading, "known_context_length", lambda name: 64)
    out = tmp_path / "reports"
    rc = main(["intervene", *RUN, "--new-tokens", "100", "--triples", str(triples_file), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("lab intervene: error: --new-tokens=100: triple 'factual-0'"), lines
    assert "context of 64" in lines[0], lines
    assert not out.exists()  # refused before a model loads or a directory is made


@pytest.mark.slow
def test_intervene_out_with_a_quoted_tilde_writes_under_home(whole_run, tmp_path, monkeypatch, no_model_loading):
    """Fault class: a quoted ``--out '~/x'`` (no shell expansion) taken literally, so the report went to a
    folder named ``~`` under the working directory."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    shutil.copytree(whole_run[0], home / "x")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    assert main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", "~/x"]) == 0
    assert list(cwd.iterdir()) == []
    assert len(reports(home / "x")) == 2


def test_intervene_draft_path_that_does_not_exist_exits_2_naming_draft(triples_file, tmp_path, capsys,
                                                                      no_model_loading):
    """Fault class: an error about ``--draft`` worded as one about ``--model`` (a parameter name rewritten to
    the wrong flag), so the user is sent to fix the flag that is right."""
    missing = tmp_path / "no-such-draft"
    rc = main(["intervene", "--model", "smollm2", "--draft", str(missing), "--pilot-limit", "0",
               "--triples", str(triples_file), "--out", str(tmp_path / "reports")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"lab intervene: error: --draft='{missing}'"), lines
    assert "--model" not in lines[0] and "model=" not in lines[0], lines


@pytest.mark.slow
@pytest.mark.parametrize("named", [True, False], ids=["with-filename", "without-filename"])
def test_intervene_report_on_a_full_disk_exits_1_naming_what_failed(whole_run, tmp_path, monkeypatch, capsys,
                                                                   no_model_loading, named):
    """Fault class: a report that cannot be written (a full disk) named with an empty file name
    ("No space left on device: )"), or by the staging path that is removed, instead of the file or folder."""
    import errno

    from lab import reports as lab_reports

    def full(self, name, data):
        raise OSError(errno.ENOSPC, "No space left on device", *([str(self.path / name)] if named else []))

    out = copied_run(whole_run, tmp_path)
    monkeypatch.setattr(lab_reports.ReportDir, "write_json", full)
    rc = main(["intervene", *RUN, "--triples", whole_run_triples(whole_run), "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1, lines
    assert "No space left on device" in lines[0] and ": )" not in lines[0] and ": ;" not in lines[0], lines
    assert re.search(rf"writing the report to '{re.escape(str(out))}/[^']*-intervene-smollm2' failed", lines[0])
    assert ("(No space left on device: report.json)" in lines[0]) == named, lines
    assert ".partial-" not in lines[0] and "did not foresee" not in lines[0], lines
    assert f"kept in {work_dir(out)}" in lines[0] and len(reports(out)) == 1


@pytest.mark.parametrize("flag,value", [("--limit", "abc"), ("--new-tokens", "x"), ("--pilot-limit", "1.5"),
                                        ("--seed", "")])
def test_intervene_non_integer_flag_exits_2_in_one_line_naming_it(flag, value, tmp_path, capsys, no_model_loading):
    """Fault class: a value of the wrong type answered with argparse's usage block over the error line,
    where every other refusal of the lab is one line naming the flag."""
    with pytest.raises(SystemExit) as exc:
        main(["intervene", flag, value, "--out", str(tmp_path / "reports")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("lab intervene: error: ") and flag in lines[0], lines
    assert not (tmp_path / "reports").exists()


class _ReversedExecutor:
    """An executor (lab.runs.engine.Executor) that scores the triples in this process in reverse order, as a
    cluster may return them, giving up on the ids in ``fail``; stands in for lab.runs.cluster.RayExecutor."""

    made: list = []

    def __init__(self, config, fail: frozenset[str] = frozenset()):
        from lab.runs.engine import SerialExecutor

        self.config, self.fail, self.serial, self.events = config, fail, SerialExecutor(), []
        _ReversedExecutor.made.append(self)

    def start(self, experiment):
        self.events.append("start")
        return self.serial.start(experiment)

    def run(self, units, progress):
        from lab.runs.engine import UnitFailure

        for unit in reversed(list(units)):
            yield unit, (UnitFailure("RuntimeError: boom") if unit.id in self.fail
                         else self.serial.experiment.measure(self.serial.state, unit))

    def close(self):
        self.events.append("close")


@pytest.mark.slow
def test_intervene_ray_executor_out_of_order_equals_the_serial_run(triples_file, tmp_path, monkeypatch, capsys,
                                                                   one_torch_thread):
    """Fault class: records that depend on where or in which order the triples were scored (a cluster run
    that differs from the serial one), or a --ray flag that does not reach the executor."""
    from lab.runs import cluster

    patch_eager_loader(monkeypatch)
    monkeypatch.setattr(cluster, "require_ray", lambda: None)
    monkeypatch.setattr(cluster, "RayExecutor", _ReversedExecutor)
    _ReversedExecutor.made = []
    argv = ["intervene", *RUN, "--new-tokens", "3", "--triples", str(triples_file)]
    assert main([*argv, "--out", str(tmp_path / "serial")]) == 0
    assert _ReversedExecutor.made == []
    assert main([*argv, "--out", str(tmp_path / "ray"), "--ray", "auto", "--ray-actors", "2"]) == 0
    (ex,) = _ReversedExecutor.made
    assert ex.config == cluster.ClusterConfig(address="auto", n_actors=2, threads=1)
    assert ex.events == ["start", "close"]
    serial, ray = (json.loads((reports(tmp_path / d)[0] / "report.json").read_text()) for d in ("serial", "ray"))
    assert [t["question_id"] for t in ray["triples"]] == ["factual-0", "math-1", "code-2"]
    same = [k for k in SAME_NUMBERS if k != "seconds"]  # the total scoring time is the one figure that differs
    assert {k: support.without_seconds(serial[k]) for k in same} == {k: support.without_seconds(ray[k]) for k in same}


@pytest.mark.slow
def test_intervene_triple_the_cluster_gives_up_on_exits_1_naming_it_with_no_report(triples_file, tmp_path,
                                                                                   monkeypatch, capsys,
                                                                                   one_torch_thread):
    """Fault class: a triple lost on a cluster leaving a report that silently lacks it, or its finished
    neighbours lost with it."""
    from lab.runs import cluster

    patch_eager_loader(monkeypatch)
    monkeypatch.setattr(cluster, "require_ray", lambda: None)
    monkeypatch.setattr(cluster, "RayExecutor", lambda config: _ReversedExecutor(config, frozenset({"math-1"})))
    out = tmp_path / "reports"
    argv = ["intervene", *RUN, "--new-tokens", "3", "--triples", str(triples_file), "--out", str(out)]
    assert main([*argv, "--ray", "auto"]) == 1
    err = capsys.readouterr().err
    assert "1 of 3 triples failed on the cluster, so no report was written" in err
    assert "math-1: RuntimeError: boom" in err and f"kept in {work_dir(out)}" in err
    assert reports(out) == [] and len(list((work_dir(out) / "records").iterdir())) == 2
    assert main(argv) == 0 and len(reports(out)) == 1  # the same command, serially, scores the one left
