"""Untrusted text as people see it: invisible and direction-changing characters made visible.

A goal, a step's result or a reviewer's comment can hold characters that change how the text
around them reads without showing themselves: U+202E (RIGHT-TO-LEFT OVERRIDE) shows
"EUR 1000.00\u202e" followed by digits in reverse, zero-width characters make two different
names look the same, and C0/C1 control characters can move a terminal's cursor. This is the
"Trojan Source" family of attacks (Boucher and Anderson, "Trojan Source: Invisible
Vulnerabilities", USENIX Security 2023; Unicode Technical Standard #39, section 3.1.1, and
Unicode Technical Report #36, section 2.3, list these characters as unsafe to show as they are).

`visible` replaces each such character with a marker naming it, `⟨U+202E⟩`, so the console and
the CLI show what is there. It is for display only: stored values are never changed. Left as
they are: tab, line feed and carriage return (text layout), and the zero-width joiner and
non-joiner (U+200C, U+200D), which emoji sequences and Persian, Arabic and Indic scripts need in
ordinary text.
"""

from __future__ import annotations

from typing import Final

# Bidirectional controls (Unicode Standard Annex #9, section 2): embeddings and overrides
# (U+202A-U+202E), isolates (U+2066-U+2069), implicit marks (U+200E, U+200F, U+061C).
BIDI_CONTROLS: Final = frozenset(
    [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
# Other invisible format characters (general category Cf, and U+180E, which was Cf until
# Unicode 6.3) that render as nothing: soft hyphen, zero-width space, word joiner, invisible
# operators, deprecated format characters, byte order mark, interlinear annotation, and the tag
# characters (U+E0000-U+E007F, which can carry hidden ASCII text).
INVISIBLE_FORMAT: Final = frozenset(
    [
        0x00AD,
        0x180E,
        0x200B,
        *range(0x2060, 0x2065),
        *range(0x206A, 0x2070),
        0xFEFF,
        *range(0xFFF9, 0xFFFC),
        *range(0xE0000, 0xE0080),
    ]
)
# C0 controls but tab, line feed and carriage return; DEL and the C1 controls.
CONTROL_CHARACTERS: Final = frozenset(
    [*(c for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)), *range(0x7F, 0xA0)]
)
MARKED: Final = BIDI_CONTROLS | INVISIBLE_FORMAT | CONTROL_CHARACTERS
_MARKERS: Final = {code: f"⟨U+{code:04X}⟩" for code in MARKED}


def _json_escape(code: int) -> str:
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # UTF-16 surrogates (RFC 8259, section 7)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


_JSON_ESCAPES: Final = {code: _json_escape(code) for code in MARKED}


def visible(text: str) -> str:
    """`text` with each character of `MARKED` replaced by `⟨U+XXXX⟩` (its code point, 4 or 5
    upper-case hex digits): `"1000\\u202e"` -> `"1000⟨U+202E⟩"`. Other text is unchanged."""
    return text.translate(_MARKERS)


def visible_json(text: str) -> str:
    """JSON text with each character of `MARKED` written as its JSON escape (`\\u202e`, a
    surrogate pair above U+FFFF), which shows it and still parses to the same value: for JSON a
    person may edit and send back (the console's plan editor). Such characters can only occur
    inside strings of valid JSON, so a valid text stays valid and means the same."""
    return text.translate(_JSON_ESCAPES)
