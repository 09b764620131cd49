"""``gradebox grade``: run one grader file once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from .._yaml import to_config_error
from ..batch import load_grader_ref
from ..graders import GraderConfig, compiled, load_grader, run_grader
from ..graders.grader_run import operator_models
from ..plan import check_grader
from ..protocol import Payload
from ..report import print_result
from ._common import (
    AllowOpt,
    JsonOpt,
    LockedOpt,
    Output,
    SandboxOpt,
    allowed,
    exit_code,
    open_sandbox,
    resolver_for,
)
from .grade_lean import DIALECT, _read_regular, checked_workspace, read_payload


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
    out = Output(as_json)
    grader = _load_grader(grader_file)
    payload = load_payload(input) if input else Payload()
    workspace = checked_workspace(workspace)
    privileges = allowed(allow)
    check_grader(grader, privileges, file=str(grader_file), workspaces=(workspace,))
    # A grader that calls a model: the operator's targets only (GraderRun's proxy).
    models = operator_models(targets) if getattr(grader, "target", None) is not None else None
    with open_sandbox(out, sandbox) as box:
        images = resolver_for(box, locked, privileges)
        result = run_grader(grader, payload, workspace, box, images=images,
                            file=str(grader_file), models=models)  # fmt: skip
    if as_json:
        out.document(result)
    else:
        print_result(result, out.console)
    raise typer.Exit(exit_code([result.status]))
