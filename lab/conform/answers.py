"""Reading a completions server's answer: every field a completion must carry is checked.

:func:`read_completion` turns one decoded JSON answer into a typed :class:`Completion`, or
raises one :class:`EngineError` line naming the URL and the answer's field that was
missing or wrong. Three shapes are read:

* llama-server's ``POST /completion``: ``content``, ``tokens`` (the ids, present when the
  request asked ``return_tokens``) and, when top logprobs were asked for (``n_probs``),
  ``completion_probabilities[]``, each ``{id, token, bytes, logprob, top_logprobs: [{id,
  token, bytes, logprob}]}``; the two lists of ids must agree.
* llama-server's ``POST /v1/completions``: ``choices[0].text`` and
  ``choices[0].logprobs.content[]`` in the same per-token shape (``to_json_oaicompat`` in
  ``tools/server/server-task.cpp``), present when ``n_probs`` / ``logprobs`` >= 1;
  ``logprobs`` is null otherwise.
* the OpenAI completions API's own ``choices[0].logprobs``: ``tokens`` (texts),
  ``token_logprobs``, ``top_logprobs`` (one ``{text: logprob}`` per token) and
  ``text_offset``; it gives no ids, so each text is mapped through a vocabulary
  ``{text: id}``, and a text outside it is an error.

Ids are preferred to texts wherever the answer has them (two tokens may share a text, and
llama-server cuts a piece at an invalid UTF-8 boundary); :attr:`Completion.id_field`
names the field they came from. Logprobs are natural logs; llama-server writes a
probability of 0 as float32's lowest value rather than -inf, which is read as it is.

Standard library only (:mod:`lab.conform.client` builds on it).

Shapes: T = tokens of one completion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from lab.safe_text import clipped, printable

# A log-probability computed as log(p) of a float32 softmax may exceed 0 by rounding; more than this is not one.
LOGPROB_SLACK = 1e-4
NATIVE_IDS = "tokens"
OPENAI_IDS = "choices[0].logprobs.content[].id"
LEGACY_IDS = "choices[0].logprobs.tokens (texts, mapped through the vocabulary)"


class EngineError(RuntimeError):
    """An engine's server could not be reached, or answered something a completion cannot be read from.

    The message is one line: the URL (with its path) and what was wrong.
    """


@dataclass(frozen=True)
class Candidate:
    """One of a step's most likely tokens, as the server reported it.

    Attributes:
        token_id: The token's id.
        text: Its text.
        logprob: Its log-probability under the raw logits (before sampling), nats.
    """

    token_id: int
    text: str
    logprob: float


@dataclass(frozen=True)
class Completion:
    """One completion's tokens as the server reported them.

    Attributes:
        token_ids: int ``[T]``, T >= 1, the tokens drawn.
        pieces: ``[T]``, each token's text.
        text: The completion's text as the server gave it.
        logprobs: ``[T]`` each drawn token's log-probability under the raw logits, nats; empty
            when none were asked for.
        top: ``[T]`` the most likely tokens at each step (at most the number asked for), most
            likely first; empty when none were asked for.
        id_field: The answer's field the ids were read from (:data:`NATIVE_IDS`,
            :data:`OPENAI_IDS` or :data:`LEGACY_IDS`).
    """

    token_ids: tuple[int, ...]
    pieces: tuple[str, ...]
    text: str
    logprobs: tuple[float, ...]
    top: tuple[tuple[Candidate, ...], ...]
    id_field: str


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object",
             type(None): "null"}
    return " or ".join(names.get(k, k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,)))


class _Reader:
    """Checks one answer's fields; each failure is one EngineError naming the field's path."""

    def __init__(self, where: str, vocabulary: Mapping[str, int] | None):
        self.where = where
        self.vocabulary = vocabulary

    def fail(self, what: str) -> EngineError:
        return EngineError(f"{self.where}: {printable(what)}")

    def check(self, value, kind: type | tuple[type, ...], path: str):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kind):
            raise self.fail(f"the answer's {path} is {clipped(value, 40)}, not {_kind_name(kind)}")
        return value

    def field(self, obj: dict, key: str, path: str):
        if key not in obj:
            raise self.fail(f"the answer has no {path}")
        return obj[key]

    def get(self, obj: dict, key: str, kind: type | tuple[type, ...], path: str):
        return self.check(self.field(obj, key, path), kind, path)

    def logprob(self, value, path: str) -> float:
        number = float(self.check(value, (int, float), path))
        if math.isnan(number) or number > LOGPROB_SLACK:
            raise self.fail(f"the answer's {path} is {number!r}, not a log-probability (<= 0)")
        return number

    def token_id(self, value, path: str) -> int:
        if self.check(value, int, path) < 0:
            raise self.fail(f"the answer's {path} is {value}, not a token id")
        return value

    def id_of(self, text: str, path: str) -> int:
        if self.vocabulary is None:
            raise self.fail(f"the answer gives token texts only ({path} = {clipped(text, 40)}) and no vocabulary "
                            "was given to map them to ids")
        if text not in self.vocabulary:
            raise self.fail(f"the answer's {path} = {clipped(text, 40)} is no token of the vocabulary")
        return self.vocabulary[text]

    # ------------------------------------------------------------------ the shapes

    def entries(self, entries: list, path: str, top_n: int) -> list[tuple]:
        """llama-server's per-token ``{id, token, logprob, top_logprobs}`` as (id, text, logprob, candidates)."""
        steps = []
        for t, entry in enumerate(entries):
            at = f"{path}[{t}]"
            entry = self.check(entry, dict, at)
            candidates = []
            for j, c in enumerate(self.get(entry, "top_logprobs", list, f"{at}.top_logprobs")):
                cat = f"{at}.top_logprobs[{j}]"
                c = self.check(c, dict, cat)
                candidates.append(Candidate(self.token_id(self.field(c, "id", f"{cat}.id"), f"{cat}.id"),
                                            self.get(c, "token", str, f"{cat}.token"),
                                            self.logprob(self.field(c, "logprob", f"{cat}.logprob"), f"{cat}.logprob")))
            if top_n and not candidates:
                raise self.fail(f"the answer's {at}.top_logprobs is empty")
            steps.append((self.token_id(self.field(entry, "id", f"{at}.id"), f"{at}.id"),
                          self.get(entry, "token", str, f"{at}.token"),
                          self.logprob(self.field(entry, "logprob", f"{at}.logprob"), f"{at}.logprob"),
                          tuple(candidates)))
        return steps

    def native(self, answer: dict, top_n: int) -> Completion:
        text = self.get(answer, "content", str, "content")
        tokens = self.get(answer, "tokens", list, "tokens (asked for with return_tokens)")
        ids = tuple(self.token_id(t, f"tokens[{i}]") for i, t in enumerate(tokens))
        if not ids:
            raise self.fail("the answer's tokens is empty (return_tokens not honoured?)")
        if top_n == 0:
            if len(ids) != 1:
                raise self.fail("an answer of several tokens without completion_probabilities has no pieces")
            return Completion(ids, (text,), text, (), (), NATIVE_IDS)
        entries = self.get(answer, "completion_probabilities", list, "completion_probabilities")
        steps = self.entries(entries, "completion_probabilities", top_n)
        if tuple(step[0] for step in steps) != ids:
            raise self.fail(f"tokens {list(ids)} and completion_probabilities[].id {[s[0] for s in steps]} disagree")
        return _completion(steps, text, NATIVE_IDS)

    def openai(self, answer: dict, top_n: int) -> Completion:
        choices = self.get(answer, "choices", list, "choices")
        if not choices:
            raise self.fail("the answer's choices is empty")
        choice = self.check(choices[0], dict, "choices[0]")
        text = self.get(choice, "text", str, "choices[0].text")
        logprobs = self.get(choice, "logprobs", (dict, type(None)), "choices[0].logprobs")
        if logprobs is None:
            raise self.fail("the answer's choices[0].logprobs is null: it carries no token ids (does the server "
                            "take logprobs / n_probs?)")
        if "content" in logprobs:
            entries = self.get(logprobs, "content", list, "choices[0].logprobs.content")
            return _completion(self.entries(entries, "choices[0].logprobs.content", top_n), text, OPENAI_IDS)
        if "tokens" in logprobs:
            return self.legacy(logprobs, text, top_n)
        raise self.fail("the answer's choices[0].logprobs has neither content (llama-server) nor tokens (OpenAI)")

    def legacy(self, logprobs: dict, text: str, top_n: int) -> Completion:
        path = "choices[0].logprobs"
        tokens = self.get(logprobs, "tokens", list, f"{path}.tokens")
        values = self.get(logprobs, "token_logprobs", list, f"{path}.token_logprobs")
        tops = self.get(logprobs, "top_logprobs", list, f"{path}.top_logprobs")
        if not len(tokens) == len(values) == len(tops):
            raise self.fail(f"the answer's {path}.tokens, token_logprobs and top_logprobs differ in length "
                            f"({len(tokens)}, {len(values)}, {len(tops)})")
        steps = []
        for t, (piece, value, top) in enumerate(zip(tokens, values, tops)):
            at = f"{path}.top_logprobs[{t}]"
            piece = self.check(piece, str, f"{path}.tokens[{t}]")
            top = self.check(top, dict, at)
            candidates = sorted((Candidate(self.id_of(c, at), c, self.logprob(lp, f"{at}[{clipped(c, 20)}]"))
                                 for c, lp in top.items()), key=lambda c: -c.logprob)
            if top_n and not candidates:
                raise self.fail(f"the answer's {at} is empty")
            steps.append((self.id_of(piece, f"{path}.tokens[{t}]"), piece,
                          self.logprob(value, f"{path}.token_logprobs[{t}]"), tuple(candidates)))
        return _completion(steps, text, LEGACY_IDS)


def _completion(steps: list[tuple], text: str, id_field: str) -> Completion:
    return Completion(tuple(s[0] for s in steps), tuple(s[1] for s in steps), text, tuple(s[2] for s in steps),
                      tuple(s[3] for s in steps), id_field)


def error_message(answer: dict, most: int = 200) -> str:
    """The message of an error answer (``{"error": {"message": ...}}`` or ``{"error": "..."}``), on one line, clipped.

    Examples:
        >>> error_message({"error": {"code": 500, "message": "model\\nnot loaded"}})
        'model not loaded'
    """
    error = answer.get("error")
    message = error.get("message", error) if isinstance(error, dict) else error
    return printable(" ".join(str(message).split())[:most])


def read_completion(answer, *, where: str, native: bool, top_n: int, max_tokens: int,
                    vocabulary: Mapping[str, int] | None = None) -> Completion:
    """One decoded JSON answer as a :class:`Completion` (module docstring).

    Args:
        answer: The decoded JSON.
        where: The URL with its path, for the error line.
        native: True for llama-server's ``/completion`` shape, False for ``/v1/completions``.
        top_n: Top logprobs the request asked for per token; 0 = none (only on ``/completion``:
            the ids then come from ``tokens`` alone).
        max_tokens: Tokens the request asked for; the answer must hold 1 to that many.
        vocabulary: ``{text: id}``, to map an answer that gives texts only.

    Returns:
        A :class:`Completion`.

    Raises:
        EngineError: an error answer, a field missing or of the wrong type, ids that disagree,
            a text outside the vocabulary, or no token or too many.

    Examples:
        >>> answer = {"choices": [{"text": "b", "logprobs": {"content": [
        ...     {"id": 1, "token": "b", "logprob": -0.2, "top_logprobs": [{"id": 1, "token": "b", "logprob": -0.2}]}]}}]}
        >>> read_completion(answer, where="http://h/v1/completions", native=False, top_n=1, max_tokens=1).token_ids
        (1,)
        >>> read_completion({"choices": [{"text": "b", "logprobs": None}]}, where="http://h/v1/completions",
        ...                 native=False, top_n=1, max_tokens=1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        lab.conform.answers.EngineError: http://h/v1/completions: the answer's choices[0].logprobs is null: ...
    """
    read = _Reader(where, vocabulary)
    if not isinstance(answer, dict):
        raise read.fail(f"answered a JSON {type(answer).__name__}, not an object")
    if "error" in answer:
        raise read.fail(f"answered an error: {error_message(answer)}")
    completion = read.native(answer, top_n) if native else read.openai(answer, top_n)
    if not 1 <= len(completion.token_ids) <= max_tokens:
        raise read.fail(f"asked for 1 to {max_tokens} tokens, the answer holds {len(completion.token_ids)}")
    return completion
