"""What every command shares: the output object and option aliases."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console

__all__ = ["JsonOpt", "Output", "WorkersOpt"]

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout (logs go to stderr).")
]
WorkersOpt = Annotated[int | None, typer.Option("--workers", "-w", min=1, help="Parallel runs.")]
DirArg = Annotated[Path, typer.Argument(file_okay=False)]


class Output:
    """Human mode prints to a rich console; JSON mode writes exactly one document to stdout.

    Progress and logs always go to stderr, so ``--json`` output can be piped.
    """

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False)
        self.err = Console(stderr=True, highlight=False)

    def document(self, value: Any) -> None:
        if isinstance(value, BaseModel):
            text = value.model_dump_json(indent=2)
        else:
            text = json.dumps(value, indent=2, default=_default)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def info(self, message: str) -> None:
        self.err.print(message)


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
