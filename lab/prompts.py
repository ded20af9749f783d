"""The study's prompt set: loading, validation and balanced selection.

A prompt file is JSONL, one object per line::

    {"id": "math-03", "category": "math", "messages": [{"role": "user", "content": "..."}]}
    {"id": "math-03-poisoned", "category": "math", "messages": [...],
     "twin_of": "math-03", "variant": "poisoned", "distractor": "click-1"}

Fields: ``id`` (unique, non-empty), ``category`` (one of :data:`CATEGORIES`),
``messages`` (chat messages with ``role`` in system/user/assistant and non-empty
``content``; the last one is from the user), and for the intervention set
``twin_of`` (the id of the clean prompt this one perturbs) with ``variant`` set to
``"poisoned"`` (a distractor added) or ``"neutral"`` (relevant, harmless text of the
poisoned twin's added length; :mod:`tools.datagen.make_study_twins`); a clean prompt has
at most one twin of each. ``variant`` defaults to ``"clean"``. ``distractor`` and ``note``
are free-text labels. Any other key is an error, so a typo such as ``twinof``
cannot silently drop a prompt from the intervention set.

The embedded set (:func:`default_prompts_path`): 66 clean prompts written for this
project, 11 per category; 18 poisoned twins (3 per category) whose user message is
the clean question after a text of the distractor sample (``distractors.jsonl``:
40-120 tokens of prose that ships with installed packages, a different text for each
twin); and beside each poisoned twin a neutral twin of the same added length
(standard-library docstring text, then the clean question). See
:mod:`tools.datagen.make_study_twins` (the builder, run from a checkout).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from lab.files import MAX_PROMPT_SET_BYTES, read_text
from lab.models.chat import build_messages
from lab.ranges import LIMIT, check_value

CATEGORIES = ("factual", "creative", "code", "math", "ambiguous", "summary")
VARIANTS = ("clean", "poisoned", "neutral")
TWIN_VARIANTS = ("poisoned", "neutral")  # variants that perturb a clean prompt (they need ``twin_of``)
_ROLES = ("system", "user", "assistant")
_REQUIRED = ("id", "category", "messages")
_OPTIONAL = ("twin_of", "variant", "distractor", "note")


@dataclass(frozen=True)
class CalibrationPrompt:
    """One prompt of a calibration set (``lab/data/calibration_prompts.jsonl``): a user message and an optional system prompt."""

    id: str
    prompt: str
    system: str | None = None

    def messages(self) -> list[dict[str, str]]:
        """The chat messages (``build_messages``: the system prompt first, when given)."""
        return build_messages(self.prompt, self.system)


@dataclass(frozen=True)
class StudyPrompt:
    """One prompt of the study.

    Attributes:
        id: Unique id, e.g. ``"math-03"``.
        category: One of :data:`CATEGORIES`.
        messages: Chat messages (``role``, ``content``), user last.
        variant: ``"clean"``, ``"poisoned"`` or ``"neutral"``.
        twin_of: For a poisoned or neutral prompt, the id of its clean twin; else ``None``.
        distractor: Label of the distractor text used (poisoned prompts), else ``None``.
        line: 1-based line in the file it came from (0 when built in code).
    """

    id: str
    category: str
    messages: tuple[dict[str, str], ...]
    variant: str = "clean"
    twin_of: str | None = None
    distractor: str | None = None
    line: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The prompt as a JSON-ready dict (the file format, without ``line``)."""
        out: dict[str, Any] = {"id": self.id, "category": self.category,
                               "messages": [dict(m) for m in self.messages], "variant": self.variant}
        if self.twin_of is not None:
            out["twin_of"] = self.twin_of
        if self.distractor is not None:
            out["distractor"] = self.distractor
        return out


def default_prompts_path() -> Path:
    """The prompt set shipped with the lab (``lab/data/prompts.jsonl``)."""
    return Path(str(resources.files("lab") / "data" / "prompts.jsonl"))


def _check_record(obj: Any, where: str) -> StudyPrompt:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; allowed: {list(_REQUIRED + _OPTIONAL)}")
    for key in _REQUIRED:
        if key not in obj:
            raise ValueError(f"{where}: missing field {key!r}")
    pid = obj["id"]
    if not isinstance(pid, str) or not pid.strip() or pid != pid.strip():
        raise ValueError(f"{where}: id={pid!r} must be a non-empty string without surrounding spaces")
    if any(c in pid for c in "/\\\0"):  # ids name work files on disk
        raise ValueError(f"{where}: id={pid!r} must not contain '/', '\\' or NUL")
    category = obj["category"]
    if category not in CATEGORIES:
        raise ValueError(f"{where}: category={category!r} is unknown; use one of {list(CATEGORIES)}")
    messages = obj["messages"]
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: messages={messages!r} must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise ValueError(f"{where}: messages[{i}]={m!r} must have exactly 'role' and 'content'")
        if m["role"] not in _ROLES:
            raise ValueError(f"{where}: messages[{i}] role={m['role']!r} is not one of {list(_ROLES)}")
        if not isinstance(m["content"], str) or not m["content"].strip():
            raise ValueError(f"{where}: messages[{i}] content={m['content']!r} is empty")
    if messages[-1]["role"] != "user":
        raise ValueError(f"{where}: the last message has role={messages[-1]['role']!r}; it must be 'user'")
    twin_of = obj.get("twin_of")
    variant = obj.get("variant", "poisoned" if twin_of is not None else "clean")
    if variant not in VARIANTS:
        raise ValueError(f"{where}: variant={variant!r} is unknown; use one of {list(VARIANTS)}")
    if (variant in TWIN_VARIANTS) != (twin_of is not None):
        raise ValueError(f"{where}: variant={variant!r} with twin_of={twin_of!r}; "
                         "a poisoned or neutral prompt needs twin_of and a clean one must not have it")
    if twin_of is not None and (not isinstance(twin_of, str) or not twin_of):
        raise ValueError(f"{where}: twin_of={twin_of!r} must be a prompt id")
    distractor = obj.get("distractor")
    if distractor is not None and not isinstance(distractor, str):
        raise ValueError(f"{where}: distractor={distractor!r} must be a string")
    return StudyPrompt(id=pid, category=category, messages=tuple(dict(m) for m in messages),
                       variant=variant, twin_of=twin_of, distractor=distractor)


def parse_prompts(lines: Sequence[str], source: str = "<prompts>") -> list[StudyPrompt]:
    """Parse and validate JSONL lines (see the module docstring for the format).

    Blank lines are skipped. Every check runs before any model work, and each error
    names the file and 1-based line.

    Args:
        lines: The file's lines.
        source: Name used in error messages (the file path).

    Returns:
        The prompts in file order.

    Raises:
        ValueError: malformed JSON, a missing or unknown field, an unknown category
            or variant, a duplicate id, a ``twin_of`` naming no prompt in the file,
            naming a twin or a prompt of another category, a second twin of one
            variant for a clean prompt, or no prompt
            at all.
    """
    prompts: list[StudyPrompt] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno}): {raw.strip()[:80]!r}") from exc
        except RecursionError:
            raise ValueError(f"{where}: malformed JSON (nested too deeply to read)") from None
        p = _check_record(obj, where)
        if p.id in seen:
            raise ValueError(f"{where}: duplicate id={p.id!r} (first on line {seen[p.id]})")
        seen[p.id] = lineno
        prompts.append(StudyPrompt(**{**p.__dict__, "line": lineno}))
    if not prompts:
        raise ValueError(f"{source}: holds no prompts")
    by_id = {p.id: p for p in prompts}
    twinned: dict[tuple[str, str], str] = {}
    for p in prompts:
        if p.twin_of is None:
            continue
        where = f"{source}:{p.line}"
        clean = by_id.get(p.twin_of)
        if clean is None:
            raise ValueError(f"{where}: twin_of={p.twin_of!r} names no prompt in the file")
        if clean.variant != "clean":
            raise ValueError(f"{where}: twin_of={p.twin_of!r} names a {clean.variant} prompt; it must name a clean one")
        if clean.category != p.category:
            raise ValueError(f"{where}: category={p.category!r} differs from its twin {clean.id!r} ({clean.category!r})")
        if (p.twin_of, p.variant) in twinned:
            raise ValueError(f"{where}: {p.twin_of!r} already has a {p.variant} twin "
                             f"({twinned[p.twin_of, p.variant]!r})")
        twinned[p.twin_of, p.variant] = p.id
    return prompts


def jsonl_lines(text: str) -> list[str]:
    r"""The lines of a JSON Lines (or one-record-a-line) text: split at ``"\n"`` only, a CRLF's ``"\r"`` dropped.

    JSON Lines ends a record at ``"\n"``; a raw U+2028, U+0085 or form feed inside a JSON string is
    valid and stays in its line (:meth:`str.splitlines` would cut the record there). Numbered from 1,
    the lines are the file's lines as an editor shows them.

    Examples:
        >>> jsonl_lines('{"a": "x\u2028y"}\r\n{"b": 1}\n')
        ['{"a": "x\u2028y"}', '{"b": 1}', '']
    """
    return [line.removesuffix("\r") for line in text.split("\n")]


def load_prompts(path: str | Path | None = None) -> list[StudyPrompt]:
    """Load and validate a prompt file (default: :func:`default_prompts_path`).

    Raises:
        ValueError: the file is refused (:func:`lab.files.read_text`: no such file, not a regular file,
            larger than :data:`lab.files.MAX_PROMPT_SET_BYTES`, not UTF-8) or fails validation (see
            :func:`parse_prompts`).
    """
    p = Path(path) if path is not None else default_prompts_path()
    text = read_text(p, MAX_PROMPT_SET_BYTES, f"prompts={str(p)!r}")
    return parse_prompts(jsonl_lines(text), source=str(p))


def select_prompts(prompts: Sequence[StudyPrompt], limit: int | None) -> list[StudyPrompt]:
    """Take at most ``limit`` prompts, balanced across categories, twins kept together.

    Each clean prompt and its twins (poisoned, neutral) form one unit; other prompts
    are units of one. Within a category, units alternate twin-pair, single, twin-pair,
    ... in file order, so a small selection still holds twin pairs (for H4) and
    singles. Units are then taken greedily: the category with the fewest prompts
    selected so far (ties in :data:`CATEGORIES` order) gives its next unit if it fits
    in the budget; a pair that does not fit yields to that category's next single.
    Selection stops when no category can add a unit. The result keeps file order.

    Args:
        prompts: Validated prompts (from :func:`load_prompts`).
        limit: Maximum number of prompts, or ``None`` for all.

    Returns:
        The selected prompts, in file order; every twin's clean prompt is in it.

    Raises:
        ValueError: ``limit`` is not a positive integer.
    """
    if limit is None:
        return list(prompts)
    check_value("limit", limit, LIMIT, "must be a positive integer")
    twins: dict[str, list[StudyPrompt]] = {}
    for p in prompts:
        if p.twin_of is not None:
            twins.setdefault(p.twin_of, []).append(p)
    queues: dict[str, list[list[StudyPrompt]]] = {}
    for cat in CATEGORIES:
        pairs = [[p, *twins[p.id]] for p in prompts if p.category == cat and p.id in twins]
        singles = [[p] for p in prompts if p.category == cat and p.variant == "clean" and p.id not in twins]
        order: list[list[StudyPrompt]] = []
        for i in range(max(len(pairs), len(singles))):
            order += pairs[i:i + 1] + singles[i:i + 1]
        queues[cat] = order
    counts = {cat: 0 for cat in CATEGORIES}
    chosen: set[str] = set()
    budget = limit
    while budget > 0:
        added = False
        for cat in sorted(CATEGORIES, key=lambda c: (counts[c], CATEGORIES.index(c))):
            queue = queues[cat]
            pick = next((u for u in queue if len(u) <= budget), None)
            if pick is None:
                continue
            queue.remove(pick)
            chosen.update(p.id for p in pick)
            counts[cat] += len(pick)
            budget -= len(pick)
            added = True
            break
        if not added:
            break
    return [p for p in prompts if p.id in chosen]
