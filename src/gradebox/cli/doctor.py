"""``gradebox doctor``: what this machine gives gradebox, a row per piece
(``gradebox.cli.machine``)."""

from __future__ import annotations

import os

import typer
from rich.markup import escape
from rich.table import Table

from ..core.subids import user_name
from . import machine as dr
from ._common import JsonOpt, Output

MARKS = {
    dr.OK: "[green]✔ ok[/]",
    dr.MISSING: "[red]✘ missing[/]",
    dr.OPTIONAL: "[yellow]– optional[/]",
    dr.INFO: "[dim]· info[/]",
}


def doctor(as_json: JsonOpt = False) -> None:
    """Say what this machine gives gradebox: the backend auto picks and why, each OCI runtime
    and its version, cgroups (v1, v2 or hybrid), the OCI state folder, subordinate ids, the
    engine and its storage driver, the image definitions, the lock and whether each image is
    present and verified, the base image's builder, the init, KVM. Each missing piece comes
    with the one line that fixes it.

    Exit 0 when every promise can be kept here, 1 when a piece is missing (a row marked
    missing). Optional rows name what would make gradebox faster or ready for --locked; what
    runs instead keeps every promise."""
    out = Output(as_json)
    checks = dr.diagnose()
    ok = dr.kept(checks)
    if as_json:
        out.document(
            {
                "ok": ok,
                "user": user_name(),
                "uid": os.geteuid(),
                "checks": [c.as_dict() for c in checks],
            }
        )
    else:
        table = Table(title=f"gradebox doctor (as {user_name()}, uid {os.geteuid()})")
        fixes = any(c.fix for c in checks)  # no empty column where nothing needs fixing
        table.add_column("check")
        table.add_column("state", no_wrap=True)
        table.add_column("what this machine gives", overflow="fold", ratio=3)
        if fixes:
            table.add_column("fix", overflow="fold", ratio=2)
        for c in checks:
            fix = (escape(c.fix or ""),) if fixes else ()
            table.add_row(c.name, MARKS[c.state], escape(c.detail), *fix)
        out.console.print(table)
        missing = [c.name for c in checks if c.state == dr.MISSING]
        if missing:
            out.console.print(
                f"[red]missing: {', '.join(missing)}[/]: gradebox cannot keep "
                "every promise here; each row's fix is one line"
            )
        else:
            out.console.print("[green]every promise can be kept here[/]")
    raise typer.Exit(0 if ok else 1)
