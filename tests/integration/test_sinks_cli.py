"""The sink detector on the embedded model: capture parity, `lab sinks` / `calibrate-sinks` / `bench-sinks` reports."""

from __future__ import annotations

import json

import pytest
import torch

from lab import cli
from lab.sinks.capture import capture_received, eager_received
from lab.models.chat import build_messages
from lab.reports import read_json, rows_from_csv
from lab.sinks.structure import analyze_structure

# float32 on CPU, 30 layers: the streaming path and eager output_attentions differ
# only by summation order and SDPA-vs-eager rounding of the hidden states (~1e-6).
PARITY_ATOL = 1e-5


def test_capture_real_model_equals_eager_output_attentions(smollm2):
    model, tok = smollm2
    ids = analyze_structure(tok, build_messages("Name three rivers in Africa, please.")).input_ids
    streamed = capture_received(model, ids, chunk_size=7).per_head
    naive = eager_received(model, ids)
    assert streamed.shape == naive.shape == (30, 9, ids.shape[1])
    torch.testing.assert_close(streamed, naive, atol=PARITY_ATOL, rtol=0)
    assert model.config._attn_implementation == "sdpa"


def test_cli_sinks_writes_report_that_parses(tmp_path, capsys, lab_log):
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("Explain <|im_start|> tokens and [bold]markup[/bold] in one sentence.", encoding="utf-8")
    rc, rd = lab_log.cli(["sinks", "--prompt-file", str(prompt_file), "--device", "cpu"])
    assert rc == 0 and rd is not None
    stdout = capsys.readouterr().out
    assert "context health" in stdout and "[bold]markup[/bold]" in stdout
    assert "-sinks-prompt" in rd.name
    assert {p.name for p in rd.iterdir()} == {"report.json", "positions.csv", "summary.md", "heatmap.png", "index.html"}
    report = read_json(rd / "report.json")
    a = report["analysis"]
    s = a["n_tokens"]
    assert len(a["z"]) == len(a["received"]) == len(a["tokens"]) == s
    assert a["per_head_shape"] == [30, 9, s] and a["per_head"] is not None
    assert a["is_sink"][0] and 0 in a["structural_sinks"]  # position 0 is the sink on this model
    typed = [i for i, t in enumerate(a["tokens"]) if t == "<|im_start|>"]
    assert [a["roles"][i] for i in typed] == ["template", "template", "content", "template"]
    lab_log.record(n_tokens=s, position0_sink=bool(a["is_sink"][0]))
    rows = rows_from_csv(rd / "positions.csv")
    assert len(rows) == s and rows[0]["is_sink"] == "True"
    assert (rd / "heatmap.png").stat().st_size > 1000
    assert "context health" in (rd / "summary.md").read_text(encoding="utf-8")


def test_cli_sinks_prompt_longer_than_context_exits_2_without_report(tmp_path, capsys):
    out = tmp_path / "reports"
    long_prompt = "word " * 9000
    assert cli.main(["sinks", long_prompt, "--device", "cpu", "--out", str(out)]) == 2
    assert "context of 8192" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_cli_calibrate_sinks_small_set_writes_report(tmp_path, lab_log):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "prompt": "What is the tallest mountain in Europe?"},
        {"id": "b", "prompt": "List two primary colours.", "system": "Be brief."},
    ]) + "\n", encoding="utf-8")
    rc, rd = lab_log.cli(["calibrate-sinks", "--prompts", str(prompts), "--held-out", str(prompts),
                          "--long-lengths", "128", "--device", "cpu"])
    assert rc == 0 and rd is not None
    data = read_json(rd / "report.json")
    assert data["n_prompts"] == 2 and len(data["sweep"]) == len(rows_from_csv(rd / "sweep.csv"))
    (long,) = data["long_prompts"]
    assert long["id"] == "long-128" and long["n_tokens"] > 128 and data["sweep"][0]["long_n_prompts"] == 1
    if data["chosen_threshold"] is not None:
        held = data["held_out"]
        assert held["short"]["n_prompts"] == 2 and held["long"]["n_prompts"] == 1
        assert "held-out set" in (rd / "summary.md").read_text()
    assert {p.name for p in rd.iterdir()} == {"report.json", "sweep.csv", "prompts.csv", "summary.md", "index.html",
                                             "sweep.png"}


@pytest.mark.slow
def test_cli_bench_sinks_short_lengths_writes_report(lab_log):
    """The benchmark's plumbing (subprocess workers, peak-memory reading) at toy lengths."""
    rc, rd = lab_log.cli(["bench-sinks", "--lengths", "64", "--eager-length", "64", "--device", "cpu"])
    assert rc == 0 and rd is not None
    data = read_json(rd / "report.json")
    assert [r["mode"] for r in data["results"]] == ["sdpa", "capture", "eager"]
    assert all("error" not in r and r["seconds"] > 0 for r in data["results"]), data["results"]
    assert data["comparison"]["length"] == 64 and data["comparison"]["time_ratio"] > 0
    assert data["machine_load"]["threads"] == data["torch_threads"]
    assert len(data["machine_load"]["samples"]) == 2 * len(data["results"])
