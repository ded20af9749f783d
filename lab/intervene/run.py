"""Running ``lab intervene``: triples, the work directory, shards and resume.

A run reads a triple file (study prompt format, :mod:`lab.prompts`: each clean prompt with
a poisoned and a neutral twin), scores every triple (:func:`score_triple`) and keeps one
record per triple in a work directory ``<out>/.intervene-work-<model>-<key>/`` whose name
is fixed by the settings that change the numbers (:func:`settings_of`). So:

* the same command, re-run, continues where it stopped (finished triples are read back and
  checked; a damaged record is redone, with a note);
* ``--shard K/N`` scores only every N-th triple from the K-th (pilot and main alike) into
  the same directory and writes no report; several shards may run at once; the run
  without ``--shard`` scores what is left and writes the report;
* a second whole run of the same directory at once is refused (an ``flock``, :mod:`lab.runs.locks`);
  settings, records, resume, shards and the lock are a :class:`lab.runs.workdir.WorkDir` (:func:`work_of`);
* ``--ray`` scores the triples on a Ray cluster (:mod:`lab.runs.cluster`), the records equal a serial run's.

The pilot triples are scored first and only feed the pilot section of the report (the
controls, and the SDs the power table reads); the analysis reads the main triples only.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from lab.files import MAX_PROMPT_SET_BYTES, read_bounded
from lab.kinds.intervene import Settings
from lab.prompts import StudyPrompt, load_prompts
from lab.runs.engine import Executor, SerialExecutor, UnitFailure
from lab.runs.workdir import WorkDir
from lab.schemas import FileSchemaError

if TYPE_CHECKING:  # a name for the annotation only: lab.intervene.record loads torch (through its scores)
    from lab.intervene.record import TripleLabels

DEFAULT_TRIPLES = Path(__file__).resolve().parents[1] / "data" / "intervention_triples.jsonl"
DEFAULT_PILOT = Path(__file__).resolve().parents[1] / "data" / "intervention_pilot.jsonl"
DEFAULT_NEW_TOKENS = 24  # as the study's decodes: long enough for a mean entropy, short enough for 240 triples
WORK_PREFIX = ".intervene-work-"
RECORDS_DIR = "records"


@dataclass(frozen=True)
class Triple:
    """A clean prompt with its poisoned and neutral twins."""

    clean: StudyPrompt
    poisoned: StudyPrompt
    neutral: StudyPrompt

    @property
    def id(self) -> str:
        return self.clean.id

    def labels(self) -> TripleLabels:
        """What its record must carry (:class:`lab.intervene.record.TripleLabels`): ids, category, distractor."""
        from lab.intervene.record import TripleLabels

        return TripleLabels(question_id=self.id, category=self.clean.category,
                            distractor=self.poisoned.distractor or "",
                            twin_ids={"P": self.poisoned.id, "N": self.neutral.id})


class InterventionSettings(Settings):
    """What fixes a run's numbers: the report's :class:`lab.kinds.intervene.Settings`, with the work directory's key.

    The analysis' seed is not part of the key (:meth:`scored`): the passes themselves draw nothing, so another
    seed re-analyses the same records; another ``design`` scores anew.
    """

    def scored(self) -> dict[str, Any]:
        """The settings that fix the records: all but the analysis' seed, and ``dense_rows`` when unset
        (so a run from before it existed keeps its key)."""
        return {k: v for k, v in asdict(self).items() if k != "seed" and not (k == "dense_rows" and v is None)}

    def key(self) -> str:
        """12 hex digits of sha256 over :meth:`scored`."""
        return hashlib.sha256(json.dumps(self.scored(), sort_keys=True).encode()).hexdigest()[:12]


def file_sha256(path: str | Path) -> str:
    """sha256 of a triples file (bounded as a prompt set: :data:`lab.files.MAX_PROMPT_SET_BYTES`).

    Raises:
        lab.files.FileRefused: as :func:`lab.files.read_bounded`.
    """
    return hashlib.sha256(read_bounded(path, MAX_PROMPT_SET_BYTES)).hexdigest()


def load_triples(path: str | Path, limit: int | None = None, *, flag: str = "--triples") -> list[Triple]:
    """The triples of a prompt file: every clean prompt that has both a poisoned and a neutral twin.

    Args:
        path: A study prompt file (:func:`lab.prompts.load_prompts`).
        limit: At most this many triples, balanced across categories in file order; None = all.
        flag: The flag that named the file, for errors.

    Returns:
        The triples, in file order.

    Raises:
        ValueError: an unreadable or malformed file (one line, from ``load_prompts``), or a file with
            no complete triple, either naming ``flag``.
    """
    try:
        prompts = load_prompts(path)
    except ValueError as exc:  # load_prompts names its parameter (prompts='...'); the user typed ``flag``
        text = str(exc)
        raise ValueError(f"{flag}={text[len('prompts='):]}" if text.startswith("prompts=") else f"{flag}: {text}") \
            from None
    twins = {(p.twin_of, p.variant): p for p in prompts if p.twin_of is not None}
    triples = [Triple(p, twins[p.id, "poisoned"], twins[p.id, "neutral"]) for p in prompts
               if p.twin_of is None and (p.id, "poisoned") in twins and (p.id, "neutral") in twins]
    if not triples:
        raise ValueError(f"{flag} {str(path)!r} holds no triple (a clean prompt with a poisoned and a neutral twin)")
    unlabelled = next((t.poisoned for t in triples if not (t.poisoned.distractor or "").strip()), None)
    if unlabelled is not None:  # the analysis clusters triples by this label: unlabelled ones would pool as one text
        raise ValueError(f"{flag} {str(path)!r}:{unlabelled.line}: poisoned twin {unlabelled.id!r} has no distractor "
                         "label; the analysis treats each distractor text as a random effect, so every poisoned "
                         "twin names its text")
    return balanced(triples, limit)


def balanced(triples: list[Triple], limit: int | None) -> list[Triple]:
    """At most ``limit`` triples, taken round-robin over categories (each in file order), kept in file order."""
    if limit is None or limit >= len(triples):
        return triples
    by_cat: dict[str, list[Triple]] = {}
    for t in triples:
        by_cat.setdefault(t.clean.category, []).append(t)
    chosen: set[str] = set()
    queues = [list(v) for v in by_cat.values()]
    while len(chosen) < limit:
        for q in queues:
            if q and len(chosen) < limit:
                chosen.add(q.pop(0).id)
    return [t for t in triples if t.id in chosen]


def work_dir_for(out: str | Path, settings: InterventionSettings) -> Path:
    """``<out>/.intervene-work-<model>-<key>``."""
    from lab.reports import slugify

    return Path(out) / f"{WORK_PREFIX}{slugify(settings.model, 24)}-{settings.key()}"


def work_of(work: Path, shard: tuple[int, int] | None = None) -> WorkDir:
    """The intervention's work directory ``work``: a record per triple in ``records/``, "intervention" in the
    lock's messages, ``shard`` this process's (K, N) or None."""
    return WorkDir(Path(work), "intervention", RECORDS_DIR, shard)


def prepare_work_dir(work: Path, settings: InterventionSettings) -> None:
    """Create the work directory with its ``settings.json``, or check the one there.

    Raises:
        ValueError: the directory holds another run's settings (its name's key says otherwise), or it,
            its ``records`` folder or its ``settings.json`` is not what this run writes (a file where a
            folder goes, a FIFO or a folder as ``settings.json``, a file that is not JSON, a folder the
            process may not write), naming the path.
        lab.reports.ReportWriteError: ``settings.json`` could not be written (a full disk), naming it;
            nothing half-written is left.
    """
    import os

    from lab.reports import ReportWriteError

    try:
        (work / RECORDS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot use the work directory {str(work)!r} ({exc.strerror or exc}: "
                         f"{exc.filename or work}); remove it or use another --out") from None
    held = work_of(work)
    path = held.settings_file
    if os.path.lexists(path):
        try:
            stored = held.read_settings("intervention settings file")  # a FIFO, a folder or a device: refused, unread
        except FileSchemaError as exc:
            raise ValueError(f"{exc}; remove the work directory or use another --out") from None
        if not isinstance(stored, dict) or {k: v for k, v in stored.items() if k != "seed"} != settings.scored():
            raise ValueError(f"{work} holds the settings of another run (its settings.json differs); "
                             "remove the directory or use another --out")
        return
    try:
        held.write_settings(settings.scored())
    except OSError as exc:
        raise ReportWriteError(f"writing the intervention's settings to {str(path)!r} failed "
                               f"({exc.strerror or exc}); nothing was scored or half-written; free space or use "
                               "another --out") from None


def record_path(work: Path, triple_id: str) -> Path:
    """``<work>/records/<work_file_name(triple_id)>`` (:meth:`lab.runs.workdir.WorkDir.record_path`)."""
    return work_of(work).record_path(triple_id)


@dataclass
class Models:
    """The loaded target, its draft (a separate model or the target's early-exit view) and the tokenizer."""

    target: Any
    draft: Any
    tokenizer: Any
    eos: frozenset[int]


def load_models(settings: InterventionSettings) -> Models:
    """Load the target (eager attention: the mediator reads attention probabilities) and its draft.

    Raises:
        ValueError / ModelUnavailableError: as :func:`lab.models.loading.load_model`.
    """
    from lab.models.chat import eos_token_ids
    from lab.models.loading import load_model
    from lab.models.qlinear import set_dense_rows
    from lab.speculative.draft_specs import check_draft_spec
    from lab.speculative.self_draft import early_exit_model

    target, tokenizer = load_model(settings.model, device=settings.device, dtype=settings.dtype,
                                   attn_implementation="eager", weights=settings.weights)
    kind = check_draft_spec(settings.draft, int(target.config.num_hidden_layers))
    if kind == "early-exit":
        draft = early_exit_model(target, int(settings.draft.split(":", 1)[1]))
    else:
        draft, _ = load_model(settings.draft, device=settings.device, dtype=settings.dtype,
                              attn_implementation="eager", weights=settings.draft_weights)
    for model in {id(target): target, id(draft): draft}.values():
        set_dense_rows(model, settings.dense_rows)
    return Models(target, draft, tokenizer, frozenset(eos_token_ids(target, tokenizer)))


def score_triple(models: Models, triple: Triple, new_tokens: int):
    """Score one triple: the clean prompt's greedy continuation, then every arm on both twins.

    Returns:
        A :class:`lab.intervene.record.TripleRecord`.

    Raises:
        ValueError: a twin whose text is not its added text, a blank line and its clean prompt
            (from :func:`lab.intervene.masks.twin_prompt_ids`), naming the prompt.
    """
    import torch

    from lab.intervene.masks import twin_prompt_ids
    from lab.intervene.record import TripleRecord
    from lab.intervene.score import greedy_continuation, score_twin
    from lab.models.chat import encode_chat

    t0 = time.perf_counter()
    with torch.inference_mode():
        clean_ids = encode_chat(models.tokenizer, [dict(m) for m in triple.clean.messages])
        continuation = greedy_continuation(models.target, clean_ids, new_tokens, models.eos)
        twins = {}
        for key, twin in (("P", triple.poisoned), ("N", triple.neutral)):
            ids, span = twin_prompt_ids(models.tokenizer, twin, triple.clean)
            twins[key] = score_twin(models.target, models.draft, ids, span, continuation,
                                    prompt_id=twin.id, variant=twin.variant)
    return TripleRecord(question_id=triple.id, category=triple.clean.category,
                        distractor=triple.poisoned.distractor or "", continuation=tuple(continuation.tolist()),
                        twins=twins, seconds=time.perf_counter() - t0,
                        vocab_size=int(models.target.config.vocab_size))  # the width of its logits (lm_head)


def read_or_none(work: Path, triple: Triple, note: Callable[[str], None]):
    """The triple's finished record, or None (absent, or damaged: named in a note, to be redone).

    A record is damaged when :func:`lab.intervene.record.load_record` refuses it: outside its ranges, of
    another triple, or under a label or twin other than ``triple``'s in the triple file.
    """
    return _read_record(record_path(work, triple.id), triple, note)


def _read_record(path: Path, triple: Triple, note: Callable[[str], None]):
    """:func:`read_or_none` of the record at ``path``."""
    from lab.intervene.record import load_record

    if path.is_dir() and not path.is_symlink():  # a record written over it would fail after the model loaded
        raise ValueError(f"{str(path)!r} is a folder where the record of {triple.id!r} goes; remove it")
    if not path.exists():
        return None
    try:
        return load_record(path, triple.labels())
    except FileSchemaError as exc:
        note(f"{exc}; scoring {triple.id!r} again")
        return None


def check_twins(model: str, triples: Sequence[Triple], draft: str | None = None, new_tokens: int | None = None) -> None:
    """Locate every twin's added span with the model's tokenizer alone (no weights), so that a twin that is not
    its added text, a blank line and its clean prompt is refused before a model loads, not at a late triple;
    refuse a draft model whose vocabulary is not the target's (its q would score other tokens than p); and,
    where the models' context is known without loading them (:func:`lab.models.loading.known_context_length`),
    a triple too long for it (:func:`check_fits`).

    Args:
        model / draft: The target and the draft spec, as ``--model`` / ``--draft``.
        triples: The triples to be scored.
        new_tokens: T (``--new-tokens``); None skips the context check.

    Raises:
        ValueError: from :func:`lab.intervene.masks.twin_prompt_ids`, naming the twin; a draft model
            with another vocabulary (:func:`lab.speculative.admission.check_tokenizer_vocab`), naming ``draft``;
            a triple past the context, as :func:`check_fits`.
    """
    from lab.models.loading import known_context_length, load_tokenizer
    from lab.speculative.admission import check_tokenizer_vocab
    from lab.speculative.draft_specs import check_draft_spec

    tokenizer = load_tokenizer(model)
    draft_model = draft is not None and check_draft_spec(draft) == "model"
    if draft_model:
        check_tokenizer_vocab(tokenizer, load_tokenizer(draft), draft)
    lengths = longest_twins(tokenizer, triples)
    if new_tokens is not None:  # an early-exit draft is the target's own layers: its context
        limits = [known_context_length(name) for name in ((model, draft) if draft_model else (model,))]
        check_fits(triples, lengths, new_tokens, [n for n in limits if n is not None])


def longest_twins(tokenizer: Any, triples: Sequence[Triple]) -> list[int]:
    """The prompt tokens of each triple's longest twin (chat template, generation prompt included).

    Raises:
        ValueError: a twin that is not its added text, a blank line and its clean prompt
            (:func:`lab.intervene.masks.twin_prompt_ids`), naming it.
    """
    from lab.intervene.masks import twin_prompt_ids

    return [max(twin_prompt_ids(tokenizer, twin, t.clean)[0].numel() for twin in (t.poisoned, t.neutral))
            for t in triples]


def check_fits(triples: Sequence[Triple], lengths: Sequence[int], new_tokens: int, limits: Sequence[int]) -> None:
    """Refuse a triple whose longest twin and ``--new-tokens`` pass the context (the smallest of ``limits``;
    none known: nothing is refused).

    A twin holds at least one token more than its clean prompt, so its S + T - 1 positions bound the
    clean prompt's greedy decode (S_clean + T) too; T is the budget (a continuation may stop early).

    Args:
        triples: The triples, with ``lengths[i]`` the prompt tokens of ``triples[i]``'s longest twin.
        new_tokens: T.
        limits: The known contexts of the target and the draft, in positions.

    Raises:
        ValueError: naming ``--new-tokens``, the first triple that does not fit and the context.
    """
    if not limits:
        return
    limit = min(limits)
    for t, n in zip(triples, lengths):
        if n + new_tokens - 1 > limit:
            fix = f"use --new-tokens <= {limit - n + 1}" if n <= limit else "its prompt alone is longer: drop it"
            raise ValueError(f"--new-tokens={new_tokens}: triple {t.id!r} has a {n}-token twin, which with the "
                             f"continuation needs {n + new_tokens - 1} positions, more than the models' context of "
                             f"{limit}; {fix}")


def check_context(models: Models, triples: Sequence[Triple], new_tokens: int) -> None:
    """:func:`check_fits` on the loaded models, before any triple is scored: the backstop for a context
    :func:`check_twins` could not read without loading (a GGUF profile not yet dequantized, a hub model).

    Raises:
        ValueError: as :func:`check_fits`.
    """
    from lab.decode import context_length

    limits = [n for n in (context_length(models.target), context_length(models.draft)) if n is not None]
    if limits:
        check_fits(triples, longest_twins(models.tokenizer, triples), new_tokens, limits)


@dataclass(frozen=True)
class InterventionExperiment:
    """The intervention as an experiment of the run engine (:class:`lab.runs.engine.Experiment`).

    A unit is a triple, scored by :func:`score_triple` on the models a worker loads once
    (:func:`load_models`), which are first checked against the triples to score (:func:`check_context`).
    """

    settings: InterventionSettings
    triples: tuple[Triple, ...]

    @property
    def device(self) -> str:
        return self.settings.device

    def load(self) -> Models:
        models = load_models(self.settings)
        check_context(models, self.triples, self.settings.new_tokens)
        return models

    def info(self, models: Models) -> dict[str, Any]:
        return {}

    def measure(self, models: Models, triple: Triple):
        return score_triple(models, triple, self.settings.new_tokens)

    def for_workers(self) -> InterventionExperiment:
        return self  # the settings fix the device and dtype already


def run_triples(work: Path, triples: Sequence[Triple], settings: InterventionSettings,
                executor: Executor | None = None, *,
                progress: Callable[[int, int, str], None] = lambda i, n, tid: None,
                note: Callable[[str], None] = lambda msg: None) -> tuple[dict[str, Any], dict[str, str]]:
    """Score every triple of ``triples`` that has no good record in ``work``, saving each as it finishes.

    Args:
        executor: Where the triples are scored (:class:`lab.runs.engine.Executor`); default a
            :class:`lab.runs.engine.SerialExecutor`. Models load only if some triple is left.
        progress: Called with (triples finished, triples to score, the triple finished last).

    Returns:
        ``({triple id: TripleRecord or None}, {triple id: why the executor gave up on it})`` for all of
        ``triples``; a record is None only for a triple in the second mapping.

    Raises:
        ValueError: a folder where a record goes, or a triple too long for the context (:func:`check_context`).
        lab.reports.ReportWriteError: a record that could not be written (a full disk, a read-only
            folder), naming it; the records finished before it are kept.
    """
    done = work_of(work).resume(triples, lambda path, t: _read_record(path, t, note))
    left = [t for t in triples if done[t.id] is None]
    failed: dict[str, str] = {}
    if not left:
        return done, failed
    executor = executor or SerialExecutor()
    try:
        executor.start(InterventionExperiment(settings, tuple(left)))
        progress(0, len(left), "")
        for i, (t, rec) in enumerate(executor.run(left, None)):  # in the order they finish
            if isinstance(rec, UnitFailure):
                failed[t.id] = rec.error
            else:
                _save(work, t, rec, done)
            progress(i + 1, len(left), t.id)
    finally:
        executor.close()
    return done, failed


def _save(work: Path, triple: Triple, record: Any, done: dict[str, Any]) -> None:
    """Write a finished triple's record atomically and note it in ``done``."""
    from lab.reports import ReportWriteError

    path = record_path(work, triple.id)
    try:
        work_of(work).save(triple.id, record.to_json())
    except OSError as exc:
        raise ReportWriteError(f"writing the record of {triple.id!r} to {str(path)!r} failed "
                               f"({exc.strerror or exc}); the {sum(r is not None for r in done.values())} "
                               f"triples finished before it are kept in {work}") from None
    done[triple.id] = record
