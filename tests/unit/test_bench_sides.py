"""``lab bench --also-runtime``: another runtime's (or weights') methods in the same alternating schedule, summarized apart.

Fault class: a side's runs mixed into the main summary (its target alone taken as the main baseline), a side
summarized against the main target, a side run outside the alternation (all its runs after the main ones), and
the side flags accepting what they cannot run (the main set-up again, a spec given twice, llama.cpp with an
early-exit draft).
"""

from __future__ import annotations

import pytest
import torch

from lab.bench.run import BenchConfig, BenchSide, run_bench
from lab.speculative.draft_specs import make_draft
from tests.provenance import environment_json, model_json
from tests.support import cli_exit, tiny_llama_untied

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def targets(one_torch_thread):
    return tiny_llama_untied(num_layers=4, seed=0), tiny_llama_untied(num_layers=4, seed=1)


def test_side_runs_alternate_with_the_main_and_are_summarized_apart(targets):
    main, other = targets
    config = BenchConfig(gammas=(2,), adaptive=(), max_new_tokens=5, repeats=2, warmup_tokens=2, assisted=False)
    prompts = [torch.randint(3, 64, (1, 6), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    order = []
    bench = run_bench(main, make_draft(main, "early-exit:2"), prompts, config,
                      sides=[BenchSide("other", other, make_draft(other, "early-exit:2"))],
                      progress=lambda msg: order.append(msg.split(": ", 1)[1]))
    # the main methods keep their names and runs; the side's are apart, under its label
    assert all(not name.startswith("other") for name in bench.methods)
    assert {r.method for r in bench.runs} == set(bench.methods)
    side = bench.sides["other"]
    assert set(side.methods) == set(bench.methods) - {"transformers assisted gamma=2"}
    assert len(side.runs) == len(bench.runs) == 2 * 2 * len(side.methods)
    # the side's speedups are against its own target alone: its baseline row is there, with speedup 1
    assert "target-only (lab loop)" in side.methods
    # alternating: within every (repeat, prompt), the main methods then the side's, not all side runs at the end
    per_cell = len(bench.methods) + len(side.methods)
    assert len(order) == 2 * 2 * per_cell
    for cell in range(4):
        names = order[cell * per_cell:(cell + 1) * per_cell]
        assert sum(n.startswith("other: ") for n in names) == len(side.methods)
    assert "sides" in bench.as_dict() and "other" in bench.as_dict()["sides"]


def test_no_side_leaves_the_report_without_the_key(targets):
    main, _ = targets
    config = BenchConfig(gammas=(2,), adaptive=(), max_new_tokens=3, repeats=1, warmup_tokens=2, assisted=False)
    bench = run_bench(main, make_draft(main, "early-exit:2"), [torch.tensor([[5, 6, 7]])], config)
    assert bench.sides == {} and "sides" not in bench.as_dict()


def test_bench_report_with_a_side_is_written_key_for_key_as_built(targets, tmp_path):
    """A whole bench report (a side, speculative and plain methods, by_group, runs), as lab bench builds it, is
    written through its typed report (lab.kinds.bench.Report) key for key in the same order: the type changes no
    byte of report.json."""
    import json

    from lab.bench.prompt_split import PromptSet
    from lab.bench.results import BenchReport
    from lab.kinds.bench import KIND as BENCH
    from lab.reports import report_dir

    main, other = targets
    config = BenchConfig(gammas=(2,), adaptive=("entropy:0.3",), max_new_tokens=3, repeats=1, warmup_tokens=2,
                         assisted=False)
    bench = run_bench(main, make_draft(main, "early-exit:2"), [torch.tensor([[5, 6, 7]])], config,
                      sides=[BenchSide("other", other, make_draft(other, "early-exit:2"))])
    report = BenchReport(model=model_json(model="tiny"), draft_spec="early-exit:2",
                         prompts=PromptSet.of(["p"], "none", "none"), torch_threads=1, environment=environment_json(),
                         draft_cost=None, bench=bench, side_models={"other": model_json(model="tiny")})
    data = report.to_json()
    with report_dir(tmp_path, BENCH, "x") as rd:
        rd.write_report(data)
    text = (rd.final / "report.json").read_text(encoding="utf-8")
    assert json.loads(text) == {"kind": "bench", "format": 1, **{k: v for k, v in data.items() if k != "kind"}}
    assert list(json.loads(text)) == ["kind", "format", *[k for k in data if k != "kind"]]
    assert json.dumps(json.loads(text)) == json.dumps({"kind": "bench", "format": 1, **data})
    typed = BENCH.read(json.loads(text))
    assert set(typed.sides) == {"other"} and typed.methods.keys() == data["methods"].keys()


@pytest.mark.parametrize("argv, says", [
    (["--also-runtime", "torch:float32"], "already in the schedule (the main set-up)"),
    (["--also-runtime", "torch:q4", "--also-runtime", "torch:q4"], "given twice"),
    (["--also-runtime", "tensorrt"], "is not one of"),
    (["--also-runtime", "llama.cpp", "--draft", "early-exit:20"], "torch layers"),
    (["--also-runtime", "llama.cpp", "--tune"], "a command of its own now: lab bench-tune"),
    (["--tune-runtime", "--also-runtime", "llama.cpp"], "a command of its own now: lab bench-tune-runtime"),
    (["--tune=3"], "a command of its own now: lab bench-tune"),
])
def test_cli_also_runtime_refuses_what_it_cannot_run_in_one_line(tmp_path, capsys, no_model_loading, argv, says):
    rc = cli_exit(["bench", "--model", "smollm2", *argv, "--out", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "reports").exists()
