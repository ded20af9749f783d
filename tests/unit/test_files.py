"""The one bounded reader (:mod:`lab.files`) and every command flag that names a file read through it.

A FIFO, an endless device, a file past its bound, a folder or a missing file in an input's place is refused at
once, in one line naming the flag, the file and why, exit 2, before any model loads: never waited on, never read
to its end. Each refusal runs under an alarm, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab import files
from lab.files import MAX_TEXT_BYTES, FileRefused, read_bounded, read_text
from tests import support

# A refusal reads nothing and takes milliseconds; a second is far past it, and far short of a hang.
REFUSAL_SECONDS = 1.0
# The alarm that turns a hang into a failure: a command's first run imports torch and its renderers
# (seconds on a loaded 2-core machine) before it reads the file.
HANG_GUARD_SECONDS = 30


class Blocked(Exception):
    """Raised by the alarm: not an OSError, which the code under test may catch."""


@contextmanager
def hang_guard(seconds: int = HANG_GUARD_SECONDS):
    def give_up(signum, frame):
        raise Blocked(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _refusal(path: str | Path, limit: int = 64, **kw) -> tuple[str, float]:
    start = time.monotonic()
    with hang_guard(), pytest.raises(FileRefused) as info:
        read_bounded(path, limit, **kw)
    return info.value.problem, time.monotonic() - start


# --- the reader ---------------------------------------------------------------------------------------------------

def test_read_bounded_fifo_refused_at_once(tmp_path):
    """Fault class: a read that blocks on a FIFO (its open waits for a writer, its read for the writer's end)."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    problem, seconds = _refusal(fifo)
    assert problem == "not a regular file (a FIFO)" and seconds < REFUSAL_SECONDS


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_read_bounded_endless_device_refused_unread(device):
    """Fault class: an unbounded read (a device that never ends, read into memory until the process dies)."""
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this machine")
    problem, seconds = _refusal(device)
    assert problem == "not a regular file (a character device)" and seconds < REFUSAL_SECONDS


def test_read_bounded_file_past_its_bound_refused(tmp_path):
    """Fault class: an unbounded read (a file of any size read whole)."""
    path = tmp_path / "f.txt"
    path.write_bytes(b"x" * 65)
    assert _refusal(path, limit=64)[0] == "larger than 64 bytes"
    assert read_bounded(path, 65) == b"x" * 65


def test_read_bounded_file_longer_than_it_says_reads_at_most_bound_plus_one(monkeypatch):
    """Fault class: an unbounded read (a file whose stated size is 0 and that holds more: /proc's files, or a file
    that grows while it is read); at most ``limit + 1`` bytes are asked for, whatever the file holds."""
    path = Path("/proc/self/maps")  # a regular file of st_size 0 holding kilobytes
    if not path.is_file():
        pytest.skip("no /proc on this machine")
    asked: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(files.os, "read", counting_read)
    assert _refusal(path, limit=16)[0] == "larger than 16 bytes"
    assert sum(asked) <= 17, asked


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such file"),
    ("missing folder", "no such file"),
    ("directory", "not a regular file (a directory)"),
    ("dangling link", "a symbolic link to nothing, not a regular file"),
    ("socket", "not a regular file (a socket)"),
])
def test_read_bounded_reason_matches_the_case(tmp_path, case, expected):
    """Fault class: a wrong reason (a missing file called "not a regular file", a folder called unreadable)."""
    path = tmp_path / "f"
    if case == "missing folder":
        path = tmp_path / "no" / "f"
    elif case == "directory":
        path.mkdir()
    elif case == "dangling link":
        path.symlink_to(tmp_path / "nowhere")
    elif case == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    assert _refusal(path)[0] == expected


def test_read_bounded_link_refused_itself_when_links_are_not_followed(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert read_bounded(tmp_path / "link.json", 64) == b"{}"
    assert _refusal(tmp_path / "link.json", follow_links=False)[0] == "not a regular file (a symbolic link)"


def test_read_bounded_head_returns_the_first_bytes_of_a_longer_file(tmp_path):
    path = tmp_path / "page.html"
    path.write_bytes(b"0123456789")
    assert read_bounded(path, 4, head=True) == b"0123"


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, None])
def test_read_bounded_limit_not_a_positive_integer_raises(tmp_path, limit):
    with pytest.raises(ValueError, match="limit="):
        read_bounded(tmp_path, limit)


def test_read_text_names_the_input_and_the_bad_line(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(ValueError, match=r"^--prompt-file x:2: not valid UTF-8 \(invalid start byte at byte 3\)$"):
        read_text(path, 64, "--prompt-file x")
    with pytest.raises(ValueError, match=r"^--prompt-file x: no such file$"):
        read_text(tmp_path / "absent", 64, "--prompt-file x")


# --- every flag that names a file ---------------------------------------------------------------------------------

MODEL = ["--model", "smollm2", "--device", "cpu"]
# (command line with FILE where the file goes, how the refusal names it)
FLAGS = [
    (["entropy", "q", "--context-file", "FILE", *MODEL], "--context-file FILE"),
    (["sinks", "q", "--context-file", "FILE", *MODEL], "--context-file FILE"),
    (["sinks", "--prompt-file", "FILE", *MODEL], "--prompt-file FILE"),
    (["stream", "--text-file", "FILE", *MODEL], "--text-file FILE"),
    (["validate-context", "--pairs", "FILE", *MODEL], "--pairs FILE"),
    (["study", "--prompts", "FILE", *MODEL], "--prompts='FILE'"),
    (["calibrate-sinks", "--prompts", "FILE", *MODEL], "--prompts='FILE'"),
    (["calibrate-sinks", "--held-out", "FILE", *MODEL], "--held-out='FILE'"),
    (["calibrate-health", "--validate", "FILE", *MODEL], "--validate='FILE'"),
    (["intervene", "--triples", "FILE", *MODEL], "--triples='FILE'"),
    (["bench", "--prompts", "@FILE", *MODEL], "--prompts '@FILE'"),
]
FLAG_IDS = ["entropy-context-file", "sinks-context-file", "sinks-prompt-file", "stream-text-file", "pairs",
            "study-prompts", "calibrate-sinks-prompts", "held-out", "validate", "triples", "bench-prompts"]


def _refused_line(argv: list[str], path: Path | str, tmp_path: Path, capsys) -> str:
    """The one line ``lab ARGV`` (FILE = ``path``) exits 2 with, under the hang guard."""
    argv = [a.replace("FILE", str(path)) for a in argv] + ["--out", str(tmp_path / "r")]
    with hang_guard():
        rc = support.cli_exit(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, (rc, lines)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    return lines[0]


@pytest.mark.parametrize("argv, named", FLAGS, ids=FLAG_IDS)
def test_cli_input_file_fifo_refused_in_one_line(argv, named, tmp_path, capsys, no_model_loading):
    """Fault class: a read that blocks on a FIFO (--context-file, --prompt-file and --text-file waited for a writer
    until killed)."""
    fifo = tmp_path / "in.txt"
    os.mkfifo(fifo)
    line = _refused_line(argv, fifo, tmp_path, capsys)
    assert f"{named.replace('FILE', str(fifo))}: not a regular file (a FIFO)" in line, line


@pytest.mark.parametrize("argv, named", FLAGS, ids=FLAG_IDS)
def test_cli_input_file_endless_device_refused_in_one_line(argv, named, tmp_path, capsys, no_model_loading):
    """Fault class: an unbounded read (/dev/zero read into memory until the process was killed)."""
    line = _refused_line(argv, "/dev/zero", tmp_path, capsys)
    assert f"{named.replace('FILE', '/dev/zero')}: not a regular file (a character device)" in line, line


@pytest.mark.parametrize("argv, named", FLAGS, ids=FLAG_IDS)
def test_cli_input_file_missing_says_no_such_file(argv, named, tmp_path, capsys, no_model_loading):
    """Fault class: a wrong reason (a missing --pairs file called "not a regular file")."""
    missing = tmp_path / "missing.jsonl"
    line = _refused_line(argv, missing, tmp_path, capsys)
    assert f"{named.replace('FILE', str(missing))}: no such file" in line, line


@pytest.mark.parametrize("argv, named", FLAGS, ids=FLAG_IDS)
def test_cli_input_file_directory_says_a_directory(argv, named, tmp_path, capsys, no_model_loading):
    """Fault class: a wrong reason (a folder called unreadable, or a missing file)."""
    folder = tmp_path / "folder"
    folder.mkdir()
    line = _refused_line(argv, folder, tmp_path, capsys)
    assert f"{named.replace('FILE', str(folder))}: not a regular file (a directory)" in line, line


@pytest.mark.parametrize("argv, named", FLAGS[:4], ids=FLAG_IDS[:4])
def test_cli_text_file_past_its_bound_refused_unread(argv, named, tmp_path, capsys, no_model_loading):
    """Fault class: an unbounded read (a text file of any size read whole). The file is sparse: no disk used."""
    big = tmp_path / "big.txt"
    with big.open("wb") as fh:
        fh.truncate(MAX_TEXT_BYTES + 1)
    line = _refused_line(argv, big, tmp_path, capsys)
    assert f"{named.replace('FILE', str(big))}: larger than 8 MB" in line, line


def test_read_text_leading_byte_order_mark_is_not_part_of_the_text(tmp_path):
    """Fault class: an invisible character taken as input. A JSON Lines file saved with a byte-order mark (as some
    editors on Windows write it) was refused as "Unexpected UTF-8 BOM", and a context file began with U+FEFF."""
    import json

    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}\n')
    text = read_text(path, 1024, "--pairs pairs.jsonl")
    assert not text.startswith("\ufeff") and json.loads(text.splitlines()[0]) == {"a": 1}


# --- the one atomic writer and the one staging folder (lab.files) -----------------------------------------------

def test_atomic_file_refused_in_its_block_keeps_the_old_file_and_no_temporary(tmp_path):
    """Fault class: a check that refuses a written file leaving it, or its temporary, where a reader finds it."""
    target = tmp_path / "x.bin"
    target.write_bytes(b"old")
    with pytest.raises(ValueError):
        with files.atomic_file(target, suffix=".partial") as (fh, tmp):
            fh.write(b"new")
            assert tmp.parent == tmp_path and tmp.name.startswith(".x.bin.") and tmp.name.endswith(".partial")
            raise ValueError("refused")
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]


def test_write_bytes_atomic_creates_the_folder_with_the_umask_permissions(tmp_path):
    path = files.write_bytes_atomic(tmp_path / "a" / "b.bin", b"\x00\x01")
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_bytes() == b"\x00\x01" and path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_make_staging_shared_follows_the_umask_and_private_is_0700(tmp_path):
    mask = os.umask(0o022)
    try:
        shared = files.make_staging(tmp_path, "r")
        private = files.make_staging(tmp_path, "c", prefix=".c-", private=True)
    finally:
        os.umask(mask)
    assert shared.name.startswith(".r.partial-") and shared.stat().st_mode & 0o777 == 0o755
    assert private.name.startswith(".c-") and private.stat().st_mode & 0o777 == 0o700


def test_publish_taken_name_next_goes_to_the_next_free_drop_removes_raise_keeps(tmp_path):
    final = tmp_path / "out"
    (final / "f").mkdir(parents=True)
    (tmp_path / "out-2" / "f").mkdir(parents=True)
    staging = files.make_staging(tmp_path, "out")
    (staging / "f").mkdir()
    with pytest.raises(OSError):
        files.publish(staging, final)
    assert staging.is_dir()
    assert files.publish(staging, final, if_taken="next") == tmp_path / "out-3"
    dropped = files.make_staging(tmp_path, "out")
    (dropped / "f").mkdir()
    assert files.publish(dropped, final, if_taken="drop") is None and not dropped.exists()


def test_sweep_staging_removes_old_matches_only(tmp_path):
    old, fresh, other = tmp_path / ".a.partial-1", tmp_path / ".b.partial-2", tmp_path / "c"
    for p in (old, fresh, other):
        p.mkdir()
    os.utime(old, (time.time() - 120, time.time() - 120))
    files.sweep_staging(tmp_path, ".*.partial-*", older_than_s=60)
    assert not old.exists() and fresh.exists() and other.exists()
    files.sweep_staging(tmp_path, ".*.partial-*")
    assert not fresh.exists() and other.exists()
