"""What every command shares: the output object and option aliases (the rest of a command's
session: ``session.CommandSession``)."""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console

from ..core.duration import parse_duration
from ..protocol.models import Status
from ..sandbox.defaults import PRIVILEGES

__all__ = [
    "AllowOpt",
    "SandboxOpt",
    "JsonOpt",
    "LockedOpt",
    "Output",
    "InFlightOpt",
    "RayOpt",
    "ScaleUpOpt",
    "WorkersOpt",
    "duration_option",
    "exit_code",
    "reflow",
]

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout (logs go to stderr).")
]
SandboxOpt = Annotated[
    str | None,
    typer.Option(
        "--sandbox",
        help="auto (oci where a runtime is usable, else docker), oci, docker or host "
        "(no isolation). Default: $GRADEBOX_SANDBOX, else the suite's defaults.sandbox, "
        "else auto.",
        show_default=False,
    ),
]
AllowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        help=f"Let graders relax this hardening (repeatable): {', '.join(PRIVILEGES)} "
        "(docs/security.md).",
    ),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option("--workers", "-w", min=1, help="Parallel runs (with --ray: across the cluster)."),
]
# The commands that take --ray: one option, --workers kept as the name it had.
InFlightOpt = Annotated[
    int | None,
    typer.Option(
        "--max-in-flight",
        "--workers",
        "-w",
        min=1,
        help="Items run at once here; with --ray, tasks in flight on the cluster (default: "
        "its slots, at least 64, so that an autoscaler sees the demand).",
        show_default=False,
    ),
]


def duration_option(value: str) -> float:
    """A duration option's text (``90s``, ``5m``) as seconds; a usage error otherwise."""
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


ScaleUpOpt = Annotated[
    float,
    typer.Option(
        "--scale-up-timeout",
        parser=duration_option,
        metavar="DURATION",
        help="With --ray: how long to wait for a node that can take the work (none is up yet, "
        "every node was lost or set aside, or none is large enough) before stopping (exit 4).",
    ),
]
RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Run on a Ray cluster (needs gradebox's `ray` extra): its address host:port, or "
        "auto ($RAY_ADDRESS, or the cluster this machine joined). Each item is a task on a "
        "node offering a `gradebox` resource, under that node's sandbox.",
        show_default=False,
    ),
]
LockedOpt = Annotated[
    bool | None,
    typer.Option(
        "--locked/--no-locked",
        help="Refuse images that are unpinned or differ from images.lock.json "
        "(default: on when CI=true).",
        show_default=False,
    ),
]


_KEEP_LINES = re.compile(r"^\s+\S|^\s*(?:[-*•]|\d+[.)])\s", re.M)


def reflow(doc: str | None) -> str | None:
    """A docstring as help text: each paragraph one line, which the terminal then wraps.

    Typer's rich help keeps a docstring's hard line breaks past its first paragraph, so a
    paragraph wrapped at 95 columns in the source printed as broken lines in a narrower (or
    wider) terminal. Paragraphs that are laid out by hand (indented lines, list items, or
    ``\\b`` first, click's marker) keep their lines."""
    if doc is None:
        return None
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    out = []
    for paragraph in paragraphs:
        if paragraph.startswith("\b") or _KEEP_LINES.search(paragraph):
            out.append(paragraph)
        else:
            out.append(" ".join(line.strip() for line in paragraph.splitlines()))
    return "\n\n".join(out)


def exit_code(statuses: Iterable[Status]) -> int:
    """The documented exit code of a run: 3 if anything errored, else 1 if anything failed."""
    seen = set(statuses)
    if Status.error in seen:
        return 3
    return 1 if Status.failed in seen else 0


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
