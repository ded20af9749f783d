"""The conformance client against the in-process fake server: fields sent, the checks through HTTP, hostile answers.

No real server, no model: :class:`lab.conform.fake_server.FakeServer` answers from the fake
engine over a six-token bigram model whose law after token 0 is (0.03, 0.45, 0.27, 0.14,
0.07, 0.04) and whose greedy path walks 0 -> 1 -> 2 -> ... Every request body carries
every sampling field (recorded by the server); a correct engine passes the sampling-law
check and planted defects (a) top-p across temperature and (b) top-k keeping k + 1 are
caught through HTTP, at the n samples_for_power prescribes for TV = 0.2 at alpha 0.01 / 3
with power 0.9 (107, 106 and 133 draws; fixed seeds); with a draft model on the server the
correct engine keeps the law and defects (c) and (d) are caught; the same seed gives the same text;
each hostile answer (an HTML page, HTTP 500 with an error JSON, a body cut short, no
logprobs, a foreign token, a refused connection, a server past the timeout) is one
EngineError line naming the URL and the problem; no server thread outlives its ``with``.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import subprocess
import sys
import threading
import urllib.request

import numpy as np
import pytest

from lab.conform import answers, checks, client as client_module, fake_server
from lab.conform.answers import EngineError, read_completion
from lab.conform.chains import LLAMA_CPP, TRANSFORMERS, Settings, chain_probs
from lab.conform.checks import greedy_check, sampling_law_check, seed_check
from lab.conform.client import IDENTITY_FIELDS, EngineClient, SameSeed, derive_seed, request_body
from lab.conform.fake_server import LLAMA_DEFAULTS, FakeModel, FakeServer

V = 6
BASE_PROBS = np.array([0.45, 0.27, 0.14, 0.07, 0.04, 0.03])
# Row i: the law after token i, its most likely token i + 1 (so greedy walks 0 -> 1 -> 2 ...).
LOGITS = np.stack([np.roll(np.log(BASE_PROBS), i + 1) for i in range(V)]).astype(np.float32)
MODEL = FakeModel(("a", "b", "c", "d", "e", "f"), LOGITS)
PROMPT = (0,)
TV = 0.2  # large, so that each setting needs about a hundred draws: the test stays quick
ALPHA = 0.01
SETTINGS = {
    "top-p": Settings(temperature=2.0, top_p=0.7),  # llama.cpp's raw nucleus keeps 2 tokens, the scaled one 3
    "top-k": Settings(top_k=2),
    "min-p": Settings(temperature=0.7, min_p=0.1),
    "greedy": Settings(temperature=0.0),  # untestable by a law test
}
PLANNED_N = [107, 106, 133]  # samples_for_power for the three sampled settings: the docstring states them
LOGPROB_TOL = 1e-5  # the fake reports float64 logprobs of float32 logits; the reference reads the same float32 row
TIMEOUT_S = 5.0


@pytest.fixture
def no_new_threads():
    """Every thread the test started is gone when it ends (the fake server's included)."""
    before = set(threading.enumerate())
    yield
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not left, f"threads left running: {left}"


def _client(server: FakeServer, **kwargs) -> EngineClient:
    return EngineClient(server.url, kwargs.pop("timeout_s", TIMEOUT_S), **kwargs)


# --------------------------------------------------------------------------- the request


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/completion"])
def test_request_body_carries_every_sampling_field_as_the_server_receives_it(endpoint, no_new_threads):
    """Fault class: a field left out takes llama-server's default (temperature 0.8, top-k 40, ...)."""
    settings = Settings(temperature=0.7, top_k=None, top_p=0.9, min_p=0.05)
    with FakeServer(MODEL) as server:
        _client(server, endpoint=endpoint).next_token_samples(PROMPT, settings, 3, seed=11)
        received = list(server.requests)
    assert [path for path, _ in received] == [endpoint] * 3
    for i, (_, body) in enumerate(received):
        assert {key: body[key] for key in IDENTITY_FIELDS} == IDENTITY_FIELDS
        assert (body["temperature"], body["top_k"], body["top_p"], body["min_p"]) == (0.7, 0, 0.9, 0.05)
        assert body["seed"] == derive_seed(11, i)
        assert body["samplers"] == ["top_k", "top_p", "min_p", "temperature"]
        assert (body["max_tokens"], body["n_predict"], body["cache_prompt"], body["post_sampling_probs"]) == (
            1, 1, True, False)
        assert body["prompt"] == [0] and body["stream"] is False
        assert body.get("return_tokens") is (True if endpoint == "/completion" else None)
        assert body["n_probs"] == (0 if endpoint == "/completion" else 1)  # /v1/completions: ids only with logprobs


def test_request_body_sends_samplers_only_for_llama_cpp_chain_in_its_order():
    body = request_body([1], Settings(), chain=TRANSFORMERS, seed=0, max_tokens=1, top_n=0)
    assert "samplers" not in body and body["top_k"] == 0
    assert request_body("hi", Settings(), chain=LLAMA_CPP, seed=0, max_tokens=1, top_n=0)["samplers"] == list(
        LLAMA_CPP.order)


def test_fake_server_fills_left_out_fields_with_llama_server_defaults():
    """The fake is as strict as llama-server: a request without the filters draws at temperature 0.8, top-k 40,
    top-p 0.95, min-p 0.05 (its post-sampling probabilities are that law)."""
    server = FakeServer(MODEL)
    answer = server.answer("/completion", {"prompt": [0], "n_predict": 1, "n_probs": V, "post_sampling_probs": True,
                                           "seed": 1})
    reported = {e["id"]: e["prob"] for e in answer["completion_probabilities"][0]["top_probs"]}
    law = chain_probs(LOGITS[0], LLAMA_CPP, Settings(**{**LLAMA_DEFAULTS, "top_k": 40}))
    assert reported == pytest.approx({i: p for i, p in enumerate(law) if p > 0})


def test_same_seed_sends_same_requests_and_draws_same_tokens(no_new_threads):
    with FakeServer(MODEL) as server:
        c = _client(server)
        first = c.next_token_samples(PROMPT, SETTINGS["min-p"], 40, seed=5)
        again = c.next_token_samples(PROMPT, SETTINGS["min-p"], 40, seed=5)
        other = c.next_token_samples(PROMPT, SETTINGS["min-p"], 40, seed=6)
    assert first == again and first.seeds != other.seeds and first.token_ids != other.token_ids
    assert first.id_field == answers.OPENAI_IDS and first.pieces == tuple(MODEL.vocabulary[t] for t in first.token_ids)


# --------------------------------------------------------------------------- the checks through HTTP


@pytest.mark.slow  # hundreds of HTTP draws through the fake server: 0.5-1.2 s each
@pytest.mark.parametrize("endpoint, dialect", [("/v1/completions", "llama.cpp"), ("/completion", "llama.cpp"),
                                               ("/v1/completions", "openai")])
def test_correct_engine_passes_sampling_law_check_at_planned_n(endpoint, dialect, no_new_threads):
    vocabulary = {text: i for i, text in enumerate(MODEL.vocabulary)} if dialect == "openai" else None
    with FakeServer(MODEL, dialect=dialect) as server:
        c = _client(server, endpoint=endpoint, vocabulary=vocabulary)
        result = sampling_law_check(c, MODEL, PROMPT, list(SETTINGS.values()), TV, ALPHA, seed=7)
        n_requests = len(server.requests)
    assert [s.plan.n for s in result.settings[:3]] == PLANNED_N and n_requests == sum(PLANNED_N)
    assert result.verdict == "supported" and result.family.passed, result
    assert [s.verdict for s in result.settings] == ["supported"] * 3 + ["untestable"]
    assert result.settings[3].untestable == checks.GREEDY_SETTING
    assert sum(c for _, c in result.settings[0].token_counts) == PLANNED_N[0]
    assert result.id_field == {"/completion": answers.NATIVE_IDS, "llama.cpp": answers.OPENAI_IDS,
                               "openai": answers.LEGACY_IDS}[endpoint if endpoint == "/completion" else dialect]


@pytest.mark.slow  # hundreds of HTTP draws through the fake server: 0.5-1.2 s each
@pytest.mark.parametrize("defect, exposed", [("top_p_before_temperature", "top-p"), ("top_k_plus_one", "top-k")])
def test_planted_defect_caught_through_http(defect, exposed, no_new_threads):
    """(a) top-p across the temperature keeps a third token at T = 2, top-p 0.7; (b) top-k 2 keeps three: each
    draws tokens the declared chain drops, and the exposing setting alone is rejected."""
    with FakeServer(MODEL, defect=defect) as server:
        result = sampling_law_check(_client(server), MODEL, PROMPT, list(SETTINGS.values()), TV, ALPHA, seed=7)
    verdicts = {name: s.verdict for name, s in zip(SETTINGS, result.settings)}
    assert result.verdict == "not supported"
    assert verdicts == {**{name: "supported" for name in SETTINGS}, exposed: "not supported", "greedy": "untestable"}
    assert result.settings[list(SETTINGS).index(exposed)].test.reason == "impossible token"


DRAFT = FakeModel(MODEL.vocabulary, np.stack([np.roll(np.log(BASE_PROBS[::-1]), i + 1) for i in range(V)]))


@pytest.mark.slow  # hundreds of HTTP draws through the fake server: 0.5-1.2 s each
@pytest.mark.parametrize("defect, verdict", [(None, "supported"), ("draft_ignores_temperature", "not supported"),
                                             ("accept_if_q_ge_p", "not supported")])
def test_draft_on_server_leaves_law_unchanged_and_draft_defects_are_caught(defect, verdict, no_new_threads):
    """Every token drafted by a model that disagrees with the target (TV 0.22 for (c) at T = 0.5, 0.95 for (d)):
    the correct ratio test keeps the target's law at the planned n = 98 (TV 0.2, alpha 0.01); (c) and (d) do not."""
    with FakeServer(MODEL, draft=DRAFT, defect=defect) as server:
        result = sampling_law_check(_client(server), MODEL, PROMPT, [Settings(temperature=0.5)], TV, ALPHA, seed=7)
    assert result.settings[0].plan.n == 98 and result.verdict == verdict, result


def test_greedy_check_through_http_passes_and_another_models_reference_fails(no_new_threads):
    """Negative control: the same tokens against a model whose rows are shifted are mismatches."""
    other = FakeModel(MODEL.vocabulary, np.roll(LOGITS, 1, axis=0))
    with FakeServer(MODEL) as server:
        c = _client(server)
        result = greedy_check(c, MODEL, PROMPT, 8, tie_tol=0.0, logprob_tol=LOGPROB_TOL)
        wrong = greedy_check(c, other, PROMPT, 8, tie_tol=0.0, logprob_tol=LOGPROB_TOL)
    assert result.token_ids == (1, 2, 3, 4, 5, 0, 1, 2) and result.verdict == "supported", result
    assert result.logprobs.max_abs_diff <= LOGPROB_TOL and result.id_field == answers.OPENAI_IDS
    assert wrong.verdict == "not supported" and wrong.greedy.first_mismatch == 0


def test_seed_check_same_seed_same_text_and_differing_runs_not_supported(no_new_threads):
    with FakeServer(MODEL) as server:
        result = seed_check(_client(server), "ab", Settings(temperature=1.3), seed=3, max_tokens=12)
        bodies = [body for _, body in server.requests]
    assert result.same and result.verdict == "supported" and len(result.first_ids) == 12
    assert [b["max_tokens"] for b in bodies] == [1, 12, 12] and len({b["seed"] for b in bodies}) == 1  # warm-up first

    class Flaky:  # negative control: a server whose two runs differ
        def same_seed(self, prompt, settings, seed, max_tokens):
            one = answers.Completion((1,), ("b",), "b", (-0.1,), (), answers.OPENAI_IDS)
            return SameSeed(seed, one, dataclasses.replace(one, token_ids=(2,), text="c"))

    assert seed_check(Flaky(), "ab", Settings(), 3, 1).verdict == "not supported"


def test_engine_token_outside_reference_vocabulary_is_engine_error(no_new_threads):
    """Fault class: a server running another model (a larger vocabulary) counted against a smaller reference."""
    small = FakeModel(MODEL.vocabulary[:4], LOGITS[:4, :4])
    with FakeServer(MODEL) as server, pytest.raises(EngineError, match=r"token id [45], outside the reference's "
                                                                        r"vocabulary \(V = 4\)"):
        sampling_law_check(_client(server), small, PROMPT, [Settings(temperature=1.5)], TV, ALPHA, seed=1)


def test_checks_bad_arguments_raise_naming_them():
    c = EngineClient("http://127.0.0.1:9", 1.0)
    with pytest.raises(ValueError, match="one chain is tested"):
        sampling_law_check(EngineClient("http://127.0.0.1:9", 1.0, chain=TRANSFORMERS), MODEL, PROMPT,
                           [Settings()], TV, ALPHA, 1)
    with pytest.raises(ValueError, match="must hold lab.conform.chains.Settings"):
        sampling_law_check(c, MODEL, PROMPT, [{"temperature": 1.0}], TV, ALPHA, 1)
    with pytest.raises(ValueError, match="each once"):
        sampling_law_check(c, MODEL, PROMPT, [Settings(), Settings()], TV, ALPHA, 1)
    with pytest.raises(ValueError, match="^prompt="):
        sampling_law_check(c, MODEL, "ab", [Settings()], TV, ALPHA, 1)
    with pytest.raises(ValueError, match=r"^tv=0.7 must be in \(0, 0.5\)"):
        sampling_law_check(c, MODEL, PROMPT, [Settings()], 0.7, ALPHA, 1)
    with pytest.raises(ValueError, match="^logprob_tol="):
        greedy_check(c, MODEL, PROMPT, 3, 0.0, -1.0)


# --------------------------------------------------------------------------- hostile answers


def _one_line(exc: EngineError, url: str) -> str:
    message = str(exc)
    assert "\n" not in message and message.startswith(url), message
    return message


@pytest.mark.parametrize("fault, endpoint, dialect, message", [
    ("html", "/v1/completions", "llama.cpp", r"answered an HTML page: '<!DOCTYPE html>"),
    ("http_500", "/v1/completions", "llama.cpp", r"answered HTTP 500 .*: the fake engine failed while decoding$"),
    ("truncated", "/completion", "llama.cpp", r"the answer was cut short: \d+ bytes of the \d+ announced"),
    ("no_logprobs", "/v1/completions", "llama.cpp", r"choices\[0\]\.logprobs is null"),
    ("no_logprobs", "/completion", "llama.cpp", r"the answer's tokens is empty \(return_tokens not honoured\?\)"),
    ("foreign_token", "/v1/completions", "openai", r"tokens\[0\] = '\u2047' is no token of the vocabulary"),
    (None, "/v1/completions", "openai", r"gives token texts only .* no vocabulary was given"),
])
def test_hostile_answer_is_one_engine_error_line_naming_it(fault, endpoint, dialect, message, no_new_threads):
    vocabulary = {text: i for i, text in enumerate(MODEL.vocabulary)} if fault == "foreign_token" else None
    with FakeServer(MODEL, fault=fault, dialect=dialect) as server:
        url = server.url + endpoint
        with pytest.raises(EngineError) as caught:
            _client(server, endpoint=endpoint, vocabulary=vocabulary).greedy(PROMPT, 2)
    assert re.search(message, _one_line(caught.value, url)), caught.value


def test_server_past_timeout_is_one_line_naming_url_and_timeout(no_new_threads):
    """The slow answer's thread wakes when the server stops: nothing is left waiting 10 s."""
    with FakeServer(MODEL, fault="slow", slow_s=10.0) as server:
        url = server.url + "/v1/completions"
        with pytest.raises(EngineError) as caught:
            _client(server, timeout_s=0.2).next_token_samples(PROMPT, Settings(), 1, seed=0)
    assert _one_line(caught.value, url).endswith("no answer within 0.2 s (timeout_s)")


def test_refused_connection_on_closed_port_is_one_line():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(EngineError) as caught:
        EngineClient(url, 1.0).greedy(PROMPT, 1)
    assert "connection refused" in _one_line(caught.value, url + "/v1/completions")


def test_refused_request_answers_http_400_with_the_servers_message(no_new_threads):
    with FakeServer(MODEL) as server, pytest.raises(EngineError, match=r"answered HTTP 400 Bad Request: prompt must"):
        _client(server).greedy([0, V], 1)


GOOD_ENTRY = {"id": 1, "token": "b", "logprob": -0.5, "top_logprobs": [{"id": 1, "token": "b", "logprob": -0.5}]}


@pytest.mark.parametrize("answer, native, message", [
    ([1, 2], False, "answered a JSON list, not an object"),
    ({"error": {"message": "slot\nunavailable"}}, False, "answered an error: slot unavailable"),
    ({}, False, "the answer has no choices"),
    ({"choices": []}, False, "choices is empty"),
    ({"choices": [{"text": "b"}]}, False, r"the answer has no choices\[0\]\.logprobs$"),
    ({"choices": [{"text": "b", "logprobs": {}}]}, False, "neither content .* nor tokens"),
    ({"choices": [{"text": "b", "logprobs": {"content": [{**GOOD_ENTRY, "id": True}]}}]}, False,
     r"content\[0\]\.id is True, not an integer"),
    ({"choices": [{"text": "b", "logprobs": {"content": [{**GOOD_ENTRY, "id": -1}]}}]}, False, "not a token id"),
    ({"choices": [{"text": "b", "logprobs": {"content": [{**GOOD_ENTRY, "logprob": 0.3}]}}]}, False,
     "not a log-probability"),
    ({"choices": [{"text": "b", "logprobs": {"content": [{**GOOD_ENTRY, "top_logprobs": []}]}}]}, False,
     r"top_logprobs is empty"),
    ({"choices": [{"text": "bb", "logprobs": {"content": [GOOD_ENTRY, GOOD_ENTRY]}}]}, False,
     "asked for 1 to 1 tokens, the answer holds 2"),
    ({"content": "b", "tokens": [2], "completion_probabilities": [GOOD_ENTRY]}, True, r"tokens \[2\] and .* disagree"),
    ({"content": "b"}, True, r"has no tokens \(asked for with return_tokens\)"),
    ({"choices": [{"text": "b", "logprobs": {"tokens": ["b"], "token_logprobs": [], "top_logprobs": []}}]}, False,
     "differ in length"),
])
def test_read_completion_malformed_answer_names_the_field(answer, native, message):
    with pytest.raises(EngineError, match=message) as caught:
        read_completion(answer, where="http://h:1/x", native=native, top_n=1, max_tokens=1,
                        vocabulary={"b": 1})
    assert str(caught.value).startswith("http://h:1/x: ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"url": "127.0.0.1:8080"}, "^url="), ({"url": "ftp://h"}, "^url="), ({"url": "http://h:1/v1"}, "without a path"),
    ({"timeout_s": 0}, "^timeout_s="),
    ({"timeout_s": float("inf")}, "^timeout_s="), ({"endpoint": "/v1/chat/completions"}, "^endpoint="),
])
def test_client_bad_arguments_raise_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EngineClient(**{"url": "http://127.0.0.1:9", "timeout_s": 1.0, **kwargs})


@pytest.mark.parametrize("call, message", [
    (lambda c: c.next_token_samples("", Settings(), 1, 0), "^prompt="),
    (lambda c: c.next_token_samples([0, -1], Settings(), 1, 0), "^prompt="),
    (lambda c: c.next_token_samples([0], Settings(), 0, 0), "^n=0"),
    (lambda c: c.next_token_samples([0], Settings(), 1, -1), "^seed=-1"),
    (lambda c: c.greedy([0], 0), "^max_tokens=0"),
])
def test_client_bad_request_raises_before_sending(call, message):
    with pytest.raises(ValueError, match=message):
        call(EngineClient("http://127.0.0.1:9", 1.0))  # nothing listens there: a request sent would be an EngineError


# --------------------------------------------------------------------------- the server's life, the modules


def test_fake_server_leaves_no_thread_and_refuses_after_its_block():
    before = set(threading.enumerate())
    with FakeServer(MODEL) as server:
        url = server.url
        with urllib.request.urlopen(url + "/health", timeout=TIMEOUT_S) as answer:
            assert answer.read() == b'{"status": "ok"}'
    assert set(threading.enumerate()) == before
    with pytest.raises(EngineError, match="connection refused"):
        EngineClient(url, 1.0).greedy(PROMPT, 1)
    with pytest.raises(RuntimeError, match="inside its with block"):
        server.url


def test_fake_model_and_server_bad_arguments_raise():
    with pytest.raises(ValueError, match="^vocabulary must"):
        FakeModel(("a", "a"), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="^logits must"):
        FakeModel(("a", "b"), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="^defect="):
        FakeServer(MODEL, defect="off_by_one")
    with pytest.raises(ValueError, match="^fault="):
        FakeServer(MODEL, fault="teapot")
    with pytest.raises(ValueError, match="outside"):
        MODEL.next_logits([V])


def test_results_are_frozen_dataclasses():
    for cls in (answers.Candidate, answers.Completion, client_module.Draws, client_module.SameSeed,
                checks.SettingLaw, checks.LawCheck, checks.GreedyResult, checks.SeedCheck, fake_server.FakeModel):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls.__name__


def test_conform_http_modules_import_no_torch_and_no_scipy():
    """The client, the fake server and the checks stay light at import, as the core does."""
    code = ("import sys, lab.conform.client, lab.conform.answers, lab.conform.fake_server, lab.conform.checks; "
            "print(sorted(m for m in ('torch', 'scipy', 'transformers', 'requests', 'httpx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
