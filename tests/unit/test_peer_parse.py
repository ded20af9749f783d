"""The llama.cpp output parsers on recorded outputs of the pinned version, and the peer's
place in ``lab bench``'s schedule with those outputs replayed (no binary needed).

The recordings in ``tests/unit/data/llamacpp/`` are real stdout/stderr of llama-completion,
llama-speculative-simple (gamma 5), llama-bench (-o json) and --version, built by
``make peer`` (llama.cpp 0c1e57098), on the Qwen2.5-Coder 1.5B + 0.5B GGUF pair, 16
greedy tokens, 2 threads; ``README.md`` there gives the commands.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lab.bench.peer.llamacpp import PeerOutputError
from lab.bench.peer.parse import parse_bench_json, parse_completion, parse_speculative, parse_version

DATA = Path(__file__).parent / "data" / "llamacpp"
N_TOKENS = 16  # the recordings' budget


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def recorded():
    return {name: _read(name) for name in ("prompt.txt", "completion.stdout", "completion.stderr",
                                           "speculative.stdout", "speculative.stderr", "bench-target.json",
                                           "bench-draft.json", "version.stderr")}


def test_parse_recorded_completion(recorded):
    out = parse_completion(recorded["completion.stdout"], recorded["completion.stderr"])
    assert out.n_generated == N_TOKENS and out.text.strip()
    p = out.perf
    assert p.n_eval == N_TOKENS - 1  # the first token comes from the prompt's logits
    assert p.prompt_eval_ms > 0 and p.eval_ms > 0 and p.total_ms >= p.prompt_eval_ms + p.eval_ms
    # the unaccounted line is total - sampling - prompt eval - eval, in ms and percent
    assert p.unaccounted_ms == pytest.approx(p.total_ms - p.sampling_ms - p.prompt_eval_ms - p.eval_ms, abs=0.02)
    assert p.unaccounted_pct == pytest.approx(100 * p.unaccounted_ms / p.total_ms, abs=0.06)


def test_parse_recorded_speculative_equals_its_target_alone(recorded):
    spec = parse_speculative(recorded["speculative.stdout"], recorded["speculative.stderr"], recorded["prompt.txt"])
    alone = parse_completion(recorded["completion.stdout"], recorded["completion.stderr"])
    # -n 15: it stops at the first round past 15, so 16 to 21 tokens; the target alone emits 16
    assert N_TOKENS <= spec.n_predict <= N_TOKENS + spec.gamma and spec.gamma == 5
    assert 0 < spec.n_accepted <= spec.n_drafted and spec.alpha == spec.n_accepted / spec.n_drafted
    assert spec.n_prompt == alone.n_prompt  # both tokenized the same templated text
    assert spec.encode_s > 0 and spec.decode_s > 0
    assert spec.text.startswith(alone.text)  # greedy: the longer run continues the shorter
    assert (len(spec.text) > len(alone.text)) == (spec.n_predict > N_TOKENS)


def test_parse_recorded_bench_and_version(recorded):
    for name in ("bench-target.json", "bench-draft.json"):
        rows = parse_bench_json(recorded[name])
        assert {(r.n_prompt > 0, r.n_gen > 0) for r in rows} == {(True, False), (False, True)}
        assert all(r.avg_ts > 0 and r.n_threads == 2 and r.build_commit.startswith("0c1e570") for r in rows)
    version = parse_version(recorded["version.stderr"])
    assert version["commit"].startswith("0c1e570") and version["build_number"] == "0"
    with pytest.raises(PeerOutputError, match="no 'version' field"):
        parse_version(recorded["version.stderr"].replace("version:", "v:"))


PERF_LINES = {  # field named in the error -> the recorded line that carries it
    "sampling time": r"sampling time =", "samplers time": r"samplers time =",
    "prompt eval time": r"prompt eval time =", "eval time": r":\s+eval time =", "total time": r"total time =",
    "unaccounted time": r"unaccounted time =",
}
SPEC_LINES = {"encoded": r"\bencoded ", "decoded": r"\bdecoded ", "n_draft": r"n_draft\s+=",
              "n_drafted": r"n_drafted\s+=", "n_accept": r"n_accept\s+="}


def _drop(text: str, pattern: str) -> str:
    kept = [line for line in text.splitlines(keepends=True) if not re.search(pattern, line)]
    assert len(kept) < len(text.splitlines()), f"the recording has no line matching {pattern!r}"
    return "".join(kept)


@pytest.mark.parametrize("field", list(PERF_LINES))
def test_completion_missing_field_raises_naming_it(recorded, field):
    stderr = _drop(recorded["completion.stderr"], PERF_LINES[field])
    with pytest.raises(PeerOutputError, match=f"no '{field}' field"):
        parse_completion(recorded["completion.stdout"], stderr)


@pytest.mark.parametrize("field", list(SPEC_LINES) + ["unaccounted time"])
def test_speculative_missing_field_raises_naming_it(recorded, field):
    stderr = _drop(recorded["speculative.stderr"], {**SPEC_LINES, **PERF_LINES}[field])
    with pytest.raises(PeerOutputError, match=f"no '{field}' field"):
        parse_speculative(recorded["speculative.stdout"], stderr, recorded["prompt.txt"])


def test_speculative_moved_text_raises(recorded):
    with pytest.raises(PeerOutputError, match="echoed prompt"):
        parse_speculative(recorded["speculative.stdout"], recorded["speculative.stderr"], "another prompt")
    with pytest.raises(PeerOutputError, match="does not end with"):
        parse_speculative(recorded["speculative.stdout"].rstrip("\n"), recorded["speculative.stderr"],
                          recorded["prompt.txt"])


def test_bench_missing_field_raises_naming_it(recorded):
    mutated = recorded["bench-target.json"].replace('"avg_ts"', '"mean_ts"')
    with pytest.raises(PeerOutputError, match="'avg_ts'"):
        parse_bench_json(mutated)
    with pytest.raises(PeerOutputError, match="no JSON"):
        parse_bench_json("| model | size |")


class _Replay:
    """A runner that answers every llama.cpp command with the recorded output of its binary."""

    def __init__(self, recorded):
        self.recorded, self.calls = recorded, []

    def __call__(self, cmd, timeout=None):
        self.calls.append(cmd)
        name, r = Path(cmd[0]).name, self.recorded
        if "--version" in cmd:
            return "", r["version.stderr"]
        if name == "llama-completion":
            return r["completion.stdout"], r["completion.stderr"]
        if name == "llama-speculative-simple":
            return r["speculative.stdout"], r["speculative.stderr"]
        model = cmd[cmd.index("-m") + 1]
        return r["bench-draft.json" if "draft" in model else "bench-target.json"], ""


def test_peer_runs_inside_bench_schedule_and_reports_both_runtimes(recorded, tmp_path):
    from lab.bench.peer.bench import LlamaCppPeer, TARGET_METHOD
    from lab.bench.peer.llamacpp import locate
    from lab.bench.peer.report import peer_summary_markdown
    from lab.speculative.draft_specs import make_draft
    from lab.bench.run import BenchConfig, run_bench
    from tests.support import tiny_llama_untied
    from tests.support import fake_llamacpp_bins

    target = tiny_llama_untied()
    prompts = [torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    replay = _Replay(recorded)
    peer = LlamaCppPeer(locate(fake_llamacpp_bins(tmp_path / "bin")), Path("/m/target.gguf"), Path("/m/draft.gguf"),
                        {tuple(p[0].tolist()): recorded["prompt.txt"] for p in prompts}, threads=2, gammas=(5,),
                        runner=replay)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bench = run_bench(target, make_draft(target, "early-exit:2"), prompts,
                          BenchConfig(gammas=(5,), adaptive=(), max_new_tokens=8, repeats=2,
                                      warmup_tokens=2, assisted=False), peer=peer).to_json()
    finally:
        torch.set_num_threads(before)
        peer.close()
    assert not any(name.startswith("llama.cpp") for name in bench["methods"])  # the lab's summary is untouched
    cpp = bench["peer"]["methods"]
    assert set(cpp) == {TARGET_METHOD, "llama.cpp speculative gamma=5"}
    assert cpp[TARGET_METHOD]["n_runs"] == 2 * 2  # repeats x prompts, in the same loop
    spec, alone = (parse_speculative(recorded["speculative.stdout"], recorded["speculative.stderr"],
                                     recorded["prompt.txt"]),
                   parse_completion(recorded["completion.stdout"], recorded["completion.stderr"]))
    expected = (spec.n_predict / spec.decode_s) / (alone.n_generated / alone.decode_s)
    s = cpp["llama.cpp speculative gamma=5"]
    assert s["speedup_decode"] == pytest.approx(expected)
    assert s["alpha"] == pytest.approx(spec.alpha) and s["same_text_as_own_target_only"] is True
    cal = bench["peer"]["calibration"]
    assert 0 < cal["cost_ratio_time"] < 1 and s["verify_over_target_step"] > 1
    assert bench["peer"]["version"]["commit"].startswith("0c1e570")
    commands = bench["peer"]["commands"]
    assert "--spec-type draft-simple" in commands["llama.cpp speculative gamma=5"]
    assert "-f PROMPT_FILE" in commands[TARGET_METHOD] and "-n 8" in commands[TARGET_METHOD]
    row = bench["peer"]["side_by_side"][0]
    assert row["gamma"] == 5 and row["lab"]["alpha"] == bench["methods"]["speculative gamma=5"]["alpha"]
    text = peer_summary_markdown(bench["peer"])
    assert "llama.cpp speculative gamma=5" in text and "0c1e570" in text and "--spec-type draft-simple" in text
