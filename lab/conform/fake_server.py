"""An in-process completions server over the fake engine: the whole client -> server -> law test path, no model.

:class:`FakeServer` answers ``POST /v1/completions`` (llama-server's shape, or the OpenAI
completions API's own with ``dialect="openai"``) and ``POST /completion`` (llama-server's)
from a :class:`~lab.conform.fake.FakeEngine` over a :class:`FakeModel`: a small fixed
vocabulary whose next-token logits depend on the prompt's last token (a bigram table), so
each prompt has one next-token law, known exactly. It honours what a request says the way
llama-server does: ``temperature`` (<= 0 greedy), ``top_k`` (<= 0 off), ``top_p``,
``min_p``, the ``seed`` (each request draws from ``numpy.random.default_rng(seed)``;
llama.cpp's 0xFFFFFFFF or no seed draws a fresh one), ``samplers`` (the order of the
four filters it models; a step left out is not run; llama.cpp's other sampler names are
taken and not modelled, so their settings are recorded, not applied),
``n_predict`` / ``max_tokens``, ``n_probs`` / ``logprobs`` (top tokens of the raw
logits' softmax, or of the chain's law with ``post_sampling_probs``) and
``return_tokens``; a field left out takes llama-server's default (:data:`LLAMA_DEFAULTS`),
so a client that forgets one is tested against the wrong law, as it would be against the
real server. With ``defect`` the engine plants one of :data:`~lab.conform.fake.DEFECTS`;
with a ``draft`` model every token is drafted and verified (the fake's ratio test).

Every request is recorded (:attr:`FakeServer.requests`, path and decoded body). For the
client's own tests a ``fault`` makes every answer one of the ways a server goes wrong
(:data:`FAULTS`): an HTML page, HTTP 500 with an error JSON, a body cut short of its
Content-Length, an answer without logprobs or ids, an answer that comes only after
``slow_s`` seconds, a token text outside the vocabulary.

The server binds 127.0.0.1 on a free port and lives inside its ``with`` block: leaving it
stops the serving thread and joins every request's thread (a slow answer wakes at once),
so no thread outlives it. Standard library (``http.server``) and numpy.
"""

from __future__ import annotations

import json
import math
import socketserver
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import numpy as np

from lab.conform.chains import LLAMA_CPP, STEPS, Chain, Settings, chain_probs
from lab.conform.fake import FakeEngine

# llama-server's defaults for a sampling field a request leaves out (tools/server/README.md).
LLAMA_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
# The sampler names llama.cpp's ``samplers`` takes (common/sampling.cpp); only STEPS are modelled.
LLAMA_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
                  "infill", "adaptive_p")
OFF = {"temperature": 1.0, "top_k": None, "top_p": 1.0, "min_p": 0.0}  # a step left out of ``samplers``
FAULTS = ("html", "http_500", "truncated", "no_logprobs", "slow", "foreign_token")
DIALECTS = ("llama.cpp", "openai")
RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a fresh seed per request
MAX_REQUEST_BYTES = 1 << 20  # a completion request is a prompt and some fields; more is refused
MAX_TOKENS = 256  # the longest fake completion (it has no end-of-text token)
LOWEST_LOGPROB = float(np.finfo(np.float32).min)  # what llama-server writes for log(0)
FOREIGN_TOKEN = "\u2047"  # the text the foreign_token fault answers with: in no fake vocabulary


class _BadRequest(ValueError):
    """A request the fake refuses with HTTP 400 and llama-server's error JSON."""


@dataclass(frozen=True, eq=False)
class FakeModel:
    """A next-token model over a fixed vocabulary: the logits after a prompt are its last token's row.

    Attributes:
        vocabulary: ``[V]`` distinct non-empty token texts, V >= 2 (a text prompt is split
            into them, longest first).
        logits: float32 ``[V, V]``: row i holds the next-token logits after token i; finite.
            Stored as a read-only copy.
        chain: The filter chain the engine claims and the reference decodes under.

    Raises:
        ValueError: a vocabulary or logits of the wrong shape, repeated or empty texts, a
            logit not finite.
    """

    vocabulary: tuple[str, ...]
    logits: np.ndarray
    chain: Chain = LLAMA_CPP

    def __post_init__(self) -> None:
        vocab = tuple(self.vocabulary)
        if len(vocab) < 2 or len(set(vocab)) != len(vocab) or not all(isinstance(t, str) and t for t in vocab):
            raise ValueError(f"vocabulary must hold >= 2 distinct non-empty texts, got {vocab!r}")
        x = np.array(self.logits, dtype=np.float32)
        if x.shape != (len(vocab), len(vocab)) or not np.isfinite(x).all():
            raise ValueError(f"logits must be finite [V, V] = [{len(vocab)}, {len(vocab)}], got shape {x.shape}")
        x.setflags(write=False)
        object.__setattr__(self, "vocabulary", vocab)
        object.__setattr__(self, "logits", x)

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def next_logits(self, prompt: Sequence[int]) -> np.ndarray:
        """float32 ``[V]`` next-token logits after ``prompt`` (token ids, at least one), a new array.

        Raises:
            ValueError: an empty prompt or an id outside [0, V).
        """
        if len(prompt) == 0:
            raise ValueError("prompt must hold at least one token")
        last = prompt[-1]
        if isinstance(last, bool) or not isinstance(last, (int, np.integer)) or not 0 <= last < self.vocab_size:
            raise ValueError(f"token id {last!r} is outside [0, {self.vocab_size})")
        return self.logits[int(last)].copy()

    def tokenize(self, text: str) -> tuple[int, ...]:
        """``text`` as token ids, the longest vocabulary text first at each position.

        Raises:
            ValueError: a part of ``text`` no token spells.

        Examples:
            >>> FakeModel(("a", "ab", "b"), np.zeros((3, 3))).tokenize("abab a")
            Traceback (most recent call last):
            ...
            ValueError: no token of the vocabulary spells ' a' (at character 4)
            >>> FakeModel(("a", "ab", "b"), np.zeros((3, 3))).tokenize("abba")
            (1, 2, 0)
        """
        by_length = sorted(range(self.vocab_size), key=lambda i: -len(self.vocabulary[i]))
        ids, at = [], 0
        while at < len(text):
            match = next((i for i in by_length if text.startswith(self.vocabulary[i], at)), None)
            if match is None:
                raise ValueError(f"no token of the vocabulary spells {text[at:at + 8]!r} (at character {at})")
            ids.append(match)
            at += len(self.vocabulary[match])
        return tuple(ids)


def _number(body: dict, name: str, default: float) -> float:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _BadRequest(f"{name} must be a finite number, got {value!r}")
    return value


def _count(body: dict, names: tuple[str, ...], default: int | None, most: int) -> int:
    for name in names:
        if name in body:
            value = body[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
                raise _BadRequest(f"{name} must be an integer in [0, {most}], got {value!r}")
            return value
    if default is None:
        raise _BadRequest(f"the fake needs {' or '.join(names)} (it has no end-of-text token)")
    return default


class FakeServer:
    """A completions server over :class:`FakeModel` and :class:`~lab.conform.fake.FakeEngine` (module docstring).

    Use as a context manager: ``with FakeServer(model) as server: EngineClient(server.url)``.

    Args:
        model: The target model; its ``chain`` is the engine's default order (a request's
            ``samplers`` overrides it).
        defect: One of :data:`~lab.conform.fake.DEFECTS`, or None for a correct engine.
        draft: A draft model of the same vocabulary: every token is drafted and verified.
        dialect: ``"llama.cpp"`` (``/v1/completions`` answers ``logprobs.content`` with ids)
            or ``"openai"`` (the OpenAI completions API's ``logprobs``: texts only).
        fault: One of :data:`FAULTS` (every answer goes wrong that way), or None.
        slow_s: How long the ``slow`` fault waits before answering, seconds.
        keep: How many recent requests :attr:`requests` keeps.

    Raises:
        ValueError: an unknown defect, dialect or fault; a draft of another vocabulary.
    """

    def __init__(self, model: FakeModel, *, defect: str | None = None, draft: FakeModel | None = None,
                 dialect: str = "llama.cpp", fault: str | None = None, slow_s: float = 10.0, keep: int = 1000):
        if dialect not in DIALECTS:
            raise ValueError(f"dialect={dialect!r} must be one of {DIALECTS}")
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault={fault!r} must be None or one of {FAULTS}")
        if draft is not None and draft.vocabulary != model.vocabulary:
            raise ValueError("draft must share the model's vocabulary")
        FakeEngine(model.chain, defect)  # validates the defect
        self.model, self.defect, self.draft = model, defect, draft
        self.dialect, self.fault, self.slow_s = dialect, fault, float(slow_s)
        self.requests: deque[tuple[str, dict]] = deque(maxlen=keep)
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, while the server runs."""
        if self._httpd is None:
            raise RuntimeError("the fake server runs only inside its with block")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeServer:
        self._stopping.clear()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-engine-server-{self._httpd.server_address[1]}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopping.set()  # a slow answer stops waiting
        self._httpd.shutdown()
        self._httpd.server_close()  # joins every request's thread (block_on_close, no daemon threads)
        self._thread.join()
        self._httpd, self._thread = None, None

    # ------------------------------------------------------------------ one request

    def _request(self, body: dict) -> tuple[tuple[int, ...], Chain, Settings, np.random.Generator]:
        """The prompt's ids, the chain and settings the request asks for, and its generator."""
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            try:
                ids = self.model.tokenize(prompt)
            except ValueError as exc:
                raise _BadRequest(str(exc)) from None
        elif isinstance(prompt, list) and prompt and all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.model.vocab_size for t in prompt):
            ids = tuple(prompt)
        else:
            raise _BadRequest(f"prompt must be a non-empty text or list of token ids in [0, {self.model.vocab_size})")
        temperature = max(0.0, float(_number(body, "temperature", LLAMA_DEFAULTS["temperature"])))
        top_k = int(_number(body, "top_k", LLAMA_DEFAULTS["top_k"]))
        try:
            settings = Settings(temperature, top_k if top_k > 0 else None,
                                min(1.0, float(_number(body, "top_p", LLAMA_DEFAULTS["top_p"]))),
                                max(0.0, float(_number(body, "min_p", LLAMA_DEFAULTS["min_p"]))))
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None
        chain = self.model.chain
        if "samplers" in body:
            chain, settings = self._samplers(body["samplers"], settings)
        seed = body.get("seed", RANDOM_SEED)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise _BadRequest(f"seed must be an integer >= 0, got {seed!r}")
        return ids, chain, settings, np.random.default_rng(None if seed == RANDOM_SEED else seed)

    def _samplers(self, names, settings: Settings) -> tuple[Chain, Settings]:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _BadRequest("samplers must be a list of sampler names (the fake takes no string form)")
        unknown = [n for n in names if n not in LLAMA_SAMPLERS]
        steps = [n for n in names if n in STEPS]
        if unknown or len(set(steps)) != len(steps):
            raise _BadRequest(f"samplers {names!r}: unknown {unknown!r} or a step named twice")
        missing = [step for step in STEPS if step not in steps]
        return (Chain(self.model.chain.engine, tuple(steps + missing)),
                replace(settings, **{step: OFF[step] for step in missing}))

    def _entry(self, logits: np.ndarray, law: np.ndarray | None, token: int, n_probs: int) -> dict:
        """llama-server's per-token ``{id, token, bytes, logprob, top_logprobs}`` (``prob``/``top_probs`` post sampling)."""
        if law is None:
            weights = np.exp(logits - logits.max())
            probs = weights / weights.sum()
        else:
            probs = law
        key, top_key = ("prob", "top_probs") if law is not None else ("logprob", "top_logprobs")

        def value(p: float) -> float:
            return float(p) if law is not None else (math.log(p) if p > 0 else LOWEST_LOGPROB)

        def one(i: int) -> dict:
            text = self.model.vocabulary[i]
            return {"id": int(i), "token": text, "bytes": list(text.encode()), key: value(probs[i])}

        order = np.argsort(-probs, kind="stable")[:n_probs]  # most likely first, ties by id
        return {**one(token), top_key: [one(int(i)) for i in order if law is None or probs[i] > 0]}

    def answer(self, path: str, body: dict) -> dict:
        """The JSON answer to a completion request at ``path`` (module docstring).

        Raises:
            _BadRequest: a request the fake refuses (HTTP 400).
        """
        ids, chain, settings, rng = self._request(body)
        n_predict = _count(body, ("n_predict", "max_tokens"), None, MAX_TOKENS)
        n_probs = _count(body, ("n_probs", "logprobs"), 0, self.model.vocab_size)
        # the OpenAI completions API has no post-sampling probabilities: that dialect reports the raw logits' softmax
        post = body.get("post_sampling_probs") is True and (path == "/completion" or self.dialect == "llama.cpp")
        engine = FakeEngine(chain, self.defect)
        tokens, entries = [], []
        for _ in range(n_predict):
            context = ids + tuple(tokens)
            logits = self.model.next_logits(context)
            draft = self.draft.next_logits(context) if self.draft is not None else None
            token = int(engine.sample(logits, settings, 1, rng, draft_logits=draft)[0])
            if n_probs:
                law = chain_probs(logits, *engine.effective(settings, draft=False)) if post else None
                entries.append(self._entry(logits.astype(np.float64), law, token, n_probs))
            tokens.append(token)
        return self._shape(path, body, ids, tokens, entries, n_probs)

    def _shape(self, path: str, body: dict, prompt: tuple[int, ...], tokens: list[int], entries: list[dict],
               n_probs: int) -> dict:
        pieces = [self.model.vocabulary[t] for t in tokens]
        no_logprobs = self.fault == "no_logprobs"
        if path == "/completion":
            answer = {"content": "".join(pieces), "tokens": tokens if body.get("return_tokens") and not no_logprobs
                      else [], "stop": True, "stop_type": "limit", "model": "fake", "tokens_predicted": len(tokens),
                      "tokens_evaluated": len(prompt)}
            if n_probs and not no_logprobs:
                answer["completion_probabilities"] = entries
            return answer
        if self.fault == "foreign_token":
            pieces = [FOREIGN_TOKEN] * len(tokens)
        if not n_probs or no_logprobs:
            logprobs = None
        elif self.dialect == "llama.cpp":
            logprobs = {"content": entries}
        else:
            offsets = np.cumsum([0] + [len(p) for p in pieces[:-1]]).tolist()
            logprobs = {"tokens": pieces, "token_logprobs": [e.get("logprob") for e in entries],
                        "top_logprobs": [{c["token"]: c["logprob"] for c in e["top_logprobs"]} for e in entries],
                        "text_offset": offsets}
        return {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": "fake",
                "choices": [{"text": "".join(pieces), "index": 0, "logprobs": logprobs, "finish_reason": "length"}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(tokens),
                          "total_tokens": len(prompt) + len(tokens)}}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins every request's thread: none outlives the with block
    block_on_close = True
    fake: FakeServer

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse lookup of the host name (``socket.getfqdn``), which may wait on DNS."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        """Quiet: the tests read :attr:`FakeServer.requests`."""

    def _send(self, status: int, payload: bytes, kind: str = "application/json", length: int | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload) if length is None else length))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): nothing to answer

    def _error(self, status: int, message: str, kind: str) -> None:
        self._send(status, json.dumps({"error": {"code": status, "message": message, "type": kind}}).encode())

    def do_GET(self) -> None:
        if urlsplit(self.path).path == "/health":
            self._send(200, b'{"status": "ok"}')
        else:
            self._error(404, "File Not Found", "not_found_error")

    def do_POST(self) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path
        length = self.headers.get("Content-Length", "")
        length = int(length) if length.isdigit() else 0
        if not 0 < length <= MAX_REQUEST_BYTES:
            return self._error(400, f"a request body of 1 to {MAX_REQUEST_BYTES} bytes is needed", "invalid_request_error")
        try:
            body = json.loads(self.rfile.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return self._error(400, "the request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return self._error(400, "the request body must be a JSON object", "invalid_request_error")
        fake.requests.append((path, body))
        if path not in ("/v1/completions", "/completion"):
            return self._error(404, "File Not Found", "not_found_error")
        if fake.fault == "html":
            return self._send(200, b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>", "text/html")
        if fake.fault == "http_500":
            return self._error(500, "the fake engine failed\nwhile decoding", "server_error")
        if fake.fault == "slow" and fake._stopping.wait(fake.slow_s):
            return None  # the server stopped while this answer waited: none is sent
        try:
            payload = json.dumps(fake.answer(path, body)).encode()
        except _BadRequest as exc:
            return self._error(400, str(exc), "invalid_request_error")
        if fake.fault == "truncated":
            return self._send(200, payload[: len(payload) // 2], length=len(payload))
        return self._send(200, payload)
