"""``gradebox gc`` and ``gradebox schemas``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..core.scratch import collect_scratch
from ..graders.custom import discover
from ..sandbox import collect_garbage
from ._common import JsonOpt, Output
from .schemas import write_schemas


def gc(
    everything: Annotated[
        bool, typer.Option("--all", help="Also remove containers of runners still alive.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove containers and scratch files that killed runners left behind.

    A runner removes its containers on success, error, timeout and Ctrl-C; only a runner
    killed with SIGKILL leaves any. Those carry its host and pid, so gc knows them.
    """
    out = Output(as_json)
    names = collect_garbage(everything=everything)  # every backend's, OCI first
    scratch = collect_scratch(everything=everything)
    if as_json:
        out.document({"containers": names, "scratch_dirs": [str(p) for p in scratch]})
    else:
        out.console.print(f"removed {len(names)} container(s), {len(scratch)} scratch dir(s)")
        for name in names:
            out.console.print(f"  {name}")


def schemas(
    directory: Annotated[
        Path, typer.Argument(help="Where to write the .schema.json files.")
    ] = Path("schemas"),
    assertions_from: Annotated[
        Path | None,
        typer.Option(
            "--assertions-from",
            metavar="FOLDER",
            help="Close the suite schema's assertion types over the custom assertions found "
            "from FOLDER up (.gradebox/assertions/, .agentv/assertions/): an editor then "
            "marks a misspelt type. Default: any name that is not a built-in kind.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the JSON Schemas of the payload, grader configuration, grader output, result and
    suite."""
    out = Output(as_json)
    customs = None
    if assertions_from is not None:
        customs = sorted(discover(assertions_from))
    written = write_schemas(directory, customs)
    if as_json:
        out.document([str(p) for p in written])
    else:
        for path in written:
            out.console.print(str(path))
