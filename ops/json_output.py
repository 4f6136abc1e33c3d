"""`--json` of the listing commands (`run list`, `run show`, `review list`, `memory facts`, `token
list`): one JSON document on stdout, in the shape of the API's answer to the same question
(`api.responses`), so a script reads the CLI and the API alike."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, Final

import typer
from pydantic import BaseModel

JSON_HELP: Final = "Print one JSON document (the API's shape) instead of a table."
JsonFlag = typer.Option("--json", help=JSON_HELP)


def print_json(value: BaseModel | Sequence[BaseModel]) -> None:
    """Write `value` (a model, or a list of them) as one JSON document and a newline."""
    data: Any = (
        value.model_dump(mode="json")
        if isinstance(value, BaseModel)
        else [item.model_dump(mode="json") for item in value]
    )
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
