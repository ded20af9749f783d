"""``lab intervene``'s work directory read back: records checked like study outcomes, its settings and its lock.

Regressions guarded here:

* intervention records were trusted as read: an entropy of -50, 99 or 1e300 bits moved the
  difference in differences; a twin copied from another triple, or an edited ``distractor`` or
  ``category``, was clustered and reported under the edited label; a 400-digit integer ended in an
  unforeseen ``OverflowError``. A record now meets the ranges of the math and the triple file's
  labels, or it is named in a note and scored again;
* ``settings.json`` on a full disk in a fresh work directory was an unforeseen ``OSError`` 28;
* a whole run kept out by running shards was told "this intervention (or a shard of it)" is running,
  and a FIFO or folder as ``settings.json`` was called "the settings of another run".
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path

import pytest

from lab.intervene import run as iv
from lab.intervene.masks import ARMS, AddedSpan
from lab.intervene.record import TripleRecord, load_record
from lab.intervene.score import ArmOutcome, TwinOutcome
from lab.reports import ReportWriteError
from lab.runs.locks import WorkDirBusyError, hold
from lab.schemas import FileSchemaError
from tests.support import edit_at

pytestmark = pytest.mark.unit

HUGE = 10**400
VOCAB = 50  # log2 V = 5.64 bits


def _rows() -> list[dict]:
    rows = []
    for pid, cat, label in (("math-1", "math", "d1"), ("code-2", "code", "d2")):
        question = f"question of {pid} ?"
        rows += [{"id": pid, "category": cat, "messages": [{"role": "user", "content": question}]},
                 {"id": f"{pid}-P", "category": cat, "twin_of": pid, "variant": "poisoned", "distractor": label,
                  "messages": [{"role": "user", "content": f"a distractor\n\n{question}"}]},
                 {"id": f"{pid}-N", "category": cat, "twin_of": pid, "variant": "neutral",
                  "messages": [{"role": "user", "content": f"relevant text\n\n{question}"}]}]
    return rows


@pytest.fixture
def triples(tmp_path) -> dict[str, iv.Triple]:
    path = tmp_path / "triples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    return {t.id: t for t in iv.load_triples(path)}


def _record(triple: iv.Triple, n: int = 3) -> TripleRecord:
    """A record of ``triple`` that meets every check: the empty arm within 1e-7 bits of A0."""
    def twin(prompt, k: float) -> TwinOutcome:
        def bits(j: int, arm: str) -> tuple[float, ...]:
            return tuple(0.1 * k + (1e-7 * k if arm == "empty" else j / 7) + i / 3 for i in range(n))

        arms = {arm: ArmOutcome(entropy_bits=bits(j, arm), beta=tuple(0.5 + 0.01 * (i + j) for i in range(n)),
                                span_mass=0.2 / (j + 1), sink_mass=0.6 - 0.05 * j) for j, arm in enumerate(ARMS)}
        gap = max(abs(a - b) for a, b in zip(arms["empty"].entropy_bits, arms["A0"].entropy_bits))
        return TwinOutcome(prompt_id=prompt.id, variant=prompt.variant, n_prompt=20, span=AddedSpan(5, 11),
                           n_decode=n, arms=arms, empty_max_diff_bits=gap)

    return TripleRecord(question_id=triple.id, category=triple.clean.category, distractor=triple.poisoned.distractor,
                        continuation=(4, 9, 4)[:n],
                        twins={"P": twin(triple.poisoned, 1.0), "N": twin(triple.neutral, 2.0)},
                        seconds=0.25, vocab_size=VOCAB)


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _refused(path: Path, triple: iv.Triple) -> str:
    with pytest.raises(FileSchemaError) as exc:
        load_record(path, triple.labels())
    message = str(exc.value)
    assert str(path) in message and "\n" not in message and len(message) < 400, message
    return message


ENTROPY = "twins/P/arms/A1/entropy_bits"
OUT_OF_RANGE = {
    "entropy -50": (ENTROPY, [-50.0, 1.0, 1.0], "minimum"),
    "entropy 99": (ENTROPY, [99.0, 1.0, 1.0], "maximum"),
    "entropy 1e300": (ENTROPY, [1e300, 1.0, 1.0], "maximum"),
    "entropy NaN": (ENTROPY, [math.nan, 1.0, 1.0], "finite"),
    "entropy 400 digits": (ENTROPY, [HUGE, 1.0, 1.0], "digit"),
    "entropy past log2 V": (ENTROPY, [6.0, 1.0, 1.0], "log2 V"),
    "beta 1.5": ("twins/N/arms/A0/beta", [1.5, 0.5, 0.5], "maximum"),
    "beta -0.1": ("twins/N/arms/A0/beta", [-0.1, 0.5, 0.5], "minimum"),
    "span mass 2": ("twins/P/arms/A1/span_mass", 2.0, "maximum"),
    "sink mass 400 digits": ("twins/P/arms/A1/sink_mass", HUGE, "digit"),
    "seconds -1": ("seconds", -1.0, "minimum"),
    "seconds 1e300": ("seconds", 1e300, "maximum"),
    "seconds 400 digits": ("seconds", HUGE, "digit"),
    "seconds Infinity": ("seconds", math.inf, "maximum"),
    "n_prompt 400 digits": ("twins/P/n_prompt", HUGE, "digit"),
    "span end 400 digits": ("twins/P/span", [5, HUGE], "digit"),
    "token id 400 digits": ("continuation", [4, HUGE, 4], "digit"),
    "token id past V": ("continuation", [4, VOCAB, 4], "vocab_size"),
    "vocab_size 400 digits": ("vocab_size", HUGE, "digit"),
    "empty control edited": ("twins/N/empty_max_diff_bits", 0.0, "empty_max_diff_bits"),
}


@pytest.mark.parametrize("where, value, needle", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_load_record_outside_the_math_refused_in_one_line_naming_the_file(tmp_path, triples, where, value, needle):
    """Regression: an out-of-range or huge number in a record entered the analysis (or overflowed)."""
    triple = triples["math-1"]
    path = _write(tmp_path / "r.json", edit_at(where, value)(_record(triple).to_json()))
    assert needle in _refused(path, triple)


def test_load_record_without_vocab_size_bounded_by_32_bits(tmp_path, triples):
    """A record written before ``vocab_size`` was kept reads, its entropies bounded by 32 bits."""
    triple = triples["math-1"]
    data = _record(triple).to_json()
    del data["vocab_size"]
    assert load_record(_write(tmp_path / "r.json", data), triple.labels()).vocab_size is None
    path = _write(tmp_path / "r.json", edit_at(ENTROPY, [33.0, 1.0, 1.0])(data))
    assert "maximum" in _refused(path, triple)


LABEL_EDITS = {
    "category edited": ("category", "code", "category 'code' is not the triple file's 'math'"),
    "distractor edited": ("distractor", "d2", "distractor 'd2' is not the triple file's 'd1'"),
    "question of another triple": ("question_id", "code-2", "belongs to 'code-2'"),
}


@pytest.mark.parametrize("where, value, needle", LABEL_EDITS.values(), ids=LABEL_EDITS.keys())
def test_load_record_label_other_than_the_triple_files_refused(tmp_path, triples, where, value, needle):
    """Regression: an edited label clustered and reported the triple under it."""
    triple = triples["math-1"]
    path = _write(tmp_path / "r.json", edit_at(where, value)(_record(triple).to_json()))
    assert needle in _refused(path, triple)


def test_load_record_twin_copied_from_another_triple_refused(tmp_path, triples):
    """Regression: a twin copied from another triple's record was analysed as this triple's."""
    triple, other = triples["math-1"], triples["code-2"]
    data = _record(triple).to_json()
    data["twins"]["P"] = _record(other).to_json()["twins"]["P"]
    message = _refused(_write(tmp_path / "r.json", data), triple)
    assert "twin P is prompt 'code-2-P', not the triple file's poisoned twin 'math-1-P'" in message


def test_load_record_negative_control_a_good_record_reads_whole(tmp_path, triples):
    triple = triples["math-1"]
    record = _record(triple)
    back = load_record(_write(tmp_path / "r.json", record.to_json()), triple.labels())
    assert back == record and back.summary() == record.summary()


def test_read_or_none_bad_record_named_in_a_note_and_redone(tmp_path, triples):
    """On resume (and in the run without --shard reading the shards' records) a bad record is scored again."""
    triple = triples["math-1"]
    path = iv.record_path(tmp_path, triple.id)
    path.parent.mkdir(parents=True)
    _write(path, edit_at("distractor", "d2")(_record(triple).to_json()))
    notes: list[str] = []
    assert iv.read_or_none(tmp_path, triple, notes.append) is None
    assert len(notes) == 1 and str(path) in notes[0] and "scoring 'math-1' again" in notes[0], notes
    _write(path, _record(triple).to_json())
    assert iv.read_or_none(tmp_path, triple, notes.append) == _record(triple) and len(notes) == 1


def test_score_triple_records_the_targets_vocabulary(triples, tiny_model, chatml_tokenizer, one_torch_thread):
    """The record keeps V (the width of the target's logits), which bounds its entropies on read."""
    import torch

    from tests import support

    target = support.tiny_llama(vocab_size=len(chatml_tokenizer), attn_implementation="eager")
    models = iv.Models(target=target, draft=target, tokenizer=chatml_tokenizer, eos=frozenset())
    with torch.inference_mode():
        record = iv.score_triple(models, triples["math-1"], 2)
    assert record.vocab_size == target.config.vocab_size == target.get_output_embeddings().out_features
    assert record.to_json()["vocab_size"] == record.vocab_size


# --- the work directory's settings ------------------------------------------------------------------------------

def _settings() -> iv.InterventionSettings:
    return iv.InterventionSettings(model="smollm2", draft="early-exit:1", weights="float32", draft_weights="float32",
                                   dtype="float32", device="cpu", triples_file="t.jsonl", triples_sha256="0" * 64,
                                   pilot_file=None, pilot_sha256=None, limit=None, pilot_limit=0, new_tokens=3, seed=0)


def test_prepare_work_dir_settings_on_a_full_disk_one_line_nothing_half_written(tmp_path, monkeypatch):
    """Regression: OSError 28 writing settings.json in a fresh work directory was an unforeseen error."""
    from lab.runs import files

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(files, "write_text_atomic", full)
    work = tmp_path / ".intervene-work-x"
    with pytest.raises(ReportWriteError) as exc:
        iv.prepare_work_dir(work, _settings())
    message = str(exc.value)
    assert str(work / "settings.json") in message and "No space left on device" in message and "\n" not in message
    assert not (work / "settings.json").exists() and not [p for p in work.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("how", ["folder", "fifo", "dangling symlink"])
def test_prepare_work_dir_settings_not_a_regular_file_named_as_such(tmp_path, how):
    """Regression: a FIFO or a folder as settings.json was called "the settings of another run"."""
    work = tmp_path / ".intervene-work-x"
    (work / iv.RECORDS_DIR).mkdir(parents=True)
    path = work / "settings.json"
    {"folder": path.mkdir, "fifo": lambda: os.mkfifo(path),
     "dangling symlink": lambda: path.symlink_to(tmp_path / "gone.json")}[how]()
    with pytest.raises(ValueError) as exc:
        iv.prepare_work_dir(work, _settings())
    message = str(exc.value)
    assert str(path) in message and "not a regular file" in message and "another run" not in message, message


def test_prepare_work_dir_negative_control_same_settings_pass_other_settings_refused(tmp_path):
    work = tmp_path / ".intervene-work-x"
    iv.prepare_work_dir(work, _settings())
    iv.prepare_work_dir(work, _settings())  # the same run again: its settings
    other = iv.InterventionSettings(**{**_settings().__dict__, "new_tokens": 7})
    with pytest.raises(ValueError, match="holds the settings of another run"):
        iv.prepare_work_dir(work, other)


# --- the lock --------------------------------------------------------------------------------------------------

def test_hold_whole_run_kept_out_by_shards_names_them(tmp_path):
    """Regression: a whole run kept out only by shards was told another run of the intervention was running."""
    work = tmp_path / ".intervene-work-x"
    with hold(work, (2, 3), "intervention"):
        with pytest.raises(WorkDirBusyError, match="shard 2/3 of this intervention is already running"):
            with hold(work, None, "intervention"):
                pass
        with hold(work, (3, 3), "intervention"):
            with pytest.raises(WorkDirBusyError, match="shards 2/3, 3/3 of this intervention are already running"):
                with hold(work, None, "intervention"):
                    pass
    with hold(work, None, "intervention"):
        with pytest.raises(WorkDirBusyError, match="another whole run of this intervention is already running"):
            with hold(work, None, "intervention"):
                pass
