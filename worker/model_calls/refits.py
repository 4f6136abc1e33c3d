"""A server's "context too long" refusal: rebuild the request smaller once, then context overflow.

Our token counts are estimates (tiktoken's o200k: for agentq's prompts SmolLM2's own tokenizer
counted 24% more, issue 12), so a context filled to the budget can still be refused by the
server as longer than its window (`ContextTooLong`). The server refuses before generating, so
the refused attempt is recorded as a `model.call` event with outcome `context_too_long` and
charged nothing (`worker.model_calls.calls`). The request is then rebuilt from rows once, under a
smaller budget (`worker.memory.context.refit_budget`: scaled by what the server said of its window
and of the prompt, else `REFIT_SHARE`), which trims recalled memory and older turns (folded into the
summary) as any smaller budget does, and sent again. A second refusal, or a rebuild whose
never-trimmed layers no longer fit, raises `ContextOverflow`: the step, plan or synthesis
escalates `context_overflow`, as when our own count finds the context too long. Never a
provider error, and never retried as it was.

With `AGENTQ_TOKENIZER` set to `server` or `auto`, the server's own tokenizer counts the request
before it is first sent (`Fitted.check`), and a request it finds too long is rebuilt the same
way without being sent.

`Fitted` is the one place this happens, for every call built from working memory: model steps
and their tool-calling exchange (`worker.execution.tool_use`), structured answers (plans, replans,
fact extraction: `worker.model_calls.structured`) and the synthesis (`worker.phases.synthesis`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from models.errors import ContextOverflow, ContextTooLong
from models.settings import get_settings
from worker.memory.context import refit_budget
from worker.memory.working_memory import budget, request_for, schema_tokens
from worker.model_calls.calls import call_model, estimate_prompt_tokens
from worker.model_calls.prompts import Prompt
from worker.model_calls.providers import Completion, ModelRequest
from worker.model_calls.tokenizers import server_tokenizer

log = structlog.get_logger("agentq.worker")


@dataclass
class Fitted:
    """The request for `prompt` in run `run_id`, built from working memory, and rebuilt smaller
    at most once (`refitted`) after a server refused it as too long."""

    run_id: int
    prompt: Prompt
    request: ModelRequest
    refitted: bool = False
    checked: bool = False

    @classmethod
    def build(cls, run_id: int, prompt: Prompt) -> Fitted:
        """The request for `prompt` (`worker.memory.working_memory.request_for`); raises what
        it does."""
        return cls(run_id, prompt, request_for(run_id, prompt))

    def budget(self) -> int:
        """The prompt budget the request is held to now, in tokens."""
        return budget(self.prompt)

    def with_tail(self, tail: Sequence[dict[str, Any]] = ()) -> ModelRequest:
        """The request with `tail` (the later messages of an exchange: tool calls and their
        answers, a re-ask) after its own messages; those are counted again when it is sent."""
        if not tail:
            return self.request
        messages = [*self.request.messages, *tail]
        return replace(self.request, messages=messages, estimated_prompt_tokens=None)

    def call(
        self, tail: Sequence[dict[str, Any]] = (), *, step_id: int | None = None
    ) -> Completion:
        """`worker.model_calls.calls.call_model` for `with_tail(tail)`, charged to the run (and step
        `step_id`); refused as too long, the request is rebuilt (`refit`) and sent again with
        the same tail. Raises `ContextOverflow` for a second refusal, and what `call_model` and
        `refit` raise."""
        while True:
            try:
                self.check(tail)
                return call_model(self.run_id, self.with_tail(tail), step_id=step_id)
            except ContextTooLong as refused:
                self.refit(refused, tail)

    def check(self, tail: Sequence[dict[str, Any]] = ()) -> None:
        """Before the request is first sent: raise `ContextTooLong`, as the server would, when
        the server's own tokenizer (`worker.model_calls.tokenizers`, `AGENTQ_TOKENIZER`) counts more
        than the window less the answer; nothing when it is not asked or does not say. A rebuilt
        request is not checked again: its budget was measured in the server's tokens."""
        tokenizer = server_tokenizer()
        if tokenizer is None or self.refitted or self.checked:
            return
        self.checked = True
        sent = self.with_tail(tail)
        extras = [sent.json_schema] if sent.json_schema else []
        counted = tokenizer.count(sent.messages, [*extras, *sent.tools])
        window = get_settings().context_window_tokens
        if counted is not None and counted + sent.max_output_tokens > window:
            said = f"the server's tokenizer counts {counted} prompt tokens; the window is {window}"
            raise ContextTooLong(
                said, server_message=said, context_tokens=window, prompt_tokens=counted
            )

    def refit(self, refused: ContextTooLong, tail: Sequence[dict[str, Any]] = ()) -> None:
        """Rebuild the request under the smaller budget `refused` calls for (the refused request
        carried `tail` after it). Raises `ContextOverflow` when it was rebuilt already, when no
        room is left, or when its never-trimmed layers do not fit the smaller budget; and what
        `request_for` raises (its summary fold makes model calls)."""
        if self.refitted:
            raise ContextOverflow(
                f"{self.prompt.purpose}: the server refused the request as too long again, "
                f"after it was rebuilt under a budget of {self.budget()} tokens: "
                f"{refused.server_message}"
            ) from refused
        sent = self.with_tail(tail)
        sent_tokens = sent.estimated_prompt_tokens or estimate_prompt_tokens(sent)
        own = (self.request.estimated_prompt_tokens or sent_tokens) - schema_tokens(self.prompt)
        smaller = refit_budget(
            sent_tokens=sent_tokens,
            fixed_tokens=sent_tokens - own,
            output_tokens=self.request.max_output_tokens,
            safety_margin=get_settings().context_safety_margin,
            context_tokens=refused.context_tokens,
            prompt_tokens=refused.prompt_tokens,
        )
        log.info(
            "model.call.refit",
            run_id=self.run_id,
            purpose=self.prompt.purpose,
            sent_tokens=sent_tokens,
            budget=smaller,
            server_context_tokens=refused.context_tokens,
            server_prompt_tokens=refused.prompt_tokens,
        )
        self.prompt = replace(self.prompt, budget_tokens=smaller)
        self.request = request_for(self.run_id, self.prompt)
        self.refitted = True
