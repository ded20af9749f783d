"""`lab stream` on the embedded model: the masked pass equals token-by-token eviction, and a reduced run."""

from __future__ import annotations

import json

import pytest
import torch

from lab.stream.experiment import default_text
from lab.stream.perplexity import masked_nll
from lab.stream.policies import parse_policy
from tests.support import streaming_nll

# SmolLM2's 30 float32 layers: one masked pass over S keys vs S single-token passes
# over a rebuilt cache sum in different orders; differences measured ~1e-5 nats.
# 1e-3 is far below what one wrongly visible key changes (> 1e-2 nats).
REAL_NLL_ATOL = 1e-3


@pytest.mark.parametrize("spec", ["dense", "window:8", "sinks:2+8", "detected:2+8"])
def test_masked_nll_equals_token_by_token_eviction_on_smollm2(smollm2, spec):
    model, tok = smollm2
    ids = tok(default_text()[0], return_tensors="pt")["input_ids"][:, :40]
    detected = (0, 13, 1)
    got = masked_nll(model, ids, parse_policy(spec), detected)
    want = streaming_nll(model, ids, parse_policy(spec), detected)
    torch.testing.assert_close(got, want, atol=REAL_NLL_ATOL, rtol=0)


def test_cli_stream_reduced_run_on_smollm2_writes_report(lab_log, capsys):
    argv = ["stream", "--tokens", "1024", "--chunk-tokens", "64", "--recompute-every", "32", "--prompt-tokens", "512",
            "--max-new-tokens", "12", "--device", "cpu"]
    rc, rd = lab_log.cli(argv)
    assert rc == 0 and rd is not None and rd.name.endswith("-stream-pydoc-topics")
    report = json.loads((rd / "report.json").read_text())
    ppl = {p["policy"]: p for p in report["policies"]}
    assert set(ppl) == {"dense", "window:252", "sinks:1+252", "sinks:4+252", "detected:4+252", "recompute:256"}
    assert report["text"]["n_tokens"] == 1024
    # StreamingLLM's shape, computed here: losing the first tokens costs more than keeping 4 of them
    lab_log.record(**{f"ppl {name}": round(p["ppl"], 3) for name, p in ppl.items() if p.get("ppl") is not None})
    assert ppl["window:252"]["ppl"] > ppl["sinks:4+252"]["ppl"]
    assert 0 in report["detection"]["flagged"]  # position 0 is the text's sink, as on every chat prompt
    greedy = [a["tokens"] for a in report["acceptance"] if a["mode"] == "greedy"]
    assert len(greedy) == 5 and all(g == greedy[0] for g in greedy)
    bench = report["benchmark"]
    assert bench["before"]["torch_threads"] >= 1 and len(bench["before"]["load_average"]) == 3
    assert "Pre-stated test" in (rd / "summary.md").read_text()
    assert "report:" in capsys.readouterr().out
