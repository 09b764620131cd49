"""``gradebox images``: build and list the runtime images."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from .. import images as img
from .._types import format_bytes
from ..sandbox._engine import Engine
from ._common import JsonOpt, Output

app = typer.Typer(help="Build, list and check the runtime images.", no_args_is_help=True)


def _rows(statuses: list[img.ImageStatus]) -> list[dict[str, object]]:
    return [
        {
            "name": s.name,
            "ref": s.ref,
            "id": s.id,
            "size": s.size,
            "inputs": s.inputs,
            "up_to_date": s.up_to_date,
        }
        for s in statuses
    ]


def _table(out: Output, statuses: list[img.ImageStatus]) -> None:
    table = Table(title="gradebox images")
    for col in ("name", "id", "size", "state"):
        table.add_column(col)
    for s in statuses:
        state = (
            "[green]up to date[/]"
            if s.up_to_date
            else ("[red]missing[/]" if s.id is None else "[yellow]out of date[/]")
        )
        table.add_row(s.name, (s.id or "-")[7:19], format_bytes(s.size) if s.size else "-", state)
    out.console.print(table)


@app.command("build")
def build(
    names: Annotated[
        list[str] | None, typer.Argument(help="Images to build (default: all).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when up to date.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the images that are missing or out of date (the base by debootstrap first)."""
    out = Output(as_json)
    statuses = img.build_images(Engine.connect(), names, force=force, say=out.info)
    if as_json:
        out.document(_rows(statuses))
    else:
        _table(out, statuses)


@app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """Show every image: id, size, and whether it matches its build inputs."""
    out = Output(as_json)
    statuses = img.status(Engine.connect())
    if as_json:
        out.document(_rows(statuses))
    else:
        _table(out, statuses)
