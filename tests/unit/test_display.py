"""`models.display`: invisible and direction-changing characters shown as markers, in the CLI's
cells and the console's templates alike; JSON for the plan editor keeps its meaning."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from api.ui.templating import percent_class, templates
from models.display import MARKED, visible, visible_json
from ops.views import cell, literal

RLO = "\u202e"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"EUR 1000.00{RLO}01", "EUR 1000.00⟨U+202E⟩01"),
        ("rita\u200b", "rita⟨U+200B⟩"),
        ("\u2066x\u2069", "⟨U+2066⟩x⟨U+2069⟩"),
        ("\u061c\u200e\u200f", "⟨U+061C⟩⟨U+200E⟩⟨U+200F⟩"),
        ("tag\U000e0041", "tag⟨U+E0041⟩"),
        ("\x1b[31mred", "⟨U+001B⟩[31mred"),
        ("\x9b", "⟨U+009B⟩"),
    ],
)
def test_marked_characters_are_shown_by_code_point(text: str, shown: str) -> None:
    assert visible(text) == shown


@pytest.mark.parametrize("text", ["a\tb\nc\r", "€ 1.000,00", "👨\u200d👩\u200d👧", "مرحبا", ""])
def test_ordinary_text_layout_and_joiners_are_left_alone(text: str) -> None:
    assert visible(text) == text


def test_every_bidi_control_of_uax9_is_marked() -> None:
    bidi = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    assert all(code in MARKED for code in bidi)


def test_json_for_the_editor_shows_the_characters_and_parses_to_the_same_value() -> None:
    value = {"steps": [{"name": "pay", "args": {"memo": f"x{RLO}y\U000e0041\x7f"}}]}
    text = json.dumps(value, ensure_ascii=False)
    shown = visible_json(text)
    assert RLO not in shown and "\\u202e" in shown and "\\udb40\\udc41" in shown
    assert json.loads(shown) == value


def _plain(renderable: object) -> str:
    console = Console(width=200, color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_cli_shows_markers_in_cells_and_literals() -> None:
    assert "1000.00⟨U+202E⟩" in _plain(cell(f"1000.00{RLO}"))
    assert RLO not in _plain(literal(f"goal {RLO}x"))


def test_the_console_templates_show_markers_for_every_value_but_typed_fields() -> None:
    env = templates.env
    page = env.from_string("<p>{{ goal }}</p><i>{{ goal | short(5) }}</i>").render(goal=f"a{RLO}b")
    assert page == "<p>a⟨U+202E⟩b</p><i>a⟨U+202E⟩b</i>"
    escaped = env.from_string("{{ x }}").render(x=f"<b>{RLO}")
    assert escaped == "&lt;b&gt;⟨U+202E⟩"  # autoescaping still holds
    typed = env.from_string("{{ x | as_typed }}").render(x=f"<{RLO}")
    assert typed == f"&lt;{RLO}"  # echoed back exactly, still escaped
    plan = env.from_string("{{ x | json_visible }}").render(x=json.dumps({"a": RLO}))
    assert plan == "{&#34;a&#34;: &#34;\\u202e&#34;}"


@pytest.mark.parametrize(("percent", "name"), [(0, "pct-0"), (41.6, "pct-42"), (130, "pct-100")])
def test_bar_widths_are_classes(percent: float, name: str) -> None:
    assert percent_class(percent) == name
