"""What a grader's container sees, as one function: ``grader_spec``. ``gradebox grade`` (via
``graders.run``) and ``gradebox exec`` both build their ``SandboxSpec`` here, so the layout
(workspace, payload folder, the variables naming them) and the hardening handed to the
backend are the same code, not copies.

Must not import pydantic or the Docker SDK: ``gradebox exec`` runs this on its hot path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from ..sandbox.base import Mount, SandboxSpec
from ..sandbox.defaults import DEFAULT_LIMITS, DEFAULT_SECURITY

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CONTAINER_GRADER_DIR",
    "CONTAINER_INPUT_DIR",
    "CONTAINER_WORKSPACE",
    "enterable",
    "grader_spec",
    "input_folder",
    "seal_inputs",
]

CONTAINER_WORKSPACE = "/workspace"
CONTAINER_INPUT_DIR = "/run/gradebox"
CONTAINER_GRADER_DIR = "/grader"
INPUT_FILE = f"{CONTAINER_INPUT_DIR}/input.json"


def enterable(directory: Path, user: str) -> bool:
    """Can the container user list and enter ``directory`` when it is bind-mounted?

    Only the mounted directory's own mode matters (its parents stay on the host). A 0700
    directory (``mktemp -d``) is closed to the unprivileged container user.
    """
    st = directory.stat()
    uid = int(user.partition(":")[0])
    if st.st_uid == uid:
        return st.st_mode & 0o500 == 0o500
    return st.st_mode & 0o005 == 0o005


def input_folder(scratch: Path, owner: tuple[int, int]) -> Path:
    """The folder mounted at ``CONTAINER_INPUT_DIR``: readable by the sandbox user alone."""
    inputs = scratch / "input"
    inputs.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(inputs, *owner)
    return inputs


def seal_inputs(inputs: Path, owner: tuple[int, int]) -> None:
    """Once the files are written: each 0400, the folder 0500, all the sandbox user's."""
    for f in inputs.iterdir():
        f.chmod(0o400)
        if os.geteuid() == 0:
            os.chown(f, *owner)
    os.chmod(inputs, 0o500)


def grader_spec(
    *,
    image: str,
    command: list[str],
    inputs: Path,
    workspace: Path | None,
    workspace_ro: bool = True,
    workdir: str | None = None,
    mounts: tuple[Mount, ...] | list[Mount] = (),
    env: Mapping[str, str] | None = None,
    grader_input: bool = True,
    proxy: Any = None,
    timeout: float = 60.0,
    limits: Any = DEFAULT_LIMITS,
    security: Any = DEFAULT_SECURITY,
    network: str = "none",
    labels: dict[str, str] | None = None,
    name: str = "grader",
    on_start: Callable[[int], None] | None = None,
) -> SandboxSpec:
    """The spec of one grader run. ``workspace`` is mounted at ``CONTAINER_WORKSPACE``
    (read-only unless ``workspace_ro`` is false) and named by ``EVALUATE_WORKSPACE`` and
    ``AGENTV_WORKSPACE_PATH``; ``inputs`` at ``CONTAINER_INPUT_DIR``, its ``input.json``
    named by ``EVALUATE_GRADER_INPUT`` (``grader_input``); ``proxy`` (a ``TargetProxy``)
    adds its variables and binds at start. These variables override ``env``: whoever wrote
    ``env`` cannot point a grader elsewhere. ``workdir`` defaults to the workspace."""
    all_mounts = [Mount(inputs, CONTAINER_INPUT_DIR, read_only=True), *mounts]
    reserved: dict[str, str] = {}
    if workspace is not None:
        all_mounts.insert(0, Mount(workspace, CONTAINER_WORKSPACE, read_only=workspace_ro))
        reserved["EVALUATE_WORKSPACE"] = CONTAINER_WORKSPACE
        reserved["AGENTV_WORKSPACE_PATH"] = CONTAINER_WORKSPACE
    if grader_input:
        reserved["EVALUATE_GRADER_INPUT"] = INPUT_FILE
    if proxy is not None:
        reserved.update(proxy.env())
    return SandboxSpec(
        image=image,
        command=list(command),
        workdir=workdir or (CONTAINER_WORKSPACE if workspace is not None else "/"),
        env={**(env or {}), **reserved},
        mounts=tuple(all_mounts),
        timeout=timeout,
        limits=limits,
        security=security,
        network=network,
        labels=labels or {},
        name=name,
        on_start=proxy.start_in if proxy is not None else on_start,
    )


def workdir_in(base: str, sub_path: str | None) -> str:
    """``base/sub_path`` as a container path."""
    return str(PurePosixPath(base) / (sub_path or ""))
