"""Token counts for any model (issue 12, item 6): the calibration's rule, the budget it divides,
and the model server's own tokenizer (llama.cpp's `POST /tokenize`, played by the fake server
over real HTTP) checking a request before it is first sent."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from models.engine import token_calibrations
from models.engine.token_calibrations import (
    CALIBRATION_MARGIN,
    CALIBRATION_MIN_TOKENS,
    CALIBRATION_RATIO_MAX,
    CALIBRATION_RATIO_MIN,
    Sample,
    factor,
)
from models.memory.tokens import REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE
from models.settings import get_settings
from ops.fake_provider import FakeOpenAI
from tests.unit.test_refits import PROMPT, Server, built
from worker.memory.working_memory import budget
from worker.model_calls import refits, tokenizers
from worker.model_calls.prompts import Prompt
from worker.model_calls.refits import Fitted
from worker.model_calls.tokenizers import ServerTokenizer

MESSAGES = [
    {"role": "system", "content": "You carry out one step."},
    {"role": "user", "content": "x" * 300},
]


def test_a_sample_needs_both_counts_and_a_prompt_long_enough_to_say_much() -> None:
    assert Sample.of("m", ours=1000, theirs=1240) == Sample("m", 1000, 1240)
    assert Sample.of("m", ours=1000, theirs=1240).params()["cal_ratio"] == 1.24  # type: ignore[union-attr]
    assert Sample.of("m", ours=None, theirs=1240) is None
    assert Sample.of("m", ours=1000, theirs=0) is None  # a server that reported no usage
    assert Sample.of("m", ours=CALIBRATION_MIN_TOKENS - 1, theirs=500) is None


@given(
    ours=st.integers(min_value=CALIBRATION_MIN_TOKENS, max_value=200_000),
    theirs=st.integers(min_value=1, max_value=600_000),
)
def test_a_sample_is_taken_exactly_when_its_ratio_is_in_the_band(ours: int, theirs: int) -> None:
    """Issue 31, item 6: a server's count far from ours (Ollama's cached prompt: 3 tokens of our
    1,277) is not a tokenizer's, and is never folded in."""
    sample = Sample.of("m", ours=ours, theirs=theirs)
    in_band = CALIBRATION_RATIO_MIN <= theirs / ours <= CALIBRATION_RATIO_MAX
    assert (sample is not None) == in_band
    if sample is not None:
        ratio = sample.params()["cal_ratio"]
        assert CALIBRATION_RATIO_MIN <= ratio <= CALIBRATION_RATIO_MAX


def test_the_band_holds_every_measured_tokenizer_and_refuses_a_cached_prompts_count() -> None:
    # the lowest and highest per-text ratios measured (ops.bench.tokenizer_ratios: Gemma 3)
    assert Sample.of("m", ours=1000, theirs=967) is not None
    assert Sample.of("m", ours=1000, theirs=1192) is not None
    assert Sample.of("ollama", ours=1277, theirs=3) is None
    assert Sample.of("m", ours=1000, theirs=2001) is None


def test_a_sample_made_directly_out_of_the_band_is_refused_naming_the_count() -> None:
    with pytest.raises(ValueError, match=r"theirs: 3 tokens against 1277 .* 0\.5 to 2\.0"):
        Sample("ollama", 1277, 3)
    with pytest.raises(ValueError, match="with ours over 0"):
        Sample("m", 0, 10)


def test_a_refused_sample_is_logged_once_per_model() -> None:
    token_calibrations.forget_calibrations()
    with capture_logs() as logs:
        for theirs in (3, 5, 9000):
            assert Sample.of("ollama-a", ours=1277, theirs=theirs) is None
        assert Sample.of("ollama-b", ours=1277, theirs=3) is None
        assert Sample.of("ollama-a", ours=1277, theirs=1300) is not None
    refused = [entry for entry in logs if entry["event"] == "token_calibration.refused"]
    assert [(e["model"], e["theirs"], e["log_level"]) for e in refused] == [
        ("ollama-a", 3, "warning"),
        ("ollama-b", 3, "warning"),
    ]
    assert refused[0]["allowed"] == [CALIBRATION_RATIO_MIN, CALIBRATION_RATIO_MAX]
    token_calibrations.forget_calibrations()  # and a process that forgets logs it again
    with capture_logs() as logs:
        Sample.of("ollama-a", ours=1277, theirs=3)
    assert [e["model"] for e in logs] == ["ollama-a"]


def test_the_factor_never_enlarges_the_budget_and_keeps_a_margin_over_the_mean() -> None:
    assert factor(None) == 1.0
    assert factor(0.5) == 1.0  # a server that counts fewer tokens: our estimate is the safe side
    assert factor(1.24) == pytest.approx(1.24 * (1 + CALIBRATION_MARGIN))
    # a ratio stored before the band (a count of something else) shrinks no budget past it
    assert factor(40.0) == pytest.approx(CALIBRATION_RATIO_MAX * (1 + CALIBRATION_MARGIN))


def test_the_budget_is_divided_by_the_factor_unless_a_refusal_measured_it() -> None:
    prompt = Prompt("step", "Do it.", "Now.", {})
    assert budget(prompt, 1.3) == int(budget(prompt) / 1.3)
    measured = Prompt("step", "Do it.", "Now.", {}, budget_tokens=1500)
    assert budget(measured, 1.3) == 1500


def test_the_servers_tokenizer_counts_the_whole_prompt_in_one_request(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.chars_per_token = 2.0
    counted = ServerTokenizer(fake_openai.url, sticky=True).count(MESSAGES, [])
    text = "\n".join(m["content"] for m in MESSAGES)
    overhead = REPLY_PRIMING_TOKENS + TOKENS_PER_MESSAGE * len(MESSAGES)
    assert counted == -(-len(text) // 2) + overhead
    (asked,) = fake_openai.received(path="/tokenize")
    assert asked.body == {"content": text}  # at the root, not under /v1
    assert fake_openai.received() == []  # and no chat request


def test_llama_cpp_pythons_count_is_used_when_llama_cpps_endpoint_is_missing(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.chars_per_token, fake_openai.tokenize_path = 2.0, "/extras/tokenize/count"
    tokenizer = ServerTokenizer(fake_openai.url, sticky=True)
    first, second = tokenizer.count(MESSAGES, []), tokenizer.count(MESSAGES, [])
    assert first == second and first is not None and first > 150
    paths = [r.path for r in fake_openai.requests]
    assert paths == ["/tokenize", "/extras/tokenize/count", "/extras/tokenize/count"]


@pytest.mark.parametrize("sticky", [True, False])
def test_a_server_with_no_tokenizer_is_asked_again_only_when_configured_to_be(
    fake_openai: FakeOpenAI, sticky: bool
) -> None:
    tokenizer = ServerTokenizer(fake_openai.url, sticky=sticky)  # chars_per_token None: 404
    assert tokenizer.count(MESSAGES, []) is None
    assert tokenizer.count(MESSAGES, []) is None
    assert len(fake_openai.received(path="/tokenize")) == (1 if sticky else 2)
    assert len(fake_openai.received(path="/extras/tokenize/count")) == (1 if sticky else 2)


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AGENTQ_CONTEXT_WINDOW_TOKENS", "4096")
    monkeypatch.setenv("AGENTQ_RESERVED_OUTPUT_TOKENS", "512")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def test_a_request_the_servers_tokenizer_finds_too_long_is_rebuilt_before_it_is_sent(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, small_window: None
) -> None:
    """A 2,000-token context (ours) that the server's tokenizer counts at 4,000 does not fit a
    4,096-token window with 1,024 tokens of answer: rebuilt under the budget those counts give,
    and only that request goes out."""
    server = Server(refusals=0)
    monkeypatch.setattr(refits, "request_for", lambda run_id, prompt: built(prompt))
    monkeypatch.setattr(refits, "call_model", server.call_model)
    monkeypatch.setattr(refits, "schema_tokens", lambda prompt: 0)
    tokenizer = ServerTokenizer(fake_openai.url, sticky=True)
    monkeypatch.setattr(refits, "server_tokenizer", lambda: tokenizer)
    fake_openai.chars_per_token = len("context of 2000 tokens") / 4000  # 4,000 tokens (theirs)
    fitted = Fitted.build(7, PROMPT)
    assert fitted.call().text == "done"
    (sent,) = server.sent
    assert fitted.refitted and sent.estimated_prompt_tokens == fitted.prompt.budget_tokens
    overhead = REPLY_PRIMING_TOKENS + TOKENS_PER_MESSAGE
    output = sent.max_output_tokens
    theirs = math.ceil(len("context of 2000 tokens") / fake_openai.chars_per_token) + overhead
    assert 4000 <= theirs - overhead <= 4001  # as the fake's tokenizer was set up
    ours = (4096 - output) * 2000 / theirs  # the window, in our tokens
    expected = int(ours * (1 - get_settings().context_safety_margin))
    assert fitted.prompt.budget_tokens == expected < 2000
    assert len(fake_openai.received(path="/tokenize")) == 1  # the rebuilt one is not asked again


def test_no_tokenizer_is_asked_with_the_default_setting_or_the_offline_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for env in ({}, {"AGENTQ_TOKENIZER": "server"}):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        tokenizers.server_tokenizer.cache_clear()
        assert tokenizers.server_tokenizer() is None  # offline, or tiktoken
    monkeypatch.setenv("AGENTQ_PROVIDER", "openai")
    monkeypatch.setenv("AGENTQ_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    get_settings.cache_clear()
    tokenizers.server_tokenizer.cache_clear()
    found = tokenizers.server_tokenizer()
    assert found is not None and found.root == "http://127.0.0.1:9" and not found.sticky
    monkeypatch.undo()
    get_settings.cache_clear()
    tokenizers.server_tokenizer.cache_clear()
