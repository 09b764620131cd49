"""Run one grader: configuration + payload + workspace -> a sandboxed run -> a ``GraderResult``.

This module decides *what* the container sees (mounts, paths, environment, stdin); the
sandbox decides *how* it is isolated. Host paths are checked here, on the host, before any
container exists.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path, PurePosixPath

from ..errors import ConfigError
from ..images import DEFAULT_IMAGE, ImageResolver
from ..protocol import LARGE_OUTPUT_CHARS, GraderResult, ImageRef, Payload
from ..sandbox.base import Limits, Mount, RunOutcome, Sandbox, SandboxSpec, Security
from ..sandbox.hardening import run_as
from .config import GraderConfig, ProgramGrader
from .verdict import judge

__all__ = [
    "CONTAINER_GRADER_DIR",
    "CONTAINER_INPUT_DIR",
    "CONTAINER_WORKSPACE",
    "run_grader",
    "run_in_workspace",
]

CONTAINER_WORKSPACE = "/workspace"
CONTAINER_INPUT_DIR = "/run/gradebox"
CONTAINER_GRADER_DIR = "/grader"
TMP_PREFIX = "gradebox-"


def collect_scratch(everything: bool = False) -> list[Path]:
    """Remove scratch dirs (payload files, private workspace copies) of runners that are gone."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*"):
        pid = path.name[len(TMP_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or not path.is_dir():
            continue
        if everything or not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def resolve_sub_path(workspace: Path, sub_path: str | None, *, file: str | None = None) -> str:
    """The grader's working directory, relative to the workspace; refuses escapes via symlink."""
    if not sub_path:
        return ""
    root = workspace.resolve()
    target = (root / sub_path).resolve()
    if target != root and root not in target.parents:
        raise ConfigError(
            f"{sub_path!r} resolves outside the workspace (through a symlink)",
            file=file,
            field="sub_path",
        )
    if not target.is_dir():
        raise ConfigError(
            f"{sub_path!r} is not a directory in the workspace {workspace}",
            file=file,
            field="sub_path",
        )
    return target.relative_to(root).as_posix()


def _grader_file_arg(arg: str, source_dir: Path | None) -> str | None:
    """If ``arg`` names a file next to the grader file, its path inside the container."""
    if source_dir is None or not arg or arg.startswith("-") or "\n" in arg:
        return None
    text = arg.replace("\\", "/")
    if text.startswith("/") or len(text) > 4096:
        return None
    candidate = (source_dir / text).resolve()
    if source_dir not in candidate.parents or not candidate.is_file():
        return None  # not a file there, or a link that would expose something outside it
    return f"{CONTAINER_GRADER_DIR}/{candidate.relative_to(source_dir).as_posix()}"


def build_command(grader: GraderConfig) -> tuple[list[str], bool]:
    """The argv to run, and whether it refers to files next to the grader file."""
    uses_source = False

    def translate(arg: str) -> str:
        nonlocal uses_source
        mapped = _grader_file_arg(arg, grader.source_dir)
        if mapped:
            uses_source = True
            return mapped
        return arg

    if isinstance(grader, ProgramGrader):
        argv = [translate(grader.program), *(translate(a) for a in grader.args)]
        if grader.shell:
            # As a shell would see "program arg1 arg2": joined with spaces, not quoted.
            return ["/bin/sh", "-c", " ".join(argv)], uses_source
        return argv, uses_source
    if isinstance(grader.command, str):
        return ["/bin/sh", "-c", grader.command], uses_source
    return [translate(a) for a in grader.command], uses_source


def _enterable(directory: Path, user: str) -> bool:
    """Can the container user list and enter ``directory`` when it is bind-mounted?

    Only the mounted directory's own mode matters (its parents stay on the host). A 0700
    directory (``mktemp -d``) is closed to the unprivileged container user, so it is copied.
    """
    st = directory.stat()
    uid = int(user.partition(":")[0])
    if st.st_uid == uid:
        return st.st_mode & 0o500 == 0o500
    return st.st_mode & 0o005 == 0o005


def _private_copy(source: Path, dest: Path, user: str) -> Path:
    """A copy only this grader sees: the host directory and other graders never see writes."""
    shutil.copytree(source, dest, symlinks=True)
    if os.geteuid() == 0:
        # Root on the host: hand the copy to the container user so it can write. (A non-root
        # host runs containers as its own uid, which already owns the copy.)
        uid, _, gid = user.partition(":")
        for dirpath, dirnames, filenames in os.walk(dest):
            for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.lchown(entry, int(uid), int(gid or uid))
    return dest


def run_grader(
    grader: GraderConfig,
    payload: Payload,
    workspace: Path | str,
    sandbox: Sandbox,
    *,
    image_id: str | None = None,
    images: ImageResolver | None = None,
    labels: dict[str, str] | None = None,
    file: str | None = None,
) -> GraderResult:
    """Run ``grader`` once on ``payload`` with ``workspace`` mounted at $EVALUATE_WORKSPACE.

    Example::

        with get_sandbox() as box:
            result = run_grader(load_grader("grader.yaml"), Payload(output="42"), ".", box)
            print(result.status, result.score)
    """
    workspace = Path(workspace)
    if not workspace.is_dir():
        raise ConfigError(f"workspace {workspace} is not a directory")
    workdir_rel = resolve_sub_path(workspace, grader.sub_path, file=file)
    ref = grader.image or DEFAULT_IMAGE
    if image_id is None:
        resolver = images or ImageResolver(sandbox.engine)  # type: ignore[attr-defined]
        image_id = resolver.resolve(ref, grader.source_dir)
    ref_text = ref if isinstance(ref, str) else f"build:{ref.build}"
    command, uses_source = build_command(grader)
    name = grader.display_name()

    scratch = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
    try:
        inputs = scratch / "input"
        inputs.mkdir(mode=0o755)
        os.chmod(scratch, 0o755)
        wire = payload.model_copy(update={"workspace_path": CONTAINER_WORKSPACE})
        if wire.output is not None and len(wire.output) > LARGE_OUTPUT_CHARS:
            (inputs / "output.json").write_text(json.dumps(wire.output), encoding="utf-8")
            wire = wire.model_copy(
                update={"output": None, "output_path": f"{CONTAINER_INPUT_DIR}/output.json"}
            )
        body = wire.to_wire()
        (inputs / "input.json").write_bytes(body)
        for f in inputs.iterdir():
            f.chmod(0o644)

        user = run_as(grader.security)
        ws_source = workspace.resolve()
        if grader.workspace == "rw" or not _enterable(ws_source, user):
            ws_source = _private_copy(workspace, scratch / "workspace", user)
        mounts = [
            Mount(ws_source, CONTAINER_WORKSPACE, read_only=grader.workspace == "ro"),
            Mount(inputs, CONTAINER_INPUT_DIR, read_only=True),
        ]
        if uses_source and grader.source_dir:
            source = grader.source_dir
            if not _enterable(source, user):
                source = _private_copy(source, scratch / "grader", user)
            mounts.append(Mount(source, CONTAINER_GRADER_DIR, read_only=True))

        env = {
            **grader.env,
            "EVALUATE_WORKSPACE": CONTAINER_WORKSPACE,
            "EVALUATE_GRADER_INPUT": f"{CONTAINER_INPUT_DIR}/input.json",
            "AGENTV_WORKSPACE_PATH": CONTAINER_WORKSPACE,
        }
        workdir = str(PurePosixPath(CONTAINER_WORKSPACE) / workdir_rel)
        spec = SandboxSpec(
            image=image_id,
            command=command,
            workdir=workdir,
            env=env,
            mounts=tuple(mounts),
            stdin=body if grader.type == "script" else None,
            timeout=grader.timeout,
            limits=grader.limits,
            security=grader.security,
            network=grader.network,
            labels=labels or {},
            name=name,
        )
        started = time.monotonic()
        outcome = sandbox.run(spec)
        result = judge(
            grader.type,
            name,
            outcome,
            timeout=grader.timeout,
            limits=grader.limits,
            named=grader.name is not None,
        )
        result.duration_ms = outcome.duration_ms or int((time.monotonic() - started) * 1000)
        result.image = ImageRef(ref=ref_text, id=image_id)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_in_workspace(
    command: list[str] | str,
    workspace: Path,
    sandbox: Sandbox,
    *,
    image_id: str,
    name: str,
    stdin: bytes | None = None,
    timeout: float = 300.0,
    network: str = "none",
    env: dict[str, str] | None = None,
    limits: Limits | None = None,
    labels: dict[str, str] | None = None,
    source_dir: Path | None = None,
) -> RunOutcome:
    """Run a command that may change the workspace in place (a suite's target and hooks).

    Same hardening as a grader; the only difference is the workspace, mounted read-write.
    """
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    mounts = [Mount(workspace.resolve(), CONTAINER_WORKSPACE, read_only=False)]
    scratch: Path | None = None
    try:
        if source_dir is not None and not isinstance(command, str):
            mapped = [_grader_file_arg(a, source_dir) or a for a in argv]
            if mapped != argv:
                argv = mapped
                user = run_as(Security())
                if not _enterable(source_dir, user):
                    scratch = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
                    source_dir = _private_copy(source_dir, scratch / "grader", user)
                mounts.append(Mount(source_dir, CONTAINER_GRADER_DIR, read_only=True))
        spec = SandboxSpec(
            image=image_id,
            command=argv,
            workdir=CONTAINER_WORKSPACE,
            env={**(env or {}), "EVALUATE_WORKSPACE": CONTAINER_WORKSPACE},
            mounts=tuple(mounts),
            stdin=stdin,
            timeout=timeout,
            limits=limits or Limits(),
            network=network,
            labels=labels or {},
            name=name,
        )
        return sandbox.run(spec)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
