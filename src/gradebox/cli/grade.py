"""``gradebox grade``: run one grader file once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from ..core.yamlfile import to_config_error
from ..drivers.batch import load_grader_ref
from ..graders import GraderConfig, compiled, load_grader, run_grader
from ..protocol.models import Payload
from ..report import print_result
from ..suite.plan import check_grader
from ._common import AllowOpt, JsonOpt, LockedOpt, SandboxOpt, exit_code
from .grade_lean import DIALECT, _read_regular, checked_workspace, read_payload
from .session import CommandSession


def load_payload(source: str) -> Payload:
    """A payload from a JSON file, or ``-`` for stdin. Errors name the file and the field."""
    name = "<stdin>" if source == "-" else source
    data = read_payload(source)
    try:
        return Payload.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(exc, file=name, lines={}) from None


def _load_grader(path: Path) -> GraderConfig:
    """``load_grader_ref``, and the validated form of a grader file kept for the lean path
    (``graders.compiled``: the bytes validated are the bytes keyed, read once)."""
    if path.suffix.lower() not in compiled.SUFFIXES:
        return load_grader_ref(path, dialect=DIALECT)
    raw = _read_regular(path)
    if raw is None:  # not a regular file, or past the cap: the loader says what it is
        return load_grader_ref(path, dialect=DIALECT)
    grader = load_grader(path, raw)
    compiled.store(path, raw, DIALECT, grader.to_record())
    return grader


def grade(
    grader_file: Annotated[
        Path, typer.Argument(help="A grader file (YAML or JSON), or a grader script (.py .sh .js).")
    ],
    input: Annotated[
        str | None,
        typer.Option("--input", "-i", help="Payload JSON file ('-' for stdin); default: {}."),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-W",
            help="Directory mounted at EVALUATE_WORKSPACE (default: the current folder, "
            "unless it is / , your home folder or above it).",
        ),
    ] = None,
    targets: Annotated[
        Path | None,
        typer.Option(
            "--targets",
            "--providers",
            help="The model targets file (default $GRADEBOX_TARGETS, ~/.gradebox/); the "
            "grader's own folder is never read for targets.",
        ),
    ] = None,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    allow: AllowOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run one program or script grader in a fresh, hardened container.

    Exit codes: 0 passed, 1 failed, 2 invalid configuration or usage (nothing ran),
    3 the grader errored (timeout, crash, unparseable output), 4 the engine failed.
    """
    session = CommandSession(as_json, sandbox=sandbox, allow=allow, locked=locked, targets=targets)
    grader = _load_grader(grader_file)
    payload = load_payload(input) if input else Payload()
    mask = workspace is None  # the current folder, the operator's own: its secrets masked
    workspace = checked_workspace(workspace)
    check_grader(grader, session.allowed, file=str(grader_file), workspaces=(workspace,))
    with session.open_sandbox() as box:
        result = run_grader(
            grader,
            payload,
            workspace,
            box,
            images=session.images(box),
            file=str(grader_file),
            models=session.models(grader),
            mask_workspace=mask,
        )
    if as_json:
        session.out.document(result)
    else:
        print_result(result, session.out.console)
    raise typer.Exit(exit_code([result.status]))
