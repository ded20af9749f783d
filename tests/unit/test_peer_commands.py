"""llama.cpp peer: command lines from a bench configuration, binary lookup, CLI checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli import main
from lab.runtime.build import TARGETS
from lab.bench.peer.llamacpp import (PeerRunConfig, PeerUnavailableError, bench_command, completion_command, locate,
                               speculative_command)
from tests.support import fake_llamacpp_bins


def _flag(cmd: list[str], flag: str) -> str:
    assert cmd.count(flag) == 1, f"{flag} appears {cmd.count(flag)} times in {cmd}"
    return cmd[cmd.index(flag) + 1]


def test_commands_mirror_bench_config(tmp_path):
    bins = locate(fake_llamacpp_bins(tmp_path / "bin"))
    cfg = PeerRunConfig(threads=2, gamma=5, max_new_tokens=16, ctx_size=512)
    target, draft, prompt = Path("/m/t.gguf"), Path("/m/d.gguf"), Path("/p/prompt-0.txt")
    spec = speculative_command(bins, target, draft, prompt, cfg)
    alone = completion_command(bins, target, prompt, cfg)
    assert spec[0] == str(tmp_path / "bin" / "llama-speculative-simple")
    assert alone[0] == str(tmp_path / "bin" / "llama-completion")
    for cmd in (spec, alone):  # same model, prompt, threads, greedy sampler, context
        assert (_flag(cmd, "-m"), _flag(cmd, "-f"), _flag(cmd, "-c")) == (str(target), str(prompt), "512")
        assert (_flag(cmd, "-t"), _flag(cmd, "-tb"), _flag(cmd, "--temp"), _flag(cmd, "--top-k")) == ("2", "2", "0", "1")
        # llama.cpp would turn a prompt's two characters \n into a newline: the prompt must reach it as the lab's
        assert "--no-escape" in cmd
    # speculative-simple emits one token more than its -n; completion exactly -n
    assert (_flag(spec, "-n"), _flag(alone, "-n")) == ("15", "16")
    assert (_flag(spec, "-md"), _flag(spec, "--spec-type"), _flag(spec, "--spec-draft-n-max")) == (
        str(draft), "draft-simple", "5")
    assert (_flag(spec, "--spec-draft-n-min"), _flag(spec, "--spec-draft-p-min")) == ("0", "0")  # fixed gamma
    assert "-no-cnv" in alone and "--no-display-prompt" in alone and "-md" not in alone
    bench = bench_command(bins, target, cfg, repeats=3)
    assert (_flag(bench, "-p"), _flag(bench, "-n"), _flag(bench, "-r"), _flag(bench, "-o")) == ("6", "16", "3", "json")


@pytest.mark.parametrize("field,value", [("threads", 0), ("gamma", 0), ("max_new_tokens", 1), ("ctx_size", 0)])
def test_peer_run_config_rejects_bad_values_naming_them(field, value):
    kwargs = dict(threads=1, gamma=1, max_new_tokens=4)
    with pytest.raises(ValueError, match=field):
        PeerRunConfig(**{**kwargs, field: value})


def test_locate_accepts_bin_dir_its_parent_or_build_tree(tmp_path):
    fake_llamacpp_bins(tmp_path / "a" / "bin")
    fake_llamacpp_bins(tmp_path / "b" / "build" / "bin")
    assert locate(tmp_path / "a").bin_dir == tmp_path / "a" / "bin"
    assert locate(tmp_path / "a" / "bin").source == "--llama-cpp"
    assert locate(tmp_path / "b").bin_dir == tmp_path / "b" / "build" / "bin"


def test_locate_missing_binary_names_it_make_peer_and_flag(tmp_path, monkeypatch):
    fake_llamacpp_bins(tmp_path / "bin", names=TARGETS[1:])  # no llama-speculative-simple
    with pytest.raises(PeerUnavailableError) as exc:
        locate(tmp_path / "bin")
    assert "llama-speculative-simple" in str(exc.value) and "make peer" in str(exc.value)
    assert "--llama-cpp" in str(exc.value)
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "empty-cache"))
    with pytest.raises(PeerUnavailableError, match="make peer"):
        locate(None)


def test_cli_peer_missing_binary_exits_2_before_loading(tmp_path, capsys, monkeypatch):
    """Fault class: a missing binary found only after minutes of model loading."""
    import lab.models.loading

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the peer check")

    monkeypatch.setattr(lab.models.loading, "load_model", no_load)
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "empty-cache"))
    rc = main(["bench", "--model", "smollm2", "--draft", "early-exit:4", "--peer", "llama.cpp",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "make peer" in err and "--llama-cpp" in err
    rc = main(["bench", "--model", "smollm2", "--draft", "early-exit:4", "--peer", "llama.cpp",
               "--llama-cpp", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and f"--llama-cpp {tmp_path / 'nowhere'}" in err and "make peer" in err
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_cli_llama_cpp_without_peer_exits_2(tmp_path, capsys):
    rc = main(["bench", "--llama-cpp", str(tmp_path), "--out", str(tmp_path / "out")])
    assert rc == 2 and "--llama-cpp" in capsys.readouterr().err


def test_cli_peer_on_a_model_without_gguf_exits_2(tmp_path, capsys):
    rc = main(["bench", "--model", "smollm2", "--draft", "early-exit:4", "--peer", "llama.cpp",
               "--llama-cpp", str(fake_llamacpp_bins(tmp_path / "bin")), "--out", str(tmp_path / "out")])
    assert rc == 2 and "--draft 'early-exit:4'" in capsys.readouterr().err
