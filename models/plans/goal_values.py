"""Values a goal states exactly (amounts, currencies, dates, identifiers), found by plain rules.

A goal such as "Submit 473.43 EUR to CC-4410 for 2026-10-14" states values that must reach every
step unchanged. `extract` finds them with the rules below (regular expressions, no model), and
`pins` turns them into pinned facts at submission when the submitter asks for it
(`models.engine.submissions.RunRequest.pin_from_goal`; issue 12, item 4). The rules, in order; text
a rule took is not read again by a later one:

| key | found in (the goal's words) | value pinned |
|---|---|---|
| `amount`, `currency` | `473.43 EUR`, `EUR 473.43`, `€12.50`, `12,50 €`, `$1,234.50` | `12.50` |
| `date` | an ISO date that is a real day, `2026-10-14` | `2026-10-14` |
| `month` | an ISO month, `2026-10` | `2026-10` |
| `currency` | a code of `CURRENCY_CODES` alone (`in EUR`) | `EUR` |
| `cost_centre`, ... | an identifier: by prefix (`IDENTIFIER_KEYS`), else `id` | `CC-4410` |

(`€12.50` pins `amount = 12.50` and `currency = EUR`; `$1,234.50`, `1234.50` and `USD`.)

A number takes a dot for its decimals and may group thousands with commas (`1,234.50`); a comma
with one or two digits after it is a decimal comma (`12,50`). Currency symbols are read as
`CURRENCY_SYMBOLS` says (`$` is USD). Only codes of `CURRENCY_CODES` count, so the capitals of
an acronym (`API`, `CEO`) are no currency; codes that are English words (`ALL`, `TOP`, `CUP`)
are left out. A value is never read out of a longer word (`lisbon-2026-10` holds no month).

The same value found twice is one value. A key found with one value is pinned under it; found
with several different values (`514.60 USD ... in EUR`), each is pinned numbered in the order
of the goal (`currency_1 = USD`, `currency_2 = EUR`) and none under the bare key: the rules
cannot tell which one a step's `${facts.currency}` means, so they never guess it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Final

MAX_GOAL_VALUES: Final = 20  # values pinned from one goal; the run's cap is MAX_PINNED_FACTS
# ISO 4217 codes of the currencies most traded and travelled with; not the codes that are
# English words in capitals (ALL, TOP, CUP, MOP, BAM...), which a shouted goal would pin.
_CODES: Final = (
    "AED ARS AUD BGN BRL CAD CHF CLP CNY COP CZK DKK EGP EUR GBP HKD HUF IDR ILS INR ISK JPY "
    "KES KRW MAD MXN MYR NGN NOK NZD PEN PHP PKR PLN QAR RON RSD SAR SEK SGD THB TRY TWD UAH "
    "USD VND ZAR"
)
CURRENCY_CODES: Final = frozenset(_CODES.split(" "))
CURRENCY_SYMBOLS: Final = {"€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR", "$": "USD"}
# An identifier's prefix -> the fact key it is pinned under; any other prefix pins `id`.
IDENTIFIER_KEYS: Final = {"CC": "cost_centre", "PO": "purchase_order", "INV": "invoice"}

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+,\d{1,2}(?!\d)|\d+(?:\.\d+)?"
_CODE = r"[A-Z]{3}"
_SYMBOL = "[" + "".join(re.escape(s) for s in CURRENCY_SYMBOLS) + "]"
_ALONE_BEFORE = r"(?<![\w.,-])"  # not read out of a longer word or number
_ALONE_AFTER = r"(?![\w-]|[.,]\d)"
_AMOUNT_FORMS: Final = (
    re.compile(rf"{_ALONE_BEFORE}(?P<num>{_NUMBER})\s?(?P<cur>{_CODE}|{_SYMBOL})(?!\w)"),
    re.compile(rf"(?<!\w)(?P<cur>{_CODE}|{_SYMBOL})\s?(?P<num>{_NUMBER}){_ALONE_AFTER}"),
)
_DATE = re.compile(rf"{_ALONE_BEFORE}(\d{{4}})-(\d{{2}})-(\d{{2}}){_ALONE_AFTER}")
_MONTH = re.compile(rf"{_ALONE_BEFORE}(\d{{4}})-(0[1-9]|1[0-2]){_ALONE_AFTER}")
_CURRENCY = re.compile(rf"(?<![\w-])({_CODE})(?![\w-])")
_IDENTIFIER = re.compile(r"(?<![\w-])(?P<prefix>[A-Z]{2,5})-(?P<num>\d{2,12})(?![\w-])")


@dataclass(frozen=True)
class GoalValue:
    """One value a goal states: pinned as `key = value`, read from `quote` (the goal's words),
    which starts at character `start` of the goal."""

    key: str
    value: str
    quote: str
    start: int


@dataclass(frozen=True)
class GoalPins:
    """What a submission made of its goal's values: `found`, every value the rules found (key
    -> value, numbered keys for a key with several); `pinned`, those the run pins (none unless
    the submitter asked); `overridden`, the found ones whose key the submitter pinned
    explicitly (key -> the value found), which lost; `facts`, every fact the run pins: the
    explicit ones, then `pinned`."""

    found: dict[str, str] = field(default_factory=dict)
    pinned: dict[str, str] = field(default_factory=dict)
    overridden: dict[str, str] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)


def extract(goal: str) -> list[GoalValue]:
    """The values `goal` states, by the module's rules, in the order of the goal, each (key,
    value) once, at most `MAX_GOAL_VALUES`; keys found with several values numbered."""
    taken = bytearray(len(goal))  # 1 where a rule took the character
    found = sorted(_found(goal, taken), key=lambda v: v.start)
    unique: list[GoalValue] = []
    for value in found:
        if all((v.key, v.value) != (value.key, value.value) for v in unique):
            unique.append(value)
    return _numbered(unique)[:MAX_GOAL_VALUES]


def pins(goal: str, explicit: Mapping[str, str], *, pin: bool, room: int) -> GoalPins:
    """What the run of `goal` pins, given the facts its submitter pinned (`explicit`), which
    always win: a value found is pinned only with `pin`, when its key is not pinned explicitly
    and its value is not pinned already under another key, and while fewer than `room` facts
    (the run's cap) are pinned in all."""
    found = {v.key: v.value for v in extract(goal)}
    overridden = {k: v for k, v in found.items() if k in explicit and explicit[k] != v}
    pinned: dict[str, str] = {}
    if pin:
        given = set(explicit.values())
        left = max(room - len(explicit), 0)
        fresh = [(k, v) for k, v in found.items() if k not in explicit and v not in given]
        pinned = dict(fresh[:left])
    return GoalPins(found, pinned, overridden, {**explicit, **pinned})


def _found(goal: str, taken: bytearray) -> Iterator[GoalValue]:
    for form in _AMOUNT_FORMS:
        for match in _free(form, goal, taken):
            currency = CURRENCY_SYMBOLS.get(match["cur"], match["cur"])
            if currency in CURRENCY_CODES:
                _take(taken, match)
                yield GoalValue("amount", _plain(match["num"]), match[0], match.start())
                yield GoalValue("currency", currency, match[0], match.start())
    for match in _free(_DATE, goal, taken):
        if _real_day(match):
            _take(taken, match)
            yield GoalValue("date", match[0], match[0], match.start())
    for match in _free(_MONTH, goal, taken):
        _take(taken, match)
        yield GoalValue("month", match[0], match[0], match.start())
    for match in _free(_CURRENCY, goal, taken):
        if match[1] in CURRENCY_CODES:
            _take(taken, match)
            yield GoalValue("currency", match[1], match[0], match.start())
    for match in _free(_IDENTIFIER, goal, taken):
        _take(taken, match)
        key = IDENTIFIER_KEYS.get(match["prefix"], "id")
        yield GoalValue(key, match[0], match[0], match.start())


def _free(pattern: re.Pattern[str], goal: str, taken: bytearray) -> Iterator[re.Match[str]]:
    """The matches of `pattern` in `goal` that overlap no text an earlier rule took."""
    for match in pattern.finditer(goal):
        if not any(taken[match.start() : match.end()]):
            yield match


def _take(taken: bytearray, match: re.Match[str]) -> None:
    taken[match.start() : match.end()] = b"\x01" * (match.end() - match.start())


def _plain(number: str) -> str:
    """A number as a fact holds it: thousands commas dropped, a decimal comma made a dot."""
    if re.fullmatch(r"\d+,\d{1,2}", number):
        return number.replace(",", ".")
    return number.replace(",", "")


def _real_day(match: re.Match[str]) -> bool:
    try:
        date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return False
    return True


def _numbered(values: list[GoalValue]) -> list[GoalValue]:
    """`values` with the key of each key found more than once numbered (`currency_1`, ...)."""
    counts: dict[str, int] = {}
    for value in values:
        counts[value.key] = counts.get(value.key, 0) + 1
    seen: dict[str, int] = {}
    numbered: list[GoalValue] = []
    for value in values:
        if counts[value.key] == 1:
            numbered.append(value)
            continue
        seen[value.key] = seen.get(value.key, 0) + 1
        key = f"{value.key}_{seen[value.key]}"
        numbered.append(GoalValue(key, value.value, value.quote, value.start))
    return numbered
