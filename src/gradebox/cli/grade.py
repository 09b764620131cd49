"""``gradebox grade``: run one grader file once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from .._yaml import to_config_error
from ..batch import load_grader_ref
from ..errors import ConfigError
from ..graders import run_grader
from ..jsonl import load_json
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
from .exec import is_wide


def load_payload(source: str) -> Payload:
    """A payload from a JSON file, or ``-`` for stdin. Errors name the file and the field."""
    name = "<stdin>" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read payload: {exc.strerror or exc}", file=name) from None
    # Bytes, decoded and bounded in one place: binary, UTF-16, deep nesting and lone
    # surrogates are one line naming the file, not a traceback at a later step.
    data = load_json(raw, file=name)
    if not isinstance(data, dict):
        raise ConfigError("the payload must be a JSON object", file=name)
    try:
        return Payload.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(exc, file=name, lines={}) from None


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
    grader = load_grader_ref(grader_file, dialect="script")
    payload = load_payload(input) if input else Payload()
    workspace = workspace or Path(".")
    if not workspace.is_dir():
        raise ConfigError(f"workspace {workspace} is not a directory", field="--workspace")
    if is_wide(workspace):
        # As exec: a grader from a downloaded pack would read the whole home folder.
        raise ConfigError(
            f"{workspace.resolve()} is the filesystem root, your home folder or a folder "
            "above it: it is never mounted; give the workspace with -W DIR",
            field="--workspace",
        )
    privileges = allowed(allow)
    check_grader(grader, privileges, file=str(grader_file), workspaces=(workspace,))
    models = None
    if getattr(grader, "target", None) is not None:  # it calls a model through a proxy
        from ..llm import ModelHub, load_targets
        from ..llm.targets import TargetSources, operator_files

        # The operator's targets only: the grader's folder (a downloaded pack's) may name a
        # target, never define one (docs/security.md, provenance).
        models = ModelHub(load_targets(TargetSources(operator=operator_files(targets))))
    with open_sandbox(out, sandbox) as box:
        images = resolver_for(box, locked, privileges)
        result = run_grader(grader, payload, workspace, box, images=images,
                            file=str(grader_file), models=models)  # fmt: skip
    if as_json:
        out.document(result)
    else:
        print_result(result, out.console)
    raise typer.Exit(exit_code([result.status]))
