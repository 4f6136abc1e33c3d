"""A server's "context too long" refusal: the request is rebuilt smaller once, the exchange after
it kept, and a second refusal is a context overflow (no database here: the request builder and
the model call are stand-ins; the engine's side is in tests/integration/test_model_faults.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from models.errors import ContextTooLong
from worker.memory.context import REFIT_SHARE, ContextOverflow
from worker.model_calls import refits
from worker.model_calls.prompts import Prompt
from worker.model_calls.providers import Completion, ModelRequest
from worker.model_calls.refits import Fitted

PROMPT = Prompt("step", "You carry out one step.", "Do it.", {})
FIRST_BUDGET = 2000
EXCHANGE = [{"role": "assistant", "content": "a tool call"}, {"role": "tool", "content": "42"}]


def built(prompt: Prompt) -> ModelRequest:
    """A request whose context fills its budget: the rebuilt one says which budget it had."""
    tokens = prompt.budget_tokens or FIRST_BUDGET
    messages = [{"role": "user", "content": f"context of {tokens} tokens"}]
    return ModelRequest("step", messages, {}, estimated_prompt_tokens=tokens)


@dataclass
class Server:
    """What `call_model` got (`sent`); it refuses the first `refusals` requests as too long."""

    refusals: int = 1
    sent: list[ModelRequest] = field(default_factory=list)

    def call_model(self, run_id: int, request: ModelRequest, *, step_id: int | None = None) -> Any:
        self.sent.append(request)
        if len(self.sent) <= self.refusals:
            raise ContextTooLong("refused", server_message="too long")
        return Completion("done", "m", 10, 2, "stop", offline=False)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Server:
    fake = Server()
    monkeypatch.setattr(refits, "request_for", lambda run_id, prompt: built(prompt))
    monkeypatch.setattr(refits, "call_model", fake.call_model)
    monkeypatch.setattr(refits, "schema_tokens", lambda prompt: 0)
    return fake


def test_a_refused_request_is_rebuilt_smaller_once_and_sent_again(server: Server) -> None:
    fitted = Fitted.build(7, PROMPT)
    assert fitted.call().text == "done"
    first, second = server.sent
    smaller = int(FIRST_BUDGET * REFIT_SHARE)
    assert fitted.prompt.budget_tokens == smaller == fitted.budget()
    assert second.messages[0]["content"] == f"context of {smaller} tokens"
    assert (first.estimated_prompt_tokens, second.estimated_prompt_tokens) == (2000, smaller)
    assert fitted.refitted


def test_the_exchange_after_a_refused_request_is_kept_after_the_rebuilt_one(
    server: Server,
) -> None:
    fitted = Fitted.build(7, PROMPT)
    fitted.call(EXCHANGE)
    first, second = server.sent
    assert first.messages[1:] == second.messages[1:] == EXCHANGE
    assert second.messages[0]["content"] != first.messages[0]["content"]
    assert second.estimated_prompt_tokens is None  # counted again when it is reserved
    # the exchange is not part of what a rebuild can trim: the request's own context shrank
    assert fitted.budget() == int(FIRST_BUDGET * REFIT_SHARE)


def test_a_second_refusal_is_a_context_overflow(server: Server) -> None:
    server.refusals = 2
    fitted = Fitted.build(7, PROMPT)
    with pytest.raises(ContextOverflow, match="refused the request as too long again") as caught:
        fitted.call()
    assert isinstance(caught.value.__cause__, ContextTooLong)
    assert len(server.sent) == 2  # refused, rebuilt, refused: never a third request
