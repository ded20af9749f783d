"""The HTTP side of ``lab conform``: next-token draws, greedy decodes and same-seed runs from an engine's server.

:class:`EngineClient` talks to an OpenAI-compatible completions server (``POST
/v1/completions``) or to llama.cpp's ``llama-server`` natively (``POST /completion``),
standard library only (``urllib.request`` and ``json``): one request per draw, the answer
read defensively (:mod:`lab.conform.answers`), every failure one
:class:`~lab.conform.answers.EngineError` line naming the URL and what was wrong.

**Every sampling field is sent.** llama-server fills each field a request leaves out
with its own defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty
as started), so a request that sent only the fields a setting changes would be tested
against the wrong law. :func:`request_body` sends the four filters of
:class:`~lab.conform.chains.Settings` (top-k off as llama.cpp's 0), the seed, and
llama.cpp's identity setting of every other sampler it has (:data:`IDENTITY_FIELDS`:
penalties, DRY, typical-p, XTC, top-n-sigma, mirostat, dynamic temperature, ``min_keep``
0, no logit bias, ``ignore_eos`` false so the end-of-text token keeps its mass). When the
declared chain is llama.cpp's it also sends ``samplers``, the chain's order as llama.cpp
takes it per request: a sampler not named there is not run at all, so the identity values
are a second guard (and the first on a build whose penalties sit outside the list).
``stop`` is sent empty, but llama-server falls back to the stop words it was started
with (``-r``) when a request's list is empty: start it without them.

**Token ids, not text.** A completion's text does not say which token was drawn, so the ids
are read (:mod:`lab.conform.answers`, which names the field in
:attr:`~lab.conform.answers.Completion.id_field`): on ``/completion`` from ``tokens``
(asked for with ``return_tokens``); on ``/v1/completions`` from llama-server's
``choices[0].logprobs.content[].id``, which is there only when ``n_probs`` / ``logprobs``
>= 1, so draws there ask for one top logprob; a server answering the OpenAI completions
API's own ``logprobs`` (texts only) needs the client's ``vocabulary`` to map them.

**Logprobs** are asked for before sampling (``post_sampling_probs`` false): llama-server
then reports the log-softmax of the raw logits over the whole vocabulary, natural log,
the quantity :func:`lab.conform.stats.logprob_check` compares (a probability of 0 comes
back as float32's lowest value, not -inf).

**One prefill, repeatable seeds.** ``cache_prompt`` is true, so the n requests of one
setting share the prompt's KV cache and each costs one decode step; the first request
computes the last position in a prefill batch and the others in a one-token batch, which
may differ in float rounding (llama-server's README says so). Each request gets its own
seed (:func:`derive_seed` of the caller's seed and the request's index, in [0, 2^31 - 1):
never llama.cpp's 0xFFFFFFFF, which means "random"), so a run with the same seed sends
the same requests. A one-token request is never drafted by a speculative server (its
token comes from the prompt's logits), whatever draft the server was started with.

Sources read (ggml-org/llama.cpp, as the search index stores them): ``tools/server/README.md``
(the ``/completion`` and ``/v1/completions`` fields, ``completion_probabilities``,
``post_sampling_probs``, ``samplers``, ``cache_prompt``, ``return_tokens``),
``tools/server/server-task.cpp`` (``params_from_json_cmpl``: each field's name and that
a missing one takes the server's default; ``logprobs`` read only when ``n_probs`` is not
given; ``to_json_oaicompat``: ``logprobs.content`` with ``id``),
``tools/server/server-context.cpp`` (``populate_token_probs``) and ``common/sampling.cpp``
(the sampler names ``samplers`` accepts); the OpenAI completions API's ``logprobs``
object (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``).

Shapes: T = tokens of one completion, n = draws.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.conform.answers import Completion, EngineError, error_message, read_completion
from lab.conform.chains import LLAMA_CPP, Chain, Settings
from lab.safe_text import clipped, printable

ENDPOINTS = ("/v1/completions", "/completion")
# One completion of a few tokens with their top logprobs is kilobytes; an answer past this is not one.
MAX_ANSWER_BYTES = 8 << 20
MAX_ERROR_CHARS = 200  # of a server's error message, in the one line
# Per-request seeds lie in [0, SEED_LIMIT): a signed 32-bit field holds them, and llama.cpp's
# LLAMA_DEFAULT_SEED (0xFFFFFFFF, "draw a random seed") is never among them.
SEED_LIMIT = 2**31 - 1
# Top logprobs per greedy step: the OpenAI completions API allows at most 5.
DEFAULT_TOP_N = 5
# llama.cpp's identity setting of every sampler the reference does not model (llama-server's
# field names; server-task.cpp, params_from_json_cmpl). Sent with every request.
IDENTITY_FIELDS: dict[str, Any] = {
    "repeat_penalty": 1.0, "repeat_last_n": 0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
    "dry_multiplier": 0.0, "typical_p": 1.0, "xtc_probability": 0.0, "top_n_sigma": -1.0,
    "mirostat": 0, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0, "min_keep": 0,
    "logit_bias": [], "ignore_eos": False, "grammar": "",
}


@dataclass(frozen=True)
class Draws:
    """n single next tokens drawn at one setting, one request each.

    Attributes:
        token_ids: int ``[n]``.
        pieces: ``[n]`` their texts.
        seeds: ``[n]`` the seed each request carried.
        id_field: The answer's field the ids were read from.
    """

    token_ids: tuple[int, ...]
    pieces: tuple[str, ...]
    seeds: tuple[int, ...]
    id_field: str


@dataclass(frozen=True)
class SameSeed:
    """Two completions of the same request, seed included.

    Attributes:
        seed: The seed both carried.
        first: The first answer.
        second: The second.
    """

    seed: int
    first: Completion
    second: Completion

    @property
    def same(self) -> bool:
        """Whether both drew the same tokens and gave the same text."""
        return self.first.token_ids == self.second.token_ids and self.first.text == self.second.text


def derive_seed(seed: int, *keys: int | str) -> int:
    """A seed in [0, :data:`SEED_LIMIT`) derived from ``seed`` and ``keys`` (SHA-256, so stable everywhere).

    Examples:
        >>> derive_seed(7, 0) == derive_seed(7, 0) != derive_seed(7, 1)
        True
        >>> 0 <= derive_seed(7, "greedy") < SEED_LIMIT
        True
    """
    digest = hashlib.sha256(":".join(str(part) for part in (seed, *keys)).encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_LIMIT


def _check_prompt(prompt) -> str | list[int]:
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("prompt='' must be a non-empty text or a non-empty sequence of token ids >= 0")
        return prompt
    if isinstance(prompt, Sequence) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        return [int(t) for t in prompt]
    raise ValueError(f"prompt={clipped(prompt)} must be a non-empty text or a non-empty sequence of token ids >= 0")


def _check_count(value, name: str, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (most is not None and value > most):
        raise ValueError(f"{name}={value!r} must be an integer in [1, {most if most is not None else 'inf'}]")
    return value


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an integer >= 0")
    return seed


def request_body(prompt, settings: Settings, *, chain: Chain, seed: int, max_tokens: int, top_n: int,
                 endpoint: str = "/v1/completions") -> dict[str, Any]:
    """The JSON body of one completion request, every sampling field explicit (module docstring).

    Args:
        prompt: Text (the server tokenizes it, adding BOS as the model's metadata says) or token
            ids (sent as they are: the caller adds BOS).
        settings: The four filters; ``top_k=None`` is sent as llama.cpp's 0 (off).
        chain: The engine's declared chain; llama.cpp's is also sent as ``samplers``.
        seed: The request's seed, in [0, :data:`SEED_LIMIT`).
        max_tokens: Tokens to generate (``max_tokens`` and llama.cpp's ``n_predict``).
        top_n: Top logprobs per token (``n_probs`` and OpenAI's ``logprobs``); 0 = none.
        endpoint: One of :data:`ENDPOINTS`; ``/completion`` also asks for ``return_tokens``.

    Returns:
        The body, a new dict.

    Raises:
        ValueError: a bad prompt, seed or count, or an unknown endpoint.

    Examples:
        >>> body = request_body([1, 2], Settings(temperature=0.7, top_k=None), chain=LLAMA_CPP, seed=3,
        ...                     max_tokens=1, top_n=1)
        >>> body["top_k"], body["samplers"], body["repeat_penalty"], body["cache_prompt"]
        (0, ['top_k', 'top_p', 'min_p', 'temperature'], 1.0, True)
    """
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint={endpoint!r} must be one of {ENDPOINTS}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed={seed!r} must be an integer in [0, {SEED_LIMIT})")
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        raise ValueError(f"top_n={top_n!r} must be an integer >= 0")
    body: dict[str, Any] = {
        "prompt": _check_prompt(prompt),
        "max_tokens": _check_count(max_tokens, "max_tokens"), "n_predict": max_tokens,
        "temperature": float(settings.temperature), "top_k": settings.top_k or 0,
        "top_p": float(settings.top_p), "min_p": float(settings.min_p), "seed": seed,
        "n_probs": top_n, "logprobs": top_n, "post_sampling_probs": False,
        "cache_prompt": True, "stream": False, "n": 1, "stop": [],  # no "echo": some llama-server builds refuse it
        **{key: list(value) if isinstance(value, list) else value for key, value in IDENTITY_FIELDS.items()},
    }
    if chain.engine == LLAMA_CPP.engine:
        body["samplers"] = list(chain.order)  # the chain's step names are llama.cpp's sampler names
    if endpoint == "/completion":
        body["return_tokens"] = True
    return body


class EngineClient:
    """A client of one engine's completions server (module docstring).

    Args:
        url: The server's base URL, ``http://host:port`` (a trailing ``/`` is dropped).
        timeout_s: Seconds each socket operation may wait (connect, each read), > 0.
        chain: The engine's declared chain (:data:`~lab.conform.chains.LLAMA_CPP` by default);
            llama.cpp's is sent as ``samplers``.
        endpoint: ``/v1/completions`` (OpenAI-compatible, the default) or ``/completion``
            (llama-server's own).
        vocabulary: ``{token text: id}`` of the model, to map an answer that gives only
            texts (the OpenAI completions API's own ``logprobs``) to ids; None = such an
            answer is an :class:`EngineError`.

    Raises:
        ValueError: a URL that is not ``http(s)://host[:port]``, a timeout not > 0 or not finite,
            an unknown endpoint.
    """

    def __init__(self, url: str, timeout_s: float = 60.0, *, chain: Chain = LLAMA_CPP,
                 endpoint: str = "/v1/completions", vocabulary: Mapping[str, int] | None = None):
        from urllib.parse import urlsplit

        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or (
                parts.path not in ("", "/")):
            raise ValueError(f"url={clipped(url)} must be http://host[:port], without a path (endpoint= names it)")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
                math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s={timeout_s!r} must be a finite number of seconds > 0")
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint={endpoint!r} must be one of {ENDPOINTS}")
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.chain = chain
        self.endpoint = endpoint
        self.vocabulary = dict(vocabulary) if vocabulary is not None else None

    def __repr__(self) -> str:
        return f"EngineClient({self.url + self.endpoint!r}, timeout_s={self.timeout_s}, chain={self.chain.engine!r})"

    # ------------------------------------------------------------------ the three requests

    def next_token_samples(self, prompt, settings: Settings, n: int, seed: int) -> Draws:
        """Draw the next token after ``prompt`` ``n`` times, one request of ``max_tokens=1`` each.

        Request i carries the seed ``derive_seed(seed, i)``, so the same call sends the same
        requests; ``cache_prompt`` makes them cost one prefill.

        Args:
            prompt: Text or token ids (:func:`request_body`).
            settings: The sampling setting.
            n: Draws, in [1, 10,000,000].
            seed: Any integer >= 0.

        Returns:
            :class:`Draws`, in request order.

        Raises:
            ValueError: a bad prompt, ``n`` or ``seed``.
            EngineError: the server cannot be reached, or an answer is not one token of a completion.
        """
        _check_count(n, "n", 10_000_000)
        _check_seed(seed)
        seeds = tuple(derive_seed(seed, i) for i in range(n))
        top_n = 0 if self.endpoint == "/completion" else 1  # /v1/completions reports ids only beside logprobs
        ids, pieces, field = [], [], ""
        for request_seed in seeds:
            answer = self._complete(prompt, settings, request_seed, max_tokens=1, top_n=top_n)  # one token: checked
            ids.append(answer.token_ids[0])
            pieces.append(answer.pieces[0])
            field = answer.id_field
        return Draws(tuple(ids), tuple(pieces), seeds, field)

    def greedy(self, prompt, max_tokens: int, top_n: int = DEFAULT_TOP_N) -> Completion:
        """A greedy completion (temperature 0, every other filter off) with each step's top logprobs.

        Args:
            prompt: Text or token ids.
            max_tokens: Tokens to generate, >= 1 (the server may stop earlier at end of text).
            top_n: Most likely tokens reported per step, >= 1.

        Returns:
            A :class:`Completion` with ``logprobs`` and ``top`` of T <= ``max_tokens`` steps.

        Raises:
            ValueError: a bad prompt or count.
            EngineError: as :meth:`next_token_samples`, or a step without its logprobs.
        """
        _check_count(top_n, "top_n")
        return self._complete(prompt, Settings(temperature=0.0), 0, max_tokens=max_tokens, top_n=top_n)

    def same_seed(self, prompt, settings: Settings, seed: int, max_tokens: int) -> SameSeed:
        """The same request twice, seed included; a one-token request before them fills the prompt cache.

        Both runs then start from the cached prompt, as every request but the first of a
        warm server does: a first run that prefilled while the second reused the cache could
        differ at a near-tie by float rounding alone (module docstring), which is not what
        this check asks.

        Args:
            prompt: Text or token ids.
            settings: The sampling setting.
            seed: Any integer >= 0; the requests carry ``derive_seed(seed, "same-seed")``.
            max_tokens: Tokens per run, >= 1.

        Returns:
            :class:`SameSeed`.

        Raises:
            ValueError: a bad prompt, seed or count.
            EngineError: as :meth:`next_token_samples`.
        """
        request_seed = derive_seed(_check_seed(seed), "same-seed")
        self._complete(prompt, settings, request_seed, max_tokens=1, top_n=1)
        first = self._complete(prompt, settings, request_seed, max_tokens=max_tokens, top_n=1)
        second = self._complete(prompt, settings, request_seed, max_tokens=max_tokens, top_n=1)
        return SameSeed(request_seed, first, second)

    # ------------------------------------------------------------------ one request

    def _complete(self, prompt, settings: Settings, seed: int, *, max_tokens: int, top_n: int) -> Completion:
        body = request_body(prompt, settings, chain=self.chain, seed=seed, max_tokens=max_tokens, top_n=top_n,
                            endpoint=self.endpoint)
        return read_completion(self._post(body), where=self.url + self.endpoint, native=self.endpoint == "/completion",
                               top_n=top_n, max_tokens=max_tokens, vocabulary=self.vocabulary)

    # ------------------------------------------------------------------ HTTP

    def _post(self, body: dict):
        """POST ``body`` as JSON; the decoded answer. Every failure is one EngineError line."""
        url = self.url + self.endpoint
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        waited = f"no answer within {self.timeout_s:g} s (timeout_s)"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = _read_body(response, url)
                kind = response.headers.get_content_type()
        except urllib.error.HTTPError as exc:  # before URLError: it is one
            raise EngineError(f"{url}: answered HTTP {exc.code} {exc.reason}: {_error_text(exc)}") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise EngineError(f"{url}: {waited}") from exc
            if isinstance(exc.reason, ConnectionRefusedError):
                raise EngineError(f"{url}: connection refused (is the server running on that port?)") from exc
            raise EngineError(f"{url}: cannot connect: {printable(str(exc.reason))}") from exc
        except (TimeoutError, socket.timeout) as exc:
            raise EngineError(f"{url}: {waited}") from exc
        except http.client.IncompleteRead as exc:
            raise EngineError(f"{url}: the answer was cut short: {len(exc.partial)} bytes of the "
                              f"{len(exc.partial) + (exc.expected or 0)} announced") from exc
        except (http.client.HTTPException, ConnectionError) as exc:
            raise EngineError(f"{url}: the connection broke before a whole answer came "
                              f"({type(exc).__name__})") from exc
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            shown = clipped(raw[:60].decode("utf-8", "replace"), 60)
            what = "an HTML page" if kind == "text/html" else f"{kind} that is not JSON"
            raise EngineError(f"{url}: answered {what}: {printable(shown)}") from None


def _read_body(response, url: str) -> bytes:
    """The answer's body, at most MAX_ANSWER_BYTES; a body shorter than its Content-Length raises IncompleteRead."""
    announced = response.length
    if announced is not None and announced > MAX_ANSWER_BYTES:
        raise EngineError(f"{url}: the answer announces {announced:,} bytes, more than {MAX_ANSWER_BYTES:,}")
    if announced is not None:
        return response.read()  # http.client checks the length
    raw = response.read(MAX_ANSWER_BYTES + 1)
    if len(raw) > MAX_ANSWER_BYTES:
        raise EngineError(f"{url}: the answer is longer than {MAX_ANSWER_BYTES:,} bytes")
    return raw


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(MAX_ERROR_CHARS * 8)
    except (OSError, ValueError, AttributeError, http.client.HTTPException):  # no body, or one already closed
        return "(no body)"
    try:
        answer = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return printable(" ".join(raw.decode("utf-8", "replace").split())[:MAX_ERROR_CHARS]) or "(no body)"
    return error_message(answer, MAX_ERROR_CHARS) if isinstance(answer, dict) and "error" in answer else clipped(answer, MAX_ERROR_CHARS)
