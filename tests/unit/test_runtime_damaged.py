"""A damaged llama.cpp runtime build reads as one line, "does not load ...: run `make peer` again".

The install is a fake in a temporary ``$LAB_CACHE_DIR``: a binding package whose ``llama_cpp.py``
is cut (``SyntaxError``) or raises what the real binding raises on a shared library overwritten
with garbage (``RuntimeError``), and a manifest nested too deep to parse (``RecursionError``).
The real build is never touched.
"""

from __future__ import annotations

import sys

import pytest

import lab.runtime.build as peer_build
import lab.runtime.ggml as ggml
from lab import cli
from lab.runtime.ggml import RuntimeUnavailableError

pytestmark = pytest.mark.unit

# What llama-cpp-python 0.3.36's _ctypes_extensions raises on a library that is not an ELF file.
GARBAGE_LIBRARY = ("raise RuntimeError(\"Failed to load shared library 'lib/libllama.so': "
                   "lib/libllama.so: invalid ELF header\")\n")
CUT_BINDING = "def llama_backend_init(\n"
MAPPING_FAILED = "raise OSError('libllama.so: failed to map segment from shared object')\n"


@pytest.fixture
def install(tmp_path, monkeypatch):
    """A fake complete install under a temporary ``$LAB_CACHE_DIR``; returns its binding's folder."""
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ggml, "_BINDING", None)
    monkeypatch.setattr(peer_build, "installed", lambda install_dir: {"layout": peer_build.LAYOUT})
    package = ggml.binding_dir() / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package.parent.parent / peer_build.MANIFEST).write_text("{}")
    yield package
    for name in [n for n in sys.modules if n == "llama_cpp" or n.startswith("llama_cpp.")]:
        del sys.modules[name]


@pytest.mark.parametrize("damage, cause", [(CUT_BINDING, "SyntaxError"), (GARBAGE_LIBRARY, "RuntimeError")])
def test_binding_damaged_install_does_not_load_run_make_peer_again(install, damage, cause):
    """Fault class: a cut binding or a library overwritten with garbage ended as an unforeseen
    SyntaxError/RuntimeError (exit 1 and a traceback file) instead of saying to build again."""
    (install / "llama_cpp.py").write_text(damage)
    with pytest.raises(RuntimeUnavailableError) as info:
        ggml.binding()
    message = str(info.value)
    assert message.startswith(f"the llama.cpp runtime in {install.parent} does not load ({cause}: ")
    assert message.endswith("run `make peer` again (it checks the install and builds it anew)") and "\n" not in message
    assert "llama_cpp" not in sys.modules  # a later try imports afresh


def test_binding_library_that_cannot_be_mapped_is_out_of_memory_not_damage(install):
    (install / "llama_cpp.py").write_text(MAPPING_FAILED)
    with pytest.raises(MemoryError, match="failed to map segment"):
        ggml.binding()


def test_binding_deeply_nested_manifest_does_not_load_run_make_peer_again(tmp_path, monkeypatch):
    """Fault class: a manifest nested 100,000 deep raised RecursionError (unforeseen, exit 1)."""
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ggml, "_BINDING", None)
    install_dir = ggml.binding_dir().parent
    install_dir.mkdir(parents=True)
    (install_dir / peer_build.MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RuntimeUnavailableError, match=r"does not load \(its manifest lab-peer.json does not parse"):
        ggml.binding()


def test_cli_speculate_on_a_damaged_runtime_exits_2_in_one_line(install, tmp_path, capsys, no_model_loading):
    (install / "llama_cpp.py").write_text(GARBAGE_LIBRARY)
    rc = cli.main(["speculate", "hello", "--runtime", "llama.cpp", "--draft", "prompt-lookup", "--model", "smollm2",
                   "--out", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("lab speculate: error: the llama.cpp runtime in ") and "run `make peer` again" in err


@pytest.mark.parametrize("limit, raised", [(1 << 30, MemoryError), (None, ValueError)])
def test_ggml_load_failure_under_an_address_space_limit_is_out_of_memory(monkeypatch, limit, raised):
    """Fault class: under ``ulimit -v`` llama.cpp's failed load read as a bad file (exit 2), not memory."""
    import lab.machine

    monkeypatch.setattr(lab.machine, "address_space_limit", lambda: limit)
    assert type(ggml._load_failed("llama.cpp could not load m.gguf")) is raised
