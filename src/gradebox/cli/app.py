"""The ``gradebox`` command. Each command parses options, calls the library, prints.

Library errors become one-line messages here, in one place; ``--debug`` shows tracebacks.

Exit codes: 0 success/passed, 1 failed (``doctor``: a piece is missing), 2 invalid
configuration or usage (nothing ran), 3 a grader errored, 4 infrastructure failure (engine
unreachable, build failed), 5 out of space (a folder we write: results, scratch; finished
results kept), 130 Ctrl-C.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from .._version import __version__
from ..core import settings
from ..errors import GradeboxError
from ..report.plain import clean
from ..sandbox.runtime import checked
from . import images as images_cmd
from ._common import reflow
from .compare import compare
from .doctor import doctor
from .exec import main as exec_main
from .failures import EXIT_STORAGE as EXIT_STORAGE  # re-exported: the app's, as it was
from .failures import failure
from .grade import grade
from .maintenance import gc, schemas
from .report import report, view
from .run import run, validate, validate_refs
from .workflows import assert_, batch, calibrate, trials

F = TypeVar("F", bound=Callable[..., Any])
_state = {"debug": False}


def _fail(message: str, code: int) -> typer.Exit:
    # Errors name tests, records, nodes and archive members (any text a suite or an archive
    # gives): made inert here, the one door to stderr (a ConfigError escapes its own).
    sys.stderr.write(f"gradebox: error: {clean(message)}\n")
    return typer.Exit(code)


def handled(fn: F) -> F:
    """Library errors -> one line on stderr and a documented exit code (the one place)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise _fail("interrupted; every container of this run was removed", 130) from None
        except (GradeboxError, OSError) as exc:
            said = None if _state["debug"] else failure(exc)
            if said is None:
                raise
            raise _fail(*said) from None

    wrapper.__doc__ = reflow(fn.__doc__)  # help reads as prose at any terminal width
    return wrapper  # type: ignore[return-value]


app = typer.Typer(
    name="gradebox",
    help="Run evaluation graders, each in its own throwaway, locked-down container.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command()(handled(grade))
app.command()(handled(run))
app.command()(handled(validate))
app.command("validate-refs")(handled(validate_refs))
app.command()(handled(batch))
app.command()(handled(trials))
app.command()(handled(calibrate))
app.command("assert")(handled(assert_))
app.command()(handled(compare))
app.command()(handled(report))
app.command()(handled(view))
app.command()(handled(gc))
app.command()(handled(schemas))
app.command()(handled(doctor))
for command in images_cmd.app.registered_commands:
    command.callback = handled(command.callback)
app.add_typer(images_cmd.app, name="images")


@app.command(
    "exec",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
    help="Run any harness's grader command in a hardened sandbox: gradebox exec -- CMD ARGS. "
    "See `gradebox exec --help`.",
)
def exec_(ctx: typer.Context) -> None:
    # `gradebox exec` is dispatched before this app loads (cli.main); this entry lists it in
    # --help and serves callers of the app itself.
    raise typer.Exit(exec_main(list(ctx.args)))


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gradebox {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Tracebacks and engine logs.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More logs on stderr.")] = False,
    runtime: Annotated[
        str | None,
        typer.Option(
            "--runtime",
            help="The OCI runtime of the oci backend: auto (crun where it works, else runc), "
            "crun, runc, or a runtime's path. Default: $GRADEBOX_RUNTIME, else auto.",
            show_default=False,
        ),
    ] = None,
) -> None:
    _state["debug"] = debug
    # The variable is checked as the option is: a typo in it fell back to the docker backend
    # (with `exec`, without a word), where the operator had named a runtime outright.
    named, where = (
        (runtime, "--runtime")
        if runtime is not None
        else (settings.current().runtime, "$GRADEBOX_RUNTIME")
    )
    if named is not None:
        try:  # set for the whole process: its sandboxes, its Ray workers and subprocesses
            os.environ["GRADEBOX_RUNTIME"] = checked(named)
        except ValueError as exc:
            raise _fail(f"{where}: {exc}", 2) from None
    level = logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormat("gradebox: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


class LogFormat(logging.Formatter):
    """Log lines as a terminal may show them: they name tests, records and nodes (a test id
    is any string a suite gives), so control and bidirectional characters are made inert
    (``report.clean``), as every other line gradebox prints."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        return clean(super().formatMessage(record))


def _sigterm(signum: int, frame: object) -> None:
    # SIGTERM gets the same clean shutdown as Ctrl-C: every container is removed.
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    app(prog_name="gradebox")
