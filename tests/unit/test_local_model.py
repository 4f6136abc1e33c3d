"""A local model's settings (`ops.local_model`), its server's prompt-cache count
(`ops.llama_server`), and prompts that put their static part first
(`worker.model_calls.prompts`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

from models.settings import Settings
from models.tables import Step
from ops.llama_server import GEMMA3, LOCAL_MODELS, SMOLLM2, LlamaServer, LocalModel, server_argv
from ops.local_model import local_env
from worker.model_calls.prompts import REPLAN_NOTE, plan_prompt, planner_instructions, replan_prompt

TOOLS = [{"name": "live_rate", "description": "rate", "parameters": {}}]
LOG = """\
llama_perf_context_print: prompt eval time =     0.17 ms /   219 tokens (    0.00 ms per token)
INFO:     127.0.0.1:51522 - "POST /v1/chat/completions HTTP/1.1" 200 OK
Llama.generate: 212 prefix-match hit, remaining 7 prompt tokens to eval
llama_perf_context_print: prompt eval time =    71.22 ms /     7 tokens (   10.17 ms per token)
Llama.generate: 3138 prefix-match hit, remaining 690 prompt tokens to eval
llama_perf_context_print: prompt eval time =  7100.00 ms /   690 tokens (   10.29 ms per token)
"""


def test_the_local_settings_are_valid_settings_and_keep_the_timeout_ladder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("AGENTQ_")]:  # a test engine's ladder
        monkeypatch.delenv(name)
    for name, value in local_env("smollm2", "http://127.0.0.1:9/v1", model_timeout_s=100).items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.model == "smollm2" and settings.model_temperature == 0
    price = settings.model_prices_usd_per_mtok["smollm2"]
    assert (price.input, price.output) == (0, 0)
    timeout = settings.model_request_timeout_s * settings.model_max_attempts
    assert timeout < settings.step_time_limit_s < settings.soft_time_limit_s
    assert settings.soft_time_limit_s < settings.hard_time_limit_s


def test_the_server_counts_prompt_tokens_read_from_its_cache(tmp_path: Path) -> None:
    server = LlamaServer.__new__(LlamaServer)  # no process: only the log is read
    server.log_path = tmp_path / "llama.log"
    server.log_path.write_text(LOG)
    assert server.prompt_cache() == (212 + 3138, 219 + 7 + 690)


def test_a_missing_model_wheel_names_the_extra_to_install() -> None:
    missing = LocalModel("nope", "agentq-no-such-wheel", "x.gguf", "nothing", name="Nope")
    with pytest.raises(FileNotFoundError, match=r"pip install -e '\.\[nothing\]'"):
        missing.gguf()
    assert set(LOCAL_MODELS) == {"smollm2", "gemma3"}


def test_gemma_is_served_with_its_own_chat_format() -> None:
    # its GGUF has no chat template: without one the server falls back to Llama 2's markup
    argv = server_argv(GEMMA3, Path("g.gguf"), 8080, n_ctx=8192, threads=1)
    assert argv[argv.index("--chat_format") + 1] == "gemma"
    assert "gemma" in LlamaChatCompletionHandlerRegistry()._chat_handlers
    assert "--chat_format" not in server_argv(SMOLLM2, Path("s.gguf"), 8080, n_ctx=8192, threads=1)


def test_plan_and_replan_calls_open_with_the_same_static_system_message() -> None:
    failed = Step(run_id=1, name="rate", tool="live_rate", args={}, error="timed out")
    plan = plan_prompt("File my report", TOOLS)
    replan = replan_prompt("File my report", TOOLS, failed)
    assert plan.instructions == replan.instructions == planner_instructions(TOOLS)
    assert '"live_rate"' in plan.instructions and '"live_rate"' not in plan.task
    assert replan.task.startswith(REPLAN_NOTE)
    # a replan recalls memory by what went wrong, too
    assert replan.query == "File my report\nlive_rate: timed out" and plan.query == "File my report"
