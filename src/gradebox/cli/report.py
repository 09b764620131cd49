"""``gradebox report`` (one HTML file of one run or several) and ``gradebox view`` (the same
page, live, on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..report import escape
from ._common import JsonOpt, Output

RunsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Run folders (or their results.jsonl), or `gradebox trials` / `batch` outputs; "
        "the first is the baseline."
    ),
]


def report(
    runs: RunsArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path(
        "report.html"
    ),
    as_json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML file of a run, or of several compared with the first
    (flips, McNemar's p, bootstrap intervals): it opens from disk with no server and no
    network. It holds the runs' outputs (answers, evidence, diffs): check it before you
    publish it. A run of several suite files is one run (each file's tests labelled by it).
    Exit 0, or 2 when a run cannot be read.
    """
    from ..report.html import write_report  # the page's modules, for this command only

    output = Output(as_json)
    path = write_report(runs, out)
    if as_json:
        output.document({"report": str(path), "bytes": path.stat().st_size})
    else:
        output.console.print(f"report: {escape(str(path))}")
    output.info("[yellow]the report holds the run's outputs: check it before you publish it[/]")


def view(
    run: Annotated[Path, typer.Argument(help="A run folder, finished or still being written.")],
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: a free one).")
    ] = 0,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="RUN does not exist yet: wait for a run to start there."),
    ] = False,
) -> None:
    """Serve the report of RUN on 127.0.0.1 and follow its results.jsonl: results a run
    appends show up without reloading the page (filters, scroll and opened tests are kept).
    Open the URL it prints: it holds a random token that every request needs, so other
    users of this machine cannot read the run through the port. The page says whether the
    run is running, finished, interrupted or stale (stopped without a summary), and lists
    the tests it has not run yet. A path that is no run is refused. Ctrl-C stops it.
    """
    from ..report.view import ViewServer  # only this command serves (http.server)

    server = ViewServer(run, port, wait=wait)
    # The URL, with its token, on stdout (a script can read it); Ctrl-C is the way out.
    typer.echo(server.url, err=False)
    output = Output()
    if server.layout() is None:
        output.info(f"[yellow]gradebox view: no run in {escape(str(run))} yet: waiting for one[/]")
    output.info(f"[dim]gradebox view: {escape(str(run))} on {server.url}; Ctrl-C stops[/]")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
