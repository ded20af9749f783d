"""Unit tests for the speculate/bench commands' validation and the bench pipeline on a tiny model."""

from __future__ import annotations

import pytest
import torch

from lab.cli import main
from lab.machine import LoadLog


@pytest.mark.parametrize("argv,needle", [
    (["speculate", "hi", "--gamma", "0"], "--gamma=0"),
    (["speculate", "hi", "--adaptive", "foo:1"], "--adaptive='foo:1'"),
    (["speculate", "hi", "--temperature", "-1"], "--temperature=-1"),
    (["speculate", "hi", "--top-p", "0"], "--top-p=0"),
    (["speculate", "hi", "--model", "no-such-model"], "no-such-model"),
    (["bench", "--gammas", "0,2"], "--gammas"),
    (["bench", "--gammas", "a"], "--gammas"),
    (["bench", "--repeats", "0"], "--repeats=0"),
    (["bench", "--prompts", "@/no/such/file"], "--prompts '@/no/such/file': no such file"),
])
def test_cli_bad_input_exits_2_without_report(tmp_path, capsys, argv, needle):
    rc = main([*argv, "--out", str(tmp_path)])
    assert rc == 2
    assert needle in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_bench_pipeline_on_tiny_model_summarizes_and_renders(tmp_path):
    from lab.reports import report_dir
    from lab.render.bench import bench_summary_markdown, plot_bench, render_bench
    from lab.render.console import stdout_console
    from lab.speculative.draft_specs import make_draft
    from lab.bench.run import BenchConfig, run_bench
    from tests.support import tiny_llama_untied

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target = tiny_llama_untied()
        prompts = [torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(i)) for i in range(2)]
        load_log = LoadLog(threads=1)
        bench = run_bench(target, make_draft(target, "early-exit:2"), prompts,
                          BenchConfig(gammas=(1, 3), adaptive=("pmin:0.5",), max_new_tokens=8,
                                      repeats=2, warmup_tokens=2), load_log=load_log)
    finally:
        torch.set_num_threads(before)
    data = bench.to_json()  # what report.json holds
    methods = data["methods"]
    assert {"target-only (lab loop)", "target-only (transformers generate)", "speculative gamma=1",
            "transformers assisted gamma=3", "speculative gamma=3 adaptive=pmin:0.5"} <= set(methods)
    assert all(m["same_tokens_as_lab_target_loop"] for m in methods.values())
    spec = methods["speculative gamma=3"]
    assert spec["n_rounds"] > 0 and spec["n_drafted_tested"] > 0 and spec["efficiency"] > 0
    assert spec["alpha"] == pytest.approx(spec["n_accepted"] / spec["n_drafted_tested"], rel=1e-12)  # pooled counts
    assert sum(spec["accepted_length_histogram"]) <= spec["n_rounds"]
    assert any("assisted" in c["against"] for c in data["comparisons"])
    assert len(data["runs"]) == 2 * 2 * len(methods)
    load = data["machine_load"]  # a sample before and after every timed run, per method
    assert len(load["samples"]) == 2 * len(data["runs"]) and set(load["per_method"]) == set(methods)
    assert all(s["torch_threads"] == 1 for s in load["samples"]) and load["threads"] == 1
    with report_dir(tmp_path, "bench", "tiny") as rd:
        rd.write_json("report.json", data)
        plot_bench(bench, rd.file("bench.png"))
        rd.write_text("summary.md", bench_summary_markdown(bench, {"model": "tiny"}))
    assert (rd.final / "bench.png").read_bytes()[:4] == b"\x89PNG"
    model_line = next(l for l in (rd.final / "summary.md").read_text().splitlines() if l.startswith("- model:"))
    assert "weights" not in model_line  # float weights: no note
    assert "(cpu, float32, weights q4)" in bench_summary_markdown(
        bench, {"model": "tiny", "device": "cpu", "dtype": "float32", "weights": "q4"})
    render_bench(bench, stdout_console())


@pytest.mark.parametrize("spec, match", [
    ("early-exit:99", r"N must be in \[1, 29\]"),
    ("early-exit:abc", "integer N"),
    ("early-exit:0", "N >= 1"),
    ("", "empty"),
    ("nonexistent", "draft='nonexistent' is not auto, auto:M, early-exit:N, prompt-lookup or a model"),
])
def test_check_draft_spec_bad_spec_raises_naming_draft(spec, match):
    """Regression (bad input): draft specs were checked only after the target had loaded."""
    from lab.speculative.draft_specs import check_draft_spec

    with pytest.raises(ValueError, match=match):
        check_draft_spec(spec, 30)


def test_check_draft_spec_kinds():
    from lab.speculative.draft_specs import check_draft_spec

    assert check_draft_spec("early-exit:12", 30) == "early-exit"
    assert check_draft_spec("prompt-lookup") == "prompt-lookup"
    assert check_draft_spec("Qwen/Qwen2.5-0.5B-Instruct") == "model"
