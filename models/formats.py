"""Values as people read them, in the CLI and the web console alike: durations and ages
(`42s`, `3m`), moments in UTC, counts in a few characters (`1.2k`), JSON cut to a cell, and the
provider's label. Pure functions of their arguments (`age` reads the clock when not given one);
the Rich renderings are `ops.views`, the console's filters `api.ui.templating`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final

from models.tables import utcnow

CELL_MAX_CHARS: Final = 70  # characters of a value shown in a table cell
# Escalation detail keys shown in their own rows (or, for `replans`, from the run's row).
DETAIL_SHOWN_ELSEWHERE: Final = ("step", "error", "tool", "replans")


def short(value: Any, limit: int = CELL_MAX_CHARS) -> str:
    """Compact JSON (or text) cut to `limit` characters."""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def span(seconds: float) -> str:
    """A duration as a short age, e.g. `42s`, `3m`, `2h`, `5d` (whole units, rounded down)."""
    whole = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def age(since: datetime | None, until: datetime | None = None) -> str:
    """Time from `since` to `until` (default now) as a `span`; `-` when `since` is None."""
    if since is None:
        return "-"
    return span(((until or utcnow()) - since).total_seconds())


def utc(moment: datetime) -> str:
    """`moment` in UTC to the second, e.g. `2026-05-01 12:00:00 UTC`."""
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def compact(n: int) -> str:
    """An integer in at most 4-5 characters: `950`, `1.2k`, `200k`, `3.4M`."""
    for suffix, size in (("M", 1_000_000), ("k", 1_000)):
        if abs(n) >= size:
            scaled = n / size
            return f"{scaled:.1f}{suffix}" if abs(scaled) < 10 else f"{int(scaled)}{suffix}"
    return str(n)


def provider_label(provider: str) -> str:
    """The provider as shown to people; the offline one is always labelled as such."""
    return "offline (deterministic, no model)" if provider == "offline" else provider
