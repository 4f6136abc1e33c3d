"""Facts a conversation turn states about its speaker, found by plain rules at write time.

A question asks about people in the third person ("When did Caroline go to the support
group?", "What does Melanie like?"); a turn says it in the first ("I went to a support group
yesterday"). `extract` finds, sentence by sentence, the statements a speaker makes about
themself and writes each in the third person, naming the speaker, so that the question's words
and meaning match the fact's: "Caroline went to a support group yesterday (7 May 2023)."

Each fact has a kind (the `category` it is stored under), by the first rule that holds:

- preference: "I love/like/enjoy/prefer/adore X", "my favourite X", "I'm into / a fan of /
  passionate about X";
- plan: "I'm going to / gonna / planning / thinking of / hoping to", "I'll", "I will", "I plan /
  want / hope to", "we're going to / planning";
- relation (possessions and people): "my husband / kids / dog ...", "I have / I've got / I own";
- event (who did what): the speaker or "we" as the subject of a past-tense verb ("I went",
  "we adopted", "I've started").

Questions, sentences of fewer than MIN_WORDS words and sentences without a first-person subject
state nothing about the speaker and are skipped; at most MAX_FACTS facts per turn (the first
ones), so a long turn does not crowd its neighbours out of recall. The rules are this module's
own (standard library only), in the spirit of rule-based open information extraction (Fader et
al., "Identifying Relations for Open Information Extraction", EMNLP 2011: relations anchored on
verb phrases); a model extracts more, these hold for any English conversation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["preference", "plan", "relation", "event"]
MIN_WORDS: Final = 4  # "I love it." says too little to be worth a row
MAX_FACTS: Final = 3  # per turn

_SENTENCE: Final = re.compile(r"(?<=[.!?])\s+")
_FIRST_PERSON: Final = re.compile(r"\b(?:I|I'm|I've|I'll|I'd|[Mm]y|[Ww]e|[Ww]e're|[Ww]e've)\b")
_IRREGULAR = (
    "went|did|made|got|took|saw|met|began|ran|won|bought|found|gave|had|read|wrote|felt|came|"
    "left|brought|built|drew|drove|flew|grew|heard|kept|knew|lost|paid|put|said|sang|sat|sold|"
    "sent|spent|taught|told|thought|threw|understood|wore|became|caught|chose|fell"
)
_RULES: Final[tuple[tuple[Kind, re.Pattern[str]], ...]] = (
    (
        "preference",
        re.compile(
            r"\bI (?:really |also |just |totally |absolutely )?(?:love|like|enjoy|prefer|adore)\b"
            r"|\b[Mm]y (?:all-time )?favou?rite\b"
            r"|\bI(?:'m| am) (?:really |so |a big |a huge )?"
            r"(?:into|passionate about|fan of|a fan of)\b",
        ),
    ),
    (
        "plan",
        re.compile(
            r"\bI(?:'m| am) (?:going to|gonna|planning|thinking (?:of|about)|hoping)\b"
            r"|\bI(?:'ll| will| plan| want to| hope to| intend)\b"
            r"|\b[Ww]e(?:'re| are) (?:going to|gonna|planning)\b|\b[Ww]e(?:'ll| will)\b"
        ),
    ),
    (
        "relation",
        re.compile(
            r"\b[Mm]y (?:husband|wife|partner|boyfriend|girlfriend|kids?|children|son|daughter|"
            r"mom|mum|mother|dad|father|parents|family|friends?|brother|sister|grandma|grandpa|"
            r"dog|dogs|cat|cats|pets?|puppy|home|house|job|boss|team|car|guitar)\b"
            r"|\bI (?:have|own)\b|\bI've got\b"
        ),
    ),
    (
        "event",
        re.compile(
            r"\b(?:I|[Ww]e)(?:'ve| have| had)?(?: just| finally| also| recently| already)?"
            rf" (?:\w+ed|{_IRREGULAR})\b"
        ),
    ),
)
# First-person words and the third-person text for `speaker` ({s}), longest first.
_PRONOUNS: Final = (
    (r"\bI'm\b", "{s} is"),
    (r"\bI've\b", "{s} has"),
    (r"\bI'll\b", "{s} will"),
    (r"\bI'd\b", "{s} would"),
    (r"\bI am\b", "{s} is"),
    (r"\bmyself\b", "{s}"),
    (r"\b[Mm]ine\b", "{s}'s"),
    (r"\b[Mm]y\b", "{s}'s"),
    (r"\bme\b", "{s}"),
    (r"\bI\b", "{s}"),
)


@dataclass(frozen=True)
class Extracted:
    """One fact about `subject` (the speaker): its `kind` and its third-person `text`."""

    kind: Kind
    subject: str
    text: str


def extract(speaker: str, said: str) -> list[Extracted]:
    """The facts `speaker` states about themself in `said` (one conversation turn, its time
    expressions best already resolved: `models.memory.time_expressions.annotate`), in order, at most
    MAX_FACTS; empty when there are none. Raises `ValueError` for an empty `speaker`."""
    if not speaker.strip():
        raise ValueError("speaker: must not be empty")
    found = [fact for s in sentences(said) if (fact := _fact(speaker.strip(), s)) is not None]
    return found[:MAX_FACTS]


def sentences(text: str) -> list[str]:
    """`text` split after ".", "!" or "?" followed by white space; empty pieces dropped."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def kind_of(sentence: str) -> Kind | None:
    """The kind of fact a first-person `sentence` states (the module docstring's rules, first
    match wins), or None (a question, too short, or no rule holds)."""
    if sentence.endswith("?") or len(sentence.split()) < MIN_WORDS:
        return None
    if not _FIRST_PERSON.search(sentence):
        return None
    return next((kind for kind, rule in _RULES if rule.search(sentence)), None)


def third_person(speaker: str, sentence: str) -> str:
    """`sentence` with the first-person singular words replaced by `speaker` ("I'm" -> "<speaker>
    is", "my" -> "<speaker>'s"); "we" and "our" are kept (whom they include is not said)."""
    for pattern, replacement in _PRONOUNS:
        sentence = re.sub(pattern, replacement.format(s=speaker), sentence)
    return sentence


def _fact(speaker: str, sentence: str) -> Extracted | None:
    kind = kind_of(sentence)
    if kind is None:
        return None
    text = third_person(speaker, sentence)
    if not re.search(rf"\b{re.escape(speaker)}\b", text):  # "we ..." names nobody
        text = f"{speaker}: {text}"
    return Extracted(kind, speaker, text)
