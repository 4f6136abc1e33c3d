"""The budget statements on the real Postgres: `RESERVE` guards with the rule `fits` states, and
`SETTLE` replaces what a call held with what it spent (DESIGN.md invariant 4), folding in the
server's token count of the prompt when it is given (`models.engine.token_calibrations`); a
step-data charge takes what fits both the run's budget and its user's total, and two charges racing
for the last room cannot both pass (`models.engine.storage`)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from models.db import session_scope
from models.engine import budgets, storage, token_calibrations
from models.errors import (
    CostBudgetSpent,
    NotFound,
    StepDataBudgetSpent,
    TokenBudgetSpent,
    UserStepDataSpent,
)
from models.tables import Run, TokenCalibration

LIMIT_TOKENS, LIMIT_COST = 1000, 0.5


def _run_with(make_run: Callable[..., int], *, tokens_used: int, cost_used: float) -> int:
    run_id = make_run(None, start=False)
    with session_scope() as session:
        session.execute(
            sa.update(Run)
            .where(Run.id == run_id)  # type: ignore[arg-type]
            .values(
                tokens_used=tokens_used,
                tokens_limit=LIMIT_TOKENS,
                cost_used_usd=cost_used,
                cost_limit_usd=LIMIT_COST,
            )
        )
    return run_id


def _spent(run_id: int) -> tuple[int, float]:
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.tokens_used, run.cost_used_usd


@pytest.mark.parametrize(
    ("used", "tokens", "cost_used", "cost"),
    [
        (900, 100, 0.0, 0.0),  # exactly the token limit: fits
        (900, 101, 0.0, 0.0),  # one token over
        (0, 0, 0.25, 0.25),  # exactly the cost limit
        (0, 0, 0.25, 0.2500001),  # just over it
        (1000, 0, 0.5, 0.0),  # nothing asked of a spent run
    ],
)
def test_reserve_takes_what_fits_and_refuses_the_rest_as_fits_says(
    make_run: Callable[..., int], used: int, tokens: int, cost_used: float, cost: float
) -> None:
    run_id = _run_with(make_run, tokens_used=used, cost_used=cost_used)
    allowed = budgets.fits(used, tokens, LIMIT_TOKENS) and budgets.fits(cost_used, cost, LIMIT_COST)
    try:
        with session_scope() as session:
            budgets.reserve(session, run_id, tokens=tokens, cost=cost)
    except (TokenBudgetSpent, CostBudgetSpent) as exc:
        assert not allowed, exc
        assert _spent(run_id) == (used, pytest.approx(cost_used))
    else:
        assert allowed
        assert _spent(run_id) == (used + tokens, pytest.approx(cost_used + cost))


def test_settle_replaces_the_hold_with_the_spend_and_never_goes_below_zero(
    make_run: Callable[..., int],
) -> None:
    run_id = _run_with(make_run, tokens_used=0, cost_used=0.0)
    with session_scope() as session:
        held = budgets.reserve(session, run_id, tokens=700, cost=0.3)
    with session_scope() as session:
        budgets.settle(session, held, tokens=250, cost=0.1, provider="openai")
    assert _spent(run_id) == (250, pytest.approx(0.1))
    with session_scope() as session:  # a stale hold larger than what is left: cost stays >= 0
        budgets.settle(session, budgets.Reservation(run_id, 0, 5.0), tokens=0, cost=0.0)
        provider = session.get(Run, run_id).provider  # type: ignore[union-attr]
    assert _spent(run_id)[1] == 0.0
    assert provider == "openai"  # settle without a provider leaves it as it was


def test_reserve_for_an_unknown_run_is_not_found(make_run: Callable[..., int]) -> None:
    with pytest.raises(NotFound), session_scope() as session:
        budgets.reserve(session, 10**9, tokens=1, cost=0.0)


def _calibration(model: str) -> TokenCalibration | None:
    with session_scope() as session:
        return session.get(TokenCalibration, model, populate_existing=True)


def test_settle_folds_the_servers_count_into_the_models_running_mean(
    make_run: Callable[..., int],
) -> None:
    """Issue 12, item 6: the settling statement also writes the calibration (no extra round
    trip), a running mean of the server's prompt tokens over ours."""
    model = f"smollm2-{uuid.uuid4().hex[:8]}"
    run_id = _run_with(make_run, tokens_used=0, cost_used=0.0)
    for ours, theirs in ((1000, 1240), (1000, 1100), (2000, 2000)):
        with session_scope() as session:
            held = budgets.reserve(session, run_id, tokens=100, cost=0.0)
        sample = token_calibrations.Sample.of(model, ours=ours, theirs=theirs)
        with session_scope() as session:
            budgets.settle(session, held, tokens=10, cost=0.0, calibration=sample)
    found = _calibration(model)
    assert found is not None and found.samples == 3
    assert found.ratio == pytest.approx((1.24 + 1.1 + 1.0) / 3)
    assert _spent(run_id)[0] == 30  # the settlement itself is unchanged
    with session_scope() as session:  # what the next context of this model is budgeted with
        token_calibrations.forget_calibrations()
        assert token_calibrations.ratio_of(session, model) == pytest.approx(found.ratio)


def test_a_refusals_sample_is_folded_in_alone_and_the_mean_forgets_slowly() -> None:
    model = f"vllm-{uuid.uuid4().hex[:8]}"
    window = token_calibrations.CALIBRATION_WINDOW_CALLS
    with session_scope() as session:
        for _ in range(window + 50):
            token_calibrations.record(session, token_calibrations.Sample(model, 1000, 1000))
        after = token_calibrations.record(session, token_calibrations.Sample(model, 1000, 2000))
    assert after == pytest.approx(1.0 + 1.0 / window)  # one of the newest `window`, not of 151
    assert _calibration(model).samples == window + 51  # type: ignore[union-attr]


def test_no_sample_takes_the_ratio_out_of_the_band() -> None:
    """Issue 31, item 6: random counts, Ollama's cached-prompt ones among them (a few tokens of
    ours' thousands), go through `Sample.of` and the fold; after each, the stored ratio is one a
    real tokenizer gives, and only the samples in the band were counted."""
    model, rng = f"ollama-{uuid.uuid4().hex[:8]}", random.Random(31)
    low, high = token_calibrations.CALIBRATION_RATIO_MIN, token_calibrations.CALIBRATION_RATIO_MAX
    taken = 0
    with session_scope() as session:
        for _ in range(300):
            ours = rng.randint(token_calibrations.CALIBRATION_MIN_TOKENS, 20_000)
            theirs = rng.choice([rng.randint(1, 10), rng.randint(1, 3 * ours)])
            sample = token_calibrations.Sample.of(model, ours=ours, theirs=theirs)
            if sample is None:
                continue
            taken += 1
            assert low <= token_calibrations.record(session, sample) <= high
    found = _calibration(model)
    assert found is not None and found.samples == taken and 0 < taken < 300


def test_a_ratio_stored_out_of_the_band_is_pulled_into_it_by_the_next_sample() -> None:
    """A ratio written before the band (an Ollama cached count folded in) or by hand."""
    model = f"ollama-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        session.add(TokenCalibration(model=model, ratio=0.002, samples=500))
    with session_scope() as session:
        after = token_calibrations.record(session, token_calibrations.Sample(model, 1000, 1100))
    assert after == token_calibrations.CALIBRATION_RATIO_MIN  # not 0.002 + 1.098 / 100


# -- step data (models.engine.storage): the run's budget and the user's total
# ----------------------------

RUN_BYTES, USER_BYTES = 1000, 1500


def _run_holding(make_run: Callable[..., int], *, run_bytes: int, user_bytes: int) -> int:
    """A run of a new user, holding `run_bytes` of its `RUN_BYTES` budget, whose user's runs hold
    `user_bytes`."""
    user = f"stores-{uuid.uuid4().hex[:8]}"
    run_id = make_run(None, start=False, user=user)
    with session_scope() as session:
        session.execute(
            sa.update(Run)
            .where(Run.id == run_id)  # type: ignore[arg-type]
            .values(step_data_bytes=run_bytes, step_data_limit_bytes=RUN_BYTES)
        )
        session.add(storage.UserStepData(user_id=user, bytes=user_bytes))
    return run_id


def _held(run_id: int) -> tuple[int, int]:
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.step_data_bytes, storage.user_bytes(session, run.user_id)


@pytest.mark.parametrize(
    ("run_bytes", "user_bytes", "asked", "user_max", "refused"),
    [
        (900, 900, 100, USER_BYTES, None),  # exactly the run's budget: fits
        (900, 900, 101, USER_BYTES, StepDataBudgetSpent),  # one byte over it
        (0, 1400, 100, USER_BYTES, None),  # exactly the user's total
        (0, 1401, 100, USER_BYTES, UserStepDataSpent),  # one byte over it
        (0, 10**9, 100, 0, None),  # the user's total off: counted, not capped
        (1000, 1000, 0, USER_BYTES, None),  # nothing asked of a full run
    ],
)
def test_a_step_data_charge_takes_what_fits_the_run_and_its_user(
    make_run: Callable[..., int],
    run_bytes: int,
    user_bytes: int,
    asked: int,
    user_max: int,
    refused: type[Exception] | None,
) -> None:
    run_id = _run_holding(make_run, run_bytes=run_bytes, user_bytes=user_bytes)
    charge = storage.Charge("the result of step 's'", asked, user_max)
    try:
        with session_scope() as session:
            storage.charge(session, run_id, charge)
    except (StepDataBudgetSpent, UserStepDataSpent) as exc:
        assert type(exc) is refused, exc
        assert _held(run_id) == (run_bytes, user_bytes)  # nothing charged
        setting = storage.RUN_SETTING if refused is StepDataBudgetSpent else storage.USER_SETTING
        assert f"{asked:,} bytes as JSON" in str(exc) and setting in str(exc)
    else:
        assert refused is None
        assert _held(run_id) == (run_bytes + asked, user_bytes + asked)


def test_two_charges_on_the_last_room_cannot_both_pass(make_run: Callable[..., int]) -> None:
    """The second charge waits for the first's lock and checks the budget again on the row the
    first committed (`models.engine.storage.charging`), rather than on the one it saw when it
    began."""
    run_id = _run_holding(make_run, run_bytes=0, user_bytes=0)
    charge = storage.Charge("the result of step 's'", 600, USER_BYTES)
    second: list[BaseException | None] = []

    def charge_again() -> None:
        try:
            with session_scope() as session:
                storage.charge(session, run_id, charge)
        except StepDataBudgetSpent as exc:
            second.append(exc)
        else:
            second.append(None)

    with session_scope() as session:
        storage.charge(session, run_id, charge)  # holds the run's row until it commits
        waiting = threading.Thread(target=charge_again)
        waiting.start()
        time.sleep(0.5)  # the second charge has begun, and waits for the lock
        assert waiting.is_alive()
    waiting.join(timeout=30)
    assert len(second) == 1 and isinstance(second[0], StepDataBudgetSpent)
    assert _held(run_id) == (600, 600)
