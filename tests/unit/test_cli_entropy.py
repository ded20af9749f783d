"""``lab entropy`` in-process on a tiny model, its validation, and the entropy rendering."""

from __future__ import annotations

import json
import math

import pytest
import torch
from rich.console import Console

import lab.models.loading
from lab import cli
from lab.render.entropy import ENTROPY_BUCKETS, SPARK_BLOCKS, bucket_for, coloured_text, render_result, sparkline
from lab.reports import rows_from_csv
from lab.tracker.results import DecodeSettings, StepRecord, TrackResult
from tests import support

from tests.support import report_dirs


@pytest.fixture
def tiny_backend(monkeypatch):
    """Route model loading to a tiny Llama with a ChatML tokenizer (no weights, no download)."""
    tok = support.chatml_tokenizer()
    model = support.tiny_llama(vocab_size=len(tok))

    def fake_load(name, *, device=None, dtype=None, attn_implementation=None, weights="float32"):
        return model, tok

    monkeypatch.setattr(lab.models.loading, "load_model", fake_load)
    monkeypatch.setattr(lab.models.loading, "resolve_source", lambda name: (name, None))
    return model, tok


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("argv, names", [
    (["", "--max-new-tokens", "4"], "prompt=''"),
    (["   "], "prompt='   '"),
    (["hi", "--system", " "], "--system=' '"),
    (["hi", "--max-new-tokens", "0"], "--max-new-tokens=0"),
    (["hi", "--temperature", "-0.5"], "--temperature=-0.5"),
    (["hi", "--top-p", "0"], "--top-p=0.0"),
    (["hi", "--top-p", "1.5"], "--top-p=1.5"),
    (["hi", "--top-k", "0"], "--top-k=0"),
    (["hi", "--seed", "-3"], "--seed=-3"),
    (["hi", "--top-alternatives", "0"], "--top-alternatives=0"),
    (["hi", "--model", "no-such-profile"], "--model='no-such-profile'"),
    (["hi", "--device", "banana"], "--device='banana'"),
    (["hi", "--dtype", "int8"], "--dtype='int8'"),
])
def test_cli_entropy_bad_argument_exits_2_names_it_writes_nothing(tmp_path, capsys, no_model_loading, argv, names):
    """Each bad argument: exit code 2, one error line naming the argument and value, no report,
    and the model is never loaded."""
    out = tmp_path / "reports"
    rc = cli.main(["entropy", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "lab entropy: error:" in err and names in err
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cli_entropy_unavailable_device_exits_2(tmp_path, capsys, no_model_loading):
    rc = cli.main(["entropy", "hi", "--device", "cuda", "--out", str(tmp_path)])
    assert rc == 2 and "device='cuda'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_entropy_non_integer_flag_is_usage_error(tmp_path):
    with pytest.raises(SystemExit) as info:
        cli.main(["entropy", "hi", "--max-new-tokens", "many", "--out", str(tmp_path)])
    assert info.value.code == 2
    assert list(tmp_path.iterdir()) == []


def test_cli_entropy_unavailable_hub_model_exits_2_names_default(tmp_path, capsys, monkeypatch):
    """An uncached hub id offline: one error line naming it and smollm2; no report."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = cli.main(["entropy", "hi", "--model", "lab-tests-nonexistent/none", "--device", "cpu",
                   "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "lab-tests-nonexistent/none" in err and "smollm2" in err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- a full run on a tiny model


def test_cli_entropy_tiny_model_writes_complete_report(tmp_path, capsys, tiny_backend):
    rc = cli.main(["entropy", "what is the capital of france ?", "--max-new-tokens", "6", "--temperature", "0.8",
                   "--top-k", "10", "--seed", "5", "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    (report,) = report_dirs(tmp_path)
    assert report.name.endswith("-entropy-what-is-the-capital-of-france")
    assert sorted(p.name for p in report.iterdir()) == ["entropy.png", "index.html", "report.json", "summary.md", "tokens.csv"]
    data = json.loads((report / "report.json").read_text())
    assert data["settings"] == {"max_new_tokens": 6, "temperature": 0.8, "top_p": 1.0, "top_k": 10, "seed": 5,
                                "top_alternatives": 5}
    assert data["seed"] == 5 and data["device"] == "cpu" and data["dtype"] == "float32"
    assert data["environment"]["libraries"]["torch"]
    assert len(data["steps"]) == len(data["new_token_ids"]) == 6
    for step in data["steps"]:
        assert 0 <= step["entropy_bits"] <= math.log2(data["vocab_size"]) + 1e-4
        assert 0 < step["sampled_entropy_bits"] <= math.log2(10) + 1e-4
        assert len(step["alternatives"]) == 5
    rows = rows_from_csv(report / "tokens.csv")
    assert [float(r["entropy_bits"]) for r in rows] == pytest.approx([s["entropy_bits"] for s in data["steps"]])
    summary = (report / "summary.md").read_text()
    assert "what is the capital of france ?" in summary and "](entropy.png)" in summary
    assert (report / "entropy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "legend" in out and f"report: {report}" in out


def test_cli_entropy_failure_while_writing_leaves_no_report(tmp_path, tiny_backend, monkeypatch):
    """Regression (fault class: half-written report): a failure after report.json was written
    removes the whole directory."""
    import lab.render.entropy as render

    def broken_plot(result, path):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(render, "plot_entropy", broken_plot)
    rc = cli.main(["entropy", "hello", "--max-new-tokens", "2", "--device", "cpu", "--out", str(tmp_path / "out")])
    assert rc == 1  # the last-resort handler: one line, the traceback in a file (test_cli_last_resort.py)
    assert list((tmp_path / "out").iterdir()) == []


# --------------------------------------------------------------------------- rendering


def _result(texts: list[str], normalized: list[float]) -> TrackResult:
    v = 1024
    steps = [StepRecord(position=3 + i, token_id=i, token_text=t, entropy_bits=n * math.log2(v), normalized_entropy=n,
                        varentropy_bits2=0.0, sampled_entropy_bits=0.0, sampled_normalized_entropy=0.0,
                        chosen_prob=0.5, alternatives=[(i, t, 0.5), (99, "[/]", 0.25)])
             for i, (t, n) in enumerate(zip(texts, normalized))]
    return TrackResult(steps=steps, prompt_ids=torch.zeros(1, 3, dtype=torch.long), new_token_ids=list(range(len(texts))),
                       text="".join(texts), settings=DecodeSettings(), stop_reason="max_new_tokens", elapsed_s=0.1,
                       vocab_size=v)


def test_render_token_text_with_brackets_printed_literally():
    """Regression (fault class: token text parsed as Rich markup): '[bold]', '[/]' and '[red]'
    tokens print as themselves and do not raise MarkupError."""
    result = _result(["[bold]", " x ", "[/]", "[red]"], [0.05, 0.2, 0.3, 0.9])
    assert coloured_text(result).plain == "[bold] x [/][red]"
    console = Console(record=True, width=120, color_system=None)
    render_result(result, console, prompt="[italic]p")
    text = console.export_text()
    assert "[bold] x [/][red]" in text and "[italic]p" in text and "[/]" in text


def test_coloured_text_styles_follow_buckets():
    result = _result(["a", "b", "c", "d"], [0.05, 0.2, 0.3, 0.9])
    styles = [span.style for span in coloured_text(result).spans]
    assert styles == [b.style for b in ENTROPY_BUCKETS]


@pytest.mark.parametrize("value, label", [(0.0, "confident"), (0.0999, "confident"), (0.10, "a few options"),
                                          (0.2499, "a few options"), (0.25, "uncertain"), (0.45, "guessing"),
                                          (1.0, "guessing"), (math.nan, "guessing")])
def test_bucket_for_thresholds_are_half_open(value, label):
    assert bucket_for(value).label == label


def test_bucket_thresholds_increasing():
    uppers = [b.upper for b in ENTROPY_BUCKETS]
    assert uppers == sorted(uppers) and math.isinf(uppers[-1])


def test_sparkline_scales_min_to_lowest_max_to_highest_block():
    s = sparkline([0.0, 1.0, 2.0, 4.0])
    assert len(s) == 4 and s[0] == SPARK_BLOCKS[0] and s[-1] == SPARK_BLOCKS[-1]
    assert list(s) == sorted(s, key=SPARK_BLOCKS.index)


def test_sparkline_long_input_folded_keeping_peaks():
    """Folding into `width` columns keeps each column's maximum: a lone spike survives."""
    values = [0.0] * 1000
    values[537] = 5.0
    s = sparkline(values, width=50)
    assert len(s) == 50 and s.count(SPARK_BLOCKS[-1]) == 1


def test_sparkline_empty_and_all_zero():
    assert sparkline([]) == ""
    assert sparkline([0.0, 0.0]) == SPARK_BLOCKS[0] * 2


# --------------------------------------------------------------------------- bench-tracker


def test_cli_bench_tracker_tiny_model_writes_report(tmp_path, capsys, tiny_backend):
    """The benchmark runs both arms, finds identical tokens, and writes report.json + summary.md."""
    rc = cli.main(["bench-tracker", "--max-new-tokens", "4", "--repeats", "2", "--stats-iterations", "3",
                   "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    (report,) = report_dirs(tmp_path)
    assert report.name.endswith("-bench-tracker")
    data = json.loads((report / "report.json").read_text())
    assert len(data["times_s"]["on"]) == len(data["times_s"]["off"]) == 2
    assert data["identical_tokens"] is True and data["tokens_per_run"] == 4
    expected = (data["on_s"]["median"] - data["off_s"]["median"]) / data["off_s"]["median"] * 100
    assert data["overhead_pct_median"] == pytest.approx(expected)
    assert "overhead of medians" in (report / "summary.md").read_text()
    out = capsys.readouterr().out
    assert "The tracker adds" in out and "goal" not in out and "met" not in out.split()
    load = data["machine_load"]
    assert load["threads"] == data["torch_threads"] and load["rule"].startswith("busy when")
    assert set(load["per_method"]) == {"tracker on", "tracker off"}
    assert all(len(m["load_1m_before"]) == 2 for m in load["per_method"].values())


def test_cli_bench_tracker_report_json_is_its_kind_typed_report_in_the_files_order(tmp_path, tiny_backend):
    """report.json of ``lab bench-tracker`` holds its keys in the order reports have always held them, and read
    through its kind's typed report and written again it is the same text. Fault class: a typed report whose
    fields drift from the file (a key added, dropped or moved)."""
    from lab.kinds.bench_tracker import KIND
    from lab.typed import to_json

    assert cli.main(["bench-tracker", "--max-new-tokens", "3", "--repeats", "1", "--stats-iterations", "2",
                     "--device", "cpu", "--out", str(tmp_path)]) == 0
    (report,) = report_dirs(tmp_path)
    text = (report / "report.json").read_text()
    data = json.loads(text)
    assert list(data) == ["kind", "format", "prompt", "settings", "repeats", "tokens_per_run", "prompt_tokens",
                          "vocab_size", "model", "environment", "times_s", "off_s", "on_s", "overhead_pct_median",
                          "overhead_pct_min", "overhead_pct_paired_median", "per_token_ms_off",
                          "statistics_us_per_step", "statistics_pct_of_decode_step", "identical_tokens",
                          "torch_threads", "machine_load"]
    again = {"kind": data["kind"], "format": data["format"], **to_json(KIND.read(data))}
    assert json.dumps(again, indent=2, allow_nan=False) + "\n" == text


@pytest.mark.parametrize("argv, names", [(["--repeats", "0"], "--repeats=0"),
                                         (["--max-new-tokens", "0"], "--max-new-tokens=0"),
                                         (["--stats-iterations", "0"], "--stats-iterations=0"),
                                         (["--threads", "0"], "--threads=0"),
                                         (["--device", "banana"], "--device='banana'")])
def test_cli_bench_tracker_bad_argument_exits_2(tmp_path, capsys, no_model_loading, argv, names):
    rc = cli.main(["bench-tracker", *argv, "--out", str(tmp_path)])
    assert rc == 2 and names in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
