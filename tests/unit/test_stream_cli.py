"""``lab stream``: bad input exits 2 with one line and no report; a tiny-model run writes a consistent report."""

from __future__ import annotations

import csv
import json
import math
import random

import numpy as np
import pytest

from lab.cli import main
from tests import support

from tests.support import report_dirs

TINY_ARGS = ["--tokens", "160", "--policies", "dense,window:12,sinks:4+12,detected:4+12,recompute:16",
             "--chunk-tokens", "16", "--detect-tokens", "32", "--recompute-every", "2", "--prompt-tokens", "40",
             "--max-new-tokens", "6", "--gamma", "2", "--draft", "early-exit:1"]


@pytest.mark.parametrize("argv,needle", [
    (["--policies", "window:0"], "window:0"),
    (["--policies", "sinks:252"], "sinks:252"),
    (["--policies", "dense,dense"], "dense twice"),
    (["--policies", "nope"], "'nope'"),
    (["--tokens", "0"], "--tokens=0"),
    (["--tokens", "300"], "--tokens=300"),
    (["--chunk-tokens", "0"], "--chunk-tokens=0"),
    (["--recompute-every", "0"], "--recompute-every=0"),
    (["--gamma", "0"], "--gamma=0"),
    (["--temperature", "0"], "--temperature=0"),
    (["--prompt-tokens", "9999"], "--prompt-tokens=9999"),
    (["--draft", "prompt-lookup"], "prompt-lookup"),
    (["--draft", "early-exit:x"], "early-exit:x"),
    (["--text-file", "/no/such/file.txt"], "/no/such/file.txt"),
    (["--model", "no-such-model"], "no-such-model"),
    (["--model", "some/hub-id"], "--no-acceptance"),
    (["--draft-weights", "int8", "--no-acceptance"], "no draft runs"),
    (["--draft", "early-exit:4", "--draft-weights", "int8"], "no weights of its own"),
    (["--draft", "some/hub-id", "--draft-weights", "q4"], "not a GGUF profile"),
])
def test_stream_cli_bad_input_exits_2_without_report(tmp_path, capsys, argv, needle):
    out = tmp_path / "reports"
    rc = main(["stream", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists() or list(out.iterdir()) == []


def test_stream_cli_non_utf8_text_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait".encode("latin-1"))
    assert main(["stream", "--text-file", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "latin1.txt:1: not valid UTF-8" in capsys.readouterr().err


@pytest.fixture
def tiny_loader(monkeypatch):
    model, tok = support.tiny_llama(max_positions=512), support.base_tokenizer()
    monkeypatch.setattr("lab.models.loading.load_model", lambda *a, **k: (model, tok))
    return model, tok


@pytest.fixture
def text_file(tmp_path):
    rng = random.Random(0)
    words = [w for w in support.WORDS if w.isalpha()]
    path = tmp_path / "text.txt"
    path.write_text(" ".join(rng.choice(words) for _ in range(900)), encoding="utf-8")
    return path


def test_stream_cli_text_longer_than_context_exits_2_naming_it(tmp_path, capsys, tiny_loader, text_file):
    out = tmp_path / "r"
    rc = main(["stream", "--text-file", str(text_file), *TINY_ARGS, "--tokens", "600", "--out", str(out)])
    assert rc == 2
    assert "context of 512" in capsys.readouterr().err
    assert not out.exists() or list(out.iterdir()) == []


def test_stream_cli_tiny_run_writes_consistent_report(tmp_path, capsys, tiny_loader, text_file, one_torch_thread):
    """170 tokens: 169 targets, 9 whole chunks of 16 from target 16 (16..159), and a partial chunk of 10
    targets that the chunked PPL leaves out, as the summary must say (fault class: a summary naming targets
    the PPL never scored, "targets 16..169")."""
    out = tmp_path / "r"
    assert main(["stream", "--text-file", str(text_file), *TINY_ARGS, "--tokens", "170", "--out", str(out)]) == 0
    (rd,) = report_dirs(out)
    assert rd.name.endswith("-stream-text")
    assert {p.name for p in rd.iterdir()} == {"index.html", "report.json", "policies.csv", "tokens.csv", "summary.md",
                                               "rolling_nll.png"}
    report = json.loads((rd / "report.json").read_text())
    specs = ["dense", "window:12", "sinks:4+12", "detected:4+12", "recompute:16"]
    assert [p["policy"] for p in report["policies"]] == specs
    assert report["settings"]["eval_start"] == 16
    # PPL in report.json equals exp(mean NLL) recomputed from tokens.csv over the evaluation region
    with (rd / "tokens.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 169
    n_chunks = (170 - 16) // 16
    for p in report["policies"]:
        vals = [float(r[f"nll_{p['policy']}"]) for r in rows[15:15 + n_chunks * 16] if r[f"nll_{p['policy']}"]]
        chunks = np.array([float(r[f"nll_{p['policy']}"] or "nan") for r in rows[15:15 + n_chunks * 16]])
        chunk_means = np.nanmean(chunks.reshape(n_chunks, 16), axis=1)
        assert math.isclose(p["ppl"], math.exp(chunk_means.mean()), rel_tol=1e-9)
        assert p["ppl_low"] <= p["ppl"] <= p["ppl_high"]
        assert len(vals) == (n_chunks * 16 if p["kind"] != "recompute" else n_chunks * 8)
        assert p["last_target"] == 16 + n_chunks * 16 - 1 == 159 and p["n_targets_ppl"] == len(vals)
    dense = {r["position"]: r["nll_dense"] for r in rows}
    assert all(r["nll_window:12"] == dense[r["position"]] for r in rows[:11])  # no eviction before the window fills
    assert [t["a"] for t in report["tests"]] == ["window:12", "window:12"]
    acc = report["acceptance"]
    assert {(a["policy"], a["mode"]) for a in acc} == {(s, m) for s in specs[:4] for m in ("greedy", "sampled")}
    greedy = [a["tokens"] for a in acc if a["mode"] == "greedy"]
    assert all(g == greedy[0] for g in greedy)  # the target decides: greedy output is policy-independent
    assert all(0 <= a["n_accepted"] <= a["n_tested"] for a in acc)
    for a in acc:  # per-round records add up to the totals; the large-sample top-1 counts are counts
        assert sum(r["n_tested"] for r in a["rounds"]) == a["n_tested"]
        assert sum(r["n_accepted"] for r in a["rounds"]) == a["n_accepted"]
        assert 0 <= a["top1_agree_target"] <= a["top1_n"] and 0 < a["mean_overlap"] <= 1 + 1e-6
        if a["mode"] == "greedy":
            assert a["rounds_tested_differ"] <= a["rounds_proposals_differ"] <= a["rounds_compared"] <= a["n_rounds"]
    dense_greedy = next(a for a in acc if a["policy"] == "dense" and a["mode"] == "greedy")
    assert dense_greedy["rounds_proposals_differ"] == 0
    assert dense_greedy["top1_agree_dense_draft"] == dense_greedy["top1_n"]
    summary = (rd / "summary.md").read_text()
    assert "targets 16..159, 144 in whole chunks; the last 10 targets (160..169, a partial chunk) are left out" \
        in summary and "16..169" not in summary
    assert "Pre-stated test" in summary and "negative control" in summary and "StreamingLLM" in summary
    assert "Large-sample check" in summary
    with (rd / "policies.csv").open() as fh:
        assert [r["policy"] for r in csv.DictReader(fh)] == specs
    assert (rd / "rolling_nll.png").read_bytes()[:4] == b"\x89PNG"
    assert "report:" in capsys.readouterr().out


def test_stream_cli_draft_weights_reach_the_draft_and_the_report(tmp_path, capsys, tiny_loader, text_file,
                                                                 monkeypatch, one_torch_thread):
    """--draft-weights is handed to the draft's loader and recorded, in `lab stream` as in every command."""
    from lab.speculative import draft_specs

    seen = []
    real = draft_specs.make_draft

    def spy(target, spec, **kw):
        seen.append((spec, kw.get("weights")))
        return real(target, "early-exit:1", target_tokenizer=kw.get("target_tokenizer"))

    monkeypatch.setattr(draft_specs, "make_draft", spy)
    monkeypatch.setattr("lab.models.loading.is_gguf_model", lambda name: True)
    out = tmp_path / "r"
    i = TINY_ARGS.index("--recompute-every")  # the policies below have no recompute:W, which alone reads it
    args = [a if a != "early-exit:1" else "qwen2.5-coder-0.5b" for a in TINY_ARGS[:i] + TINY_ARGS[i + 2:]]
    assert main(["stream", "--text-file", str(text_file), *args, "--tokens", "170", "--draft-weights", "int8",
                 "--policies", "dense,window:12", "--out", str(out)]) == 0
    assert seen == [("qwen2.5-coder-0.5b", "int8")]
    (rd,) = report_dirs(out)
    assert json.loads((rd / "report.json").read_text())["settings"]["draft_weights"] == "int8"
    assert "(int8 weights)" in (rd / "summary.md").read_text()


def test_stream_cli_report_json_is_its_typed_report_key_for_key_in_order(tmp_path, monkeypatch, tiny_loader,
                                                                         text_file, one_torch_thread):
    """Fault class: a typed report (lab.kinds.stream.Report) that differs from what the command writes (a key added,
    dropped or moved, a null refused) changing report.json's bytes: the dict the command hands the writer is its
    typed report's JSON, in the same order."""
    from lab.kinds.stream import KIND as STREAM
    from lab.reports import ReportDir, to_jsonable
    from lab.typed import to_json

    handed = []
    real = ReportDir.write_report
    monkeypatch.setattr(ReportDir, "write_report", lambda rd, data: handed.append(to_jsonable(data)) or real(rd, data))
    i = TINY_ARGS.index("--prompt-tokens")  # the acceptance runs' records are kept as they are (dict[str, Any])
    args = TINY_ARGS[:i] + ["--no-acceptance"]
    assert main(["stream", "--text-file", str(text_file), *args, "--tokens", "170", "--out", str(tmp_path / "r")]) == 0
    (data,) = handed
    assert data["recompute_check"] and data["tests"] and "window_excess_recovered" in data["policies"][2]
    written = {k: v for k, v in data.items() if k != "kind"}
    assert json.dumps(to_json(STREAM.read(data))) == json.dumps(written)
