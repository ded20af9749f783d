"""The study's plan and its work directory: per-prompt work files, resume, and the directory's lock.

The work directory is a :class:`lab.runs.workdir.WorkDir` (settings, records, resume, shards, lock: the
mechanisms every run shares live in :mod:`lab.runs`); what a prompt's record holds is the study's."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from lab.files import read_bounded
from lab.models import loading as lab_models
from lab.models.profiles import PROFILES
from lab.models.devices import parse_dtype, resolve_device
from lab.prompts import CATEGORIES, StudyPrompt, default_prompts_path, parse_prompts, select_prompts
from lab.sources import SOURCES, load_prompt_set
from lab.study.config import TEMPERATURE_SUBSET_PER_CATEGORY, WORK_FORMAT, WORK_PREFIX, StudyConfig
from lab.study.outcome import TOKEN_KEYS, DraftedToken, PromptOutcome, PromptRow, TrackedDecode
from lab.schemas import MAX_FILE_BYTES, FileSchemaError, read_json, validate
from lab.study import outcome_schema
from lab.study.work_schema import PROMPTS_KIND, PROMPTS_SCHEMA, RUNNER_KIND, RUNNER_SCHEMA, SETTINGS_KIND, SETTINGS_SCHEMA
from lab.analysis.claims import DESIGN_TEMPERATURES
from lab.runs.files import settings_key, work_file_name, write_json_atomic
from lab.runs.shards import deal
from lab.runs.workdir import WorkDir, differing_keys

logger = logging.getLogger(__name__)

@dataclass
class StudyPlan:
    """A study ready to run: its prompts, settings and work directory.

    Attributes:
        config: The settings.
        prompts: The prompts this invocation runs (the shard's slice when sharded).
        settings: Everything that changes the numbers (hashed into ``key``).
        key: :func:`lab.runs.files.settings_key` of ``settings``.
        work_dir: ``<out>/.study-work-<key>``.
        all_prompts: The whole selection (equals ``prompts`` unless sharded).
        temperature_ids: Clean prompts of the H6 subset (chosen on ``all_prompts``).
        locked: Whether this process holds the work directory (:func:`hold_work_dir`).
    """

    config: StudyConfig
    prompts: list[StudyPrompt]
    settings: dict[str, Any]
    key: str
    work_dir: Path
    all_prompts: list[StudyPrompt] = field(default_factory=list)
    temperature_ids: frozenset[str] = frozenset()
    locked: bool = field(default=False, repr=False, compare=False)  # set by hold_work_dir while held

    @property
    def work(self) -> WorkDir:
        """The work directory as a :class:`lab.runs.workdir.WorkDir` (this plan's shard, if any)."""
        return study_work_dir(self.work_dir, self.config.shard)


def study_work_dir(path: str | Path, shard: tuple[int, int] | None = None) -> WorkDir:
    """A study's work directory: finished prompts in ``outcomes/``, "study" in the lock's messages."""
    return WorkDir(Path(path), "study", OUTCOMES_DIR, shard)


@contextmanager
def hold_work_dir(plan: StudyPlan) -> Iterator[StudyPlan]:
    """Hold the plan's work directory against other processes while a study runs in it (:func:`lab.runs.locks.hold`).

    A plan this process already holds is yielded as it is, so a caller may take the lock before
    :func:`lab.study.run.run_study` does.

    Raises:
        lab.runs.locks.WorkDirBusyError: another study holds the directory (naming it, in one line).
        ValueError: the folder of the lock cannot be written (naming it).
    """
    if plan.locked:
        yield plan
        return
    with plan.work.hold():
        plan.locked = True
        try:
            yield plan
        finally:
            plan.locked = False


def prompts_display(path: str | Path | None) -> str:
    """How a prompt file is named in reports: relative to the working directory when
    inside it, ``lab/data/...`` for the embedded set, else as given (never made absolute)."""
    if path is None or Path(path).resolve() == default_prompts_path().resolve():
        return "lab/data/prompts.jsonl"
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _units(prompts: list[StudyPrompt], category: str) -> list[list[StudyPrompt]]:
    """A category's units in file order: a clean prompt with its twins (poisoned, neutral), or a single clean prompt."""
    twins: dict[str, list[StudyPrompt]] = {}
    for p in prompts:
        if p.twin_of is not None:
            twins.setdefault(p.twin_of, []).append(p)
    return [[p, *twins.get(p.id, [])] for p in prompts if p.category == category and p.variant == "clean"]


def count_units(prompts: list[StudyPrompt]) -> int:
    """How many units (:func:`_units`) the prompts form: the most shards that each get one."""
    return sum(len(_units(prompts, cat)) for cat in CATEGORIES)


def shard_prompts(prompts: list[StudyPrompt], k: int, n: int) -> list[StudyPrompt]:
    """The K-th (1-based) of N disjoint, category-balanced slices; twin pairs stay together.

    Units (:func:`_units`) are dealt round robin (:func:`lab.runs.shards.deal`): going through the
    categories in :data:`lab.prompts.CATEGORIES` order and each category's units in file order,
    the j-th unit overall goes to shard ``j mod N``, so every shard gets about the same number of
    units of every category. The slices cover ``prompts`` exactly.

    Raises:
        ValueError: not ``1 <= k <= n``.
    """
    units = [unit for cat in CATEGORIES for unit in _units(prompts, cat)]
    chosen = {p.id for unit in deal(units, (k, n)) for p in unit}
    return [p for p in prompts if p.id in chosen]


def temperature_subset(prompts: list[StudyPrompt], per_category: int = TEMPERATURE_SUBSET_PER_CATEGORY) -> frozenset[str]:
    """H6's balanced subset: the first ``per_category`` clean prompts of each category (file order)."""
    out: list[str] = []
    for cat in CATEGORIES:
        out += [p.id for p in prompts if p.category == cat and p.variant == "clean"][:per_category]
    return frozenset(out)


PROMPTS_FILE = "prompts.json"  # the selected prompt set, stored beside settings.json so a resume needs no file


def prompts_digest(prompts: list[StudyPrompt]) -> str:
    """sha256 over the canonical JSON of the prompts (``settings["prompts_sha256"]``)."""
    return hashlib.sha256(json.dumps([p.to_json() for p in prompts], sort_keys=True).encode()).hexdigest()


def plan_study(config: StudyConfig) -> StudyPlan:
    """Load and select the prompts, fix the settings and the work directory.

    Everything is validated here, before any model work.

    Raises:
        ValueError: a bad prompt file (naming the line), bad settings, or a device /
            dtype that is not available.
    """
    prompts = select_prompts(load_prompt_set(config.prompts or default_prompts_path()), config.limit)  # file or source
    return _plan(config, prompts)


def health_settings(model: str) -> dict[str, Any]:
    """What fixes a run's context numbers: the chosen health measure, the model's length reference and its
    fitted context measure (H1's ``lookback_heads``).

    Part of the settings (and so of the work directory's key), so that a study resumed or
    merged after ``lab calibrate-health --save`` changed either is refused, naming it,
    instead of mixing two measures in one report. ``length_reference_sha256`` is the sha256
    of the reference file the model's profile reads (:mod:`lab.health.references`), None
    without one.

    Raises:
        ValueError: the chosen measure reads a length reference and ``model`` has none (its
            health would be NaN for every prompt, leaving H1 and H4 untestable); the chosen
            measure's or the reference's file is bad (not a regular file, outside its schema), naming it.
    """
    from lab.health.choice import load_chosen
    from lab.health.measures import FOR_LENGTH
    from lab.health.references import load_references, reference_path

    measure = load_chosen()
    path = reference_path(model) if model in PROFILES else None
    if path is not None:
        load_references(model)  # a bad file (a folder or a FIFO where it goes) is refused by name before it is hashed
    if measure.endswith(FOR_LENGTH) and path is None:
        raise ValueError(f"context health ({measure}) reads each prompt against clean prompts of its length on the "
                         f"same model, and {model!r} has no length reference: make one first with "
                         f"`lab calibrate-health --model {model} --save` (a prefill of 228 short prompts)")
    from lab.health.context_validity import load_context_measure

    context = load_context_measure(model) if model in PROFILES else None  # a bad file refused by name first
    return {"health_measure": measure,
            "length_reference_sha256": _sha256(path) if path else None,
            "context_measure_sha256": _sha256(context.path) if context else None}


def _sha256(path: Path) -> str:
    """sha256 of a file the study reads back, bounded as :func:`lab.schemas.read_json` reads it."""
    return hashlib.sha256(read_bounded(path, MAX_FILE_BYTES)).hexdigest()


def _plan(config: StudyConfig, prompts: list[StudyPrompt], work_dir: Path | None = None) -> StudyPlan:
    """The plan for these selected prompts; ``work_dir`` defaults to ``<out>/.study-work-<key>``."""
    check_work_names(prompts)
    temps = temperature_subset(prompts)
    device = resolve_device(config.device)
    dtype = str(parse_dtype(config.dtype, device)).removeprefix("torch.")
    lab_models.check_model_available(config.model)  # an unknown model is named as such, not as a missing draft
    from lab.speculative.draft_specs import check_draft

    check_draft(config.draft_spec(), config.draft_weights)  # N against the depth is checked once the target loads
    settings = {
        "format": WORK_FORMAT,
        "model": config.model, "draft": config.draft_spec(), "device": str(device), "dtype": dtype,
        "prompts_file": config.prompts, "prompts_sha256": prompts_digest(prompts), "n_prompts": len(prompts),
        "limit": config.limit, "max_new_tokens": config.max_new_tokens, "gamma": config.gamma,
        "seed": config.seed, "temperature": float(config.temperature),
        "design_temperatures": list(DESIGN_TEMPERATURES), "temperature_subset": sorted(temps),
        "draft_dtype": config.draft_dtype_choice()[0], "draft_dtype_flag": config.draft_dtype,
        **health_settings(config.model),
        # only when not float32: float32 directories written before the option keep their key
        **({"weights": config.weights} if config.weights != "float32" else {}),
        **({"draft_weights": config.draft_weights} if config.draft_weights != "float32" else {}),
    }
    key = settings_key(settings)
    mine = shard_prompts(prompts, *config.shard) if config.shard else prompts
    work_dir = Path(config.out) / f"{WORK_PREFIX}{key}" if work_dir is None else Path(work_dir)
    return StudyPlan(config, mine, settings, key, work_dir, all_prompts=prompts, temperature_ids=temps)


def read_settings(work_dir: str | Path, *, flag: str = "--resume") -> dict[str, Any]:
    """``settings.json`` of a work directory, validated (:data:`lab.study.work_schema.SETTINGS_SCHEMA`).

    Raises:
        ValueError: no ``settings.json`` there, or one of another work format
            (:data:`lab.study.config.WORK_FORMAT`), naming ``flag``.
        FileSchemaError: one that cannot be read, is not JSON or is outside its schema, naming the file.
    """
    path = Path(work_dir)
    work = study_work_dir(path)
    settings_file = work.settings_file
    if not settings_file.is_file():
        raise ValueError(f"{flag}={str(path)!r} is not a study work directory (no settings.json)")
    settings = work.read_settings(SETTINGS_KIND)
    written_in = settings.get("format") if isinstance(settings, dict) else None
    if isinstance(written_in, int) and written_in != WORK_FORMAT:  # before the schema: say that it is another format
        raise ValueError(f"{flag}={str(path)!r} was written in work format {written_in!r}, and this "
                         f"lab reads only format {WORK_FORMAT}; finish it with the lab version that started it, "
                         "or start the study again")
    return validate(settings, SETTINGS_SCHEMA, path=settings_file, kind=SETTINGS_KIND)


def config_from_work_dir(work_dir: str | Path, *, flag: str = "resume", **overrides: Any) -> StudyConfig:
    """The settings stored in a work directory, as a :class:`StudyConfig`.

    To resume the directory itself (its stored prompt set, its own path) use
    :func:`plan_from_work_dir`; a plan built from this config names the
    directory by its settings key, under ``out``.

    Args:
        work_dir: A ``.study-work-<key>`` directory left by an interrupted study.
        flag: How errors name the argument (``"resume"``, ``"merge"``).
        overrides: Fields that do not change the numbers (``n_resamples``, ``out``, ``shard``).

    Raises:
        ValueError: the directory or its ``settings.json`` is missing, unreadable or outside its
            schema (:class:`lab.schemas.FileSchemaError`).
    """
    path = Path(work_dir)
    s = read_settings(path, flag=flag)
    try:
        cfg = StudyConfig(model=s["model"], draft=s["draft"], prompts=s["prompts_file"], limit=s["limit"],
                          max_new_tokens=s["max_new_tokens"], gamma=s["gamma"], seed=s["seed"],
                          temperature=s["temperature"], device=s["device"], dtype=s["dtype"],
                          draft_dtype=s["draft_dtype_flag"], weights=s.get("weights", "float32"),
                          draft_weights=s.get("draft_weights", "float32"),
                          **{"out": str(path.parent), **overrides})
        # settings store the draft resolved (the profile's, when none was given), and a profile
        # draft given by default takes the study's measured dtype while one given by name does
        # not: of the two configs naming that draft, take the one that reproduces the stored dtype
        profile = PROFILES.get(s["model"])
        if (profile is not None and profile.draft == s["draft"] and s["draft_dtype_flag"] is None
                and cfg.draft_dtype_choice()[0] != s["draft_dtype"]):
            cfg = replace(cfg, draft=None)
    except (KeyError, TypeError, ValueError) as exc:  # a range of StudyConfig's that the schema lacks
        # "gamma 0", not "gamma=0": the CLI would read name=value as a flag the user typed (lab.cli.as_typed)
        raise FileSchemaError(path / "settings.json", SETTINGS_KIND, re.sub(r"\b(\w+)=", r"\1 ", str(exc))) from None
    return cfg


def _stored_prompts(path: Path, settings: dict[str, Any], flag: str) -> list[StudyPrompt]:
    """The prompt set a work directory was started with: its ``prompts.json``, or (a directory
    that holds none) its prompt file re-read, which must hash to the stored digest."""
    stored = path / PROMPTS_FILE
    if stored.is_file():
        records = validate(read_json(stored, PROMPTS_KIND), PROMPTS_SCHEMA, path=stored, kind=PROMPTS_KIND)
        try:
            prompts = parse_prompts([json.dumps(r) for r in records], source=str(stored))
        except ValueError as exc:
            raise FileSchemaError(stored, PROMPTS_KIND, str(exc)) from None
        if prompts_digest(prompts) != settings.get("prompts_sha256"):
            raise ValueError(f"{flag}={str(path)!r}: {PROMPTS_FILE} does not match the prompt digest in "
                             "settings.json (edited?); the study cannot be continued from it")
        return prompts
    file = settings.get("prompts_file")
    where = repr(file) if file else "the embedded prompt set"
    if file and not Path(file).is_file() and file not in SOURCES:
        raise ValueError(f"{flag}={str(path)!r} was started with the prompt file {file!r}, which is not found from "
                         f"{str(Path.cwd())!r}; run from the directory the study was started in")
    try:
        prompts = select_prompts(load_prompt_set(file), settings.get("limit"))
    except ValueError as exc:
        raise ValueError(f"{flag}={str(path)!r}: its prompt file {where} no longer loads ({exc})") from None
    if prompts_digest(prompts) != settings.get("prompts_sha256"):
        raise ValueError(f"{flag}={str(path)!r}: the prompts in {where} differ from those it was started with "
                         f"(sha256 {prompts_digest(prompts)[:12]}, started with "
                         f"{str(settings.get('prompts_sha256'))[:12]}); restore that file or start a new study")
    return prompts


def plan_from_work_dir(work_dir: str | Path, *, flag: str = "--resume", **overrides: Any) -> StudyPlan:
    """A plan that continues the work directory itself (``--resume DIR``, ``--merge DIR``).

    Everything that changes the numbers comes from DIR: the settings (``settings.json``),
    the prompt set (``prompts.json``, checked against the stored sha256) and hence every
    prompt's seed. The plan's work directory is DIR as given, whatever its name.

    Args:
        work_dir: A study work directory (renamed or copied ones included).
        flag: How errors name the argument.
        overrides: Fields that do not change the numbers (``n_resamples``, ``out``, ``shard``);
            ``out`` defaults to DIR's parent.

    Raises:
        ValueError: not a work directory, unreadable settings or prompts, a prompt set that
            differs from the one DIR was started with, or settings this lab would not
            reproduce (another work format, an unavailable device), naming what differs.
    """
    path = Path(work_dir)
    settings = read_settings(path, flag=flag)
    config = config_from_work_dir(path, flag=flag, **overrides)
    plan = _plan(config, _stored_prompts(path, settings, flag), work_dir=path)
    if plan.settings != settings:
        raise ValueError(f"{flag}={str(path)!r}: its settings.json differs from what this lab would run "
                         f"(in {', '.join(differing_keys(plan.settings, settings))}); it cannot be continued here")
    return plan


def write_prompt_set(plan: StudyPlan) -> None:
    """Store the selected prompt set in the work directory (once; it never changes)."""
    if not (plan.work_dir / PROMPTS_FILE).is_file():
        write_json_atomic(plan.work_dir / PROMPTS_FILE, [p.to_json() for p in plan.all_prompts])


OUTCOMES_DIR = "outcomes"  # finished prompts, apart from the directory's own files (settings.json, ...)
def check_work_names(prompts: list[StudyPrompt]) -> None:
    """Refuse a prompt set in which two ids would share one work file (:func:`work_file_name`).

    Raises:
        ValueError: naming both ids (never seen in practice: it needs a 64-bit digest collision).
    """
    seen: dict[str, str] = {}
    for p in prompts:
        name = work_file_name(p.id)
        if name in seen:
            raise ValueError(f"prompt ids {seen[name]!r} and {p.id!r} map to one work file {name!r}; rename one")
        seen[name] = p.id


def work_file(plan: StudyPlan, prompt: StudyPrompt) -> Path:
    """Where a finished prompt's outcome is kept: ``<work dir>/outcomes/<work_file_name(id)>``."""
    return plan.work.record_path(prompt.id)


def read_finished(plan: StudyPlan, prompt: StudyPrompt, path: Path | None = None) -> PromptOutcome | None:
    """A finished prompt's outcome from the work directory, or ``None`` if it has none.

    The file is checked by :mod:`lab.study.outcome_schema` (shape, ranges, alpha and the drafted
    tokens against its own counts) and must belong to this study (its settings key) and this
    prompt. Optional columns a file lacks read as None; columns of no :class:`PromptRow`
    field are ignored.

    Args:
        path: Where its record is (:func:`work_file`, the default).

    Raises:
        FileSchemaError: a file that is there and cannot be trusted, naming it and why.
    """
    path = work_file(plan, prompt) if path is None else path
    if not path.is_file():
        return None
    data = outcome_schema.load(path)
    if data["key"] != plan.key:
        raise FileSchemaError(path, outcome_schema.KIND, f"written under other settings (key {data['key']}, "
                                                         f"this study's {plan.key})")
    if data["prompt"] != prompt.to_json():
        raise FileSchemaError(path, outcome_schema.KIND, f"written for another prompt than {prompt.id!r}")
    decode = data["decode"]
    return PromptOutcome(row=PromptRow.from_columns(data["row"]),
                         tokens=tuple(DraftedToken(**{k: t[k] for k in TOKEN_KEYS}) for t in data["tokens"]),
                         decode=(TrackedDecode(tuple(decode["entropy_bits"]), tuple(decode["word"]))
                                 if "entropy_bits" in decode else None))


def load_finished(plan: StudyPlan, prompt: StudyPrompt, path: Path | None = None) -> PromptOutcome | None:
    """:func:`read_finished` for a run that goes on: a file that cannot be trusted is named in
    a warning and ``None`` returned, so the prompt is redone (``--resume``)."""
    try:
        return read_finished(plan, prompt, path)
    except FileSchemaError as exc:
        logger.warning("ignoring %s; prompt %s will be redone", exc, prompt.id)
        return None


def read_runner_info(work_dir: Path) -> dict[str, Any]:
    """The runner's description of the models kept in ``runner.json``; ``{}`` when there is none, or
    (with a warning naming the file) when it is outside :data:`lab.study.work_schema.RUNNER_SCHEMA`."""
    path = work_dir / "runner.json"
    if not path.is_file():
        return {}
    try:
        return validate(read_json(path, RUNNER_KIND), RUNNER_SCHEMA, path=path, kind=RUNNER_KIND)
    except FileSchemaError as exc:
        logger.warning("ignoring %s; the report will lack the models' description", exc)
        return {}


def save_finished(plan: StudyPlan, prompt: StudyPrompt, outcome: PromptOutcome) -> Path:
    """Write a finished prompt's outcome atomically (:meth:`lab.runs.workdir.WorkDir.save`).

    Layout: ``{"key", "prompt", "row": PromptRow.as_columns(), "tokens": [TOKEN_KEYS of each
    drafted token], "decode": TrackedDecode.as_columns() or {}}``.
    """
    work_file(plan, prompt).parent.mkdir(exist_ok=True)
    return plan.work.save(prompt.id, {"key": plan.key, "prompt": prompt.to_json(), "row": outcome.row.as_columns(),
                                      "tokens": [{k: getattr(t, k) for k in TOKEN_KEYS} for t in outcome.tokens],
                                      "decode": outcome.decode.as_columns() if outcome.decode else {}})


def discard_work(plan: StudyPlan) -> None:
    """Remove the work directory (after the final report is in place)."""
    plan.work.discard()
