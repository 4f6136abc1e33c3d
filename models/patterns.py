"""The patterns that names, keys and text of requests must match, each said in words.

A refusal says what is allowed, not the regular expression: a user who sent the fact key
`Bad Key` reads `must be a lower-case letter, then at most 99 lower-case letters, digits or
underscores (such as cost_centre)`, not `^[a-z][a-z0-9_]{0,99}$`. The API's 422 (`api.errors`),
the plan checks (`models.plans.plans`), a submit's fact check (`models.engine.runs`) and the
CLI's `--fact` (`ops.inputs`) all take the words from `WORDS`, so they say the same.

Standard library only, as `models.bounds`: `agentq --help` builds its options from these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

FACT_KEY_PATTERN: Final = r"^[a-z][a-z0-9_]{0,99}$"
# A step's name, which is also a result's name in `${steps.NAME...}` (and a model step's output
# field, `${steps.NAME.KEY}`: `models.plans.step_outputs`).
STEP_NAME_PATTERN: Final = r"^[a-z][a-z0-9_]{0,63}$"
# `[.]`, not `\.`: llama-cpp-python's schema-to-grammar converter (0.3.36) passes the escape on
# to a grammar its server cannot parse, and the server crashes (the planner's schema holds this).
KEY_PATH_PATTERN: Final = r"^[A-Za-z0-9_-]+([.][A-Za-z0-9_-]+)*$"
# A submit's Idempotency-Key (`models.engine.idempotency`): 1 to 255 visible ASCII characters
# (Stripe's length), so a header carries it as it is and it reads as itself in a log.
IDEMPOTENCY_KEY_PATTERN: Final = r"^[\x21-\x7e]{1,255}$"
# A schedule's name, unique per user (`models.schedules`): a word to type and to put in a URL.
SCHEDULE_NAME_PATTERN: Final = r"^[a-z0-9][a-z0-9_-]{0,63}$"
NO_NUL_PATTERN: Final = r"^[^\x00]*$"  # Postgres text cannot hold NUL; query strings can send it
# Some text that is not only whitespace (the server strips and refuses blank text), and no NUL.
NOT_BLANK_PATTERN: Final = r"^[^\x00]*[^\x00\s][^\x00]*$"

WORDS: Final[dict[str, str]] = {
    FACT_KEY_PATTERN: "must be a lower-case letter, then at most 99 lower-case letters, digits "
    "or underscores (such as cost_centre)",
    STEP_NAME_PATTERN: "must be a lower-case letter, then at most 63 lower-case letters, digits "
    "or underscores (such as receipts)",
    KEY_PATH_PATTERN: "must be keys of letters, digits, _ or -, joined by dots (such as total or "
    "receipt.total)",
    IDEMPOTENCY_KEY_PATTERN: "must be 1 to 255 visible ASCII characters, with no space",
    SCHEDULE_NAME_PATTERN: "must be a lower-case letter or digit, then at most 63 lower-case "
    "letters, digits, _ or - (such as daily-report)",
    NO_NUL_PATTERN: "must hold no NUL character",
    NOT_BLANK_PATTERN: "must hold a character other than whitespace, and no NUL character",
}
"""Each pattern, as the predicate a refusal says (`must be ...`)."""


def error_message(error: Mapping[str, Any]) -> str:
    """The message of pydantic's `error` (one of `ValidationError.errors()`), with a pattern of
    `WORDS` said in words (pydantic says `String should match pattern '^[a-z]...'`), and an
    object of several forms that lacks the field telling which (pydantic: `Unable to extract tag
    using discriminator 'scope'`) said so."""
    ctx = error.get("ctx") or {}
    pattern = ctx.get("pattern")
    if error.get("type") == "string_pattern_mismatch" and pattern in WORDS:
        return WORDS[pattern]
    if error.get("type") == "union_tag_not_found" and ctx.get("discriminator"):
        field = str(ctx["discriminator"]).strip("'")
        return f"{field}: required; it says which form of this object the other fields follow"
    return str(error["msg"])
