"""One grader, run once on the host: ``GraderRun``, the one way every command runs one.

``grade`` (its full and its lean path), ``exec``, ``assert``, ``batch``, ``trials``,
``calibrate`` and each test of ``run`` run a grader through this class, so each step of it is
written once: the scratch folder; the sealed input folder; the workspace view (the agent's
folder mounted read-only where the sandbox user can enter it, else a private view, made at
release, that the sandbox user owns); the model proxy to an operator's target; the sandbox's
container; the verdict (or, for ``exec``, the outcome as it is: its byte-for-byte protocol is
an output mode of this run, not a second run); and the clean-up, in ``close``, which every
path ends in. The runner's watchdog is the command's (``gradebox.cli.main`` forks it before
any of this).

What the container runs and which files it sees next to the workspace is the caller's:
``graders.run`` builds it from a grader file, ``cli.exec`` from a harness's command line.

Must not import pydantic, typer, rich, PyYAML, the Docker SDK, nor shutil, typing or
dataclasses: ``gradebox exec`` and ``grade``'s lean path run it on their hot path
(``tests/unit/test_harness.py``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
from pathlib import Path

from ..core.fstree import remove_tree
from ..core.scratch import new_scratch, scratch_error
from ..core.untrusted import Refused, TooMany, look_through
from ..errors import ConfigError
from ..sandbox.base import Mount
from ..sandbox.hardening import run_as, run_as_ids
from .spec import (
    CONTAINER_INPUT_DIR,
    CONTAINER_WORKSPACE,
    enterable,
    grader_spec,
    input_folder,
    seal_inputs,
)

TYPE_CHECKING = False  # not typing's: this is the hot path
if TYPE_CHECKING:
    from typing import Any

    from ..llm.client import ModelHub
    from ..sandbox.base import Prepared, RunOutcome, Sandbox, SandboxSpec

__all__ = [
    "LARGE_OUTPUT_CHARS",
    "SECRET_SCAN_LIMIT",
    "GraderRun",
    "is_wide",
    "masked_secrets",
    "operator_models",
    "refuse_wide",
    "resolve_sub_path",
]

LARGE_OUTPUT_CHARS = 50_000  # protocol.LARGE_OUTPUT_CHARS (test_wire.py holds them equal)


class GraderRun:
    """One grader's run: made (scratch, inputs, proxy), prepared (its container, perhaps
    before its input exists), executed once, closed on every path.

    Example::

        with GraderRun(box, security=security) as run:
            ws = run.view(workspace)
            run.prepare(image=image_id, command=["python3", "check.py"], workspace=ws)
            outcome = run.execute(b"{}", files={"input.json": b"{}"})

    ``grader``: the record (``graders.compiled.GraderRecord``) whose verdict ``judge`` gives;
    ``image``: its reference as written and its id, for the result.
    """

    def __init__(
        self,
        box: Sandbox,
        *,
        security: Any,
        grader: Any = None,
        image: tuple[str, str] = ("", ""),
        models: ModelHub | None = None,
        target: str | None = None,
        max_calls: int = 50,
        file: str | None = None,
        target_field: str = "target",
    ) -> None:
        self.box, self.grader, self.image, self.file = box, grader, image, file
        self.user, self.owner = run_as(security), run_as_ids(security)
        self.proxy: Any = None
        self.handle: Prepared | None = None
        self.spec: SandboxSpec | None = None
        self.workspace: Path | None = None  # the agent's folder, as given
        self.masks: list[Mount] = []  # over the workspace's secrets (view(masked=True))
        self.private: Path | None = None  # the private view's mount point, when there is one
        self.copy: Any = None  # the private view (a ``Workspace``), made at release
        self.backend = box.name
        self._done = False
        self.scratch: Path | None = None
        try:
            if target is not None:
                self.proxy = _proxy(models, target, max_calls, file, target_field)
            self.scratch = new_scratch()
            # The payload: readable by the sandbox user alone (the scratch folder is 0700).
            self.inputs = input_folder(self.scratch, self.owner)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> GraderRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def view(
        self, workspace: Path | None, *, writable: bool = False, masked: bool = False
    ) -> Path | None:
        """The folder mounted at ``/workspace`` for ``workspace``: itself (read-only) where the
        sandbox user can enter it; else, and when the grader may write (``writable``), a
        private view on a filesystem of its own, made at release when the workspace is final
        (an overlay over it where the kernel allows and the sandbox user owns it, else a
        copy). Never the filesystem's root, the home folder or a folder above it.

        ``masked``: the workspace is the operator's own folder, not an agent's (``grade``
        without ``-W`` runs in the current folder, a checkout): its secrets are kept from the
        grader as in every other folder of the operator's mounted (``masked_secrets``)."""
        if workspace is None:
            return None
        refuse_wide(workspace, "the workspace")
        self.workspace = workspace
        if masked:
            try:
                masks = masked_secrets(
                    workspace, CONTAINER_WORKSPACE, self.scratch, WORKSPACE_SCAN_LIMIT
                )
            except Refused as exc:  # a FIFO, a socket, a device, a link to one
                raise ConfigError(f"{exc.entry} in the workspace {exc.why}") from None
            if masks is None:
                raise ConfigError(
                    f"the current folder holds more than {WORKSPACE_SCAN_LIMIT} entries, each "
                    "checked for a .env before it is mounted: name the workspace with -W",
                    field="--workspace",
                )
            self.masks = masks
        if not writable and enterable(workspace.resolve(), self.user):
            return workspace.resolve()
        self.private = self.scratch / "workspace"
        self.private.mkdir(mode=0o755)
        if os.geteuid() == 0:
            os.chown(self.private, *self.owner)
        return self.private

    def prepare(self, *, warm: bool = False, **spec: Any) -> None:
        """Get the container ready (``warm``: started ahead of its input, where the backend
        can and the workspace is no private view, which exists only at release).
        ``spec``: ``graders.spec.grader_spec``'s arguments but the input folder and the
        proxy, which are this run's."""
        try:
            if self.masks:
                spec["mounts"] = [*spec.get("mounts", ()), *self.masks]
            self.spec = grader_spec(inputs=self.inputs, proxy=self.proxy, **spec)
            self.handle = self.box.prepare(self.spec, warm=warm and self.private is None)
        except BaseException:
            self.close()
            raise

    def execute(self, stdin: bytes | None, files: dict[str, bytes] | None = None) -> RunOutcome:
        """Write ``files`` into the input folder and seal it, make the private view, release
        the container with ``stdin``; then close, whatever happened."""
        if self._done:
            raise RuntimeError("a grader runs once")
        self._done = True
        try:
            assert self.handle is not None, "prepare first"
            if self.grader is not None and self.workspace is not None:
                # Checked now, on the host: the agent may have made sub_path a link out.
                resolve_sub_path(self.workspace, self.grader.sub_path, file=self.file)
            for name, data in (files or {}).items():
                try:
                    (self.inputs / name).write_bytes(data)
                except OSError as exc:
                    # lazy: core.atomic on a fault only, not on exec's hot path
                    from ..core.atomic import out_of_space

                    if out_of_space(exc):
                        raise scratch_error(exc) from None  # the machine's, not the grader's
                    raise
            seal_inputs(self.inputs, self.owner)
            if self.private is not None:
                self._private_view()
            self.backend = getattr(self.handle, "backend", self.box.name)  # one may hand over
            outcome = self.handle.execute(stdin)
            if self.proxy is not None:
                self.proxy.close()  # waits for calls in flight: its usage is complete
            return outcome
        finally:
            self.close()

    def _private_view(self) -> None:
        # Only for a private view: workspace's dataclasses, logging and subprocess stay off
        # exec's hot path (~6 ms).
        from ..files.workspace import Workspace

        assert self.workspace is not None and self.private is not None
        ours = os.stat(self.workspace).st_uid == self.owner[0]
        self.copy = Workspace.create(
            self.private,
            None if ours else self.workspace,
            owner=self.owner,
            lower=self.workspace.resolve() if ours else None,
        )

    def run_wire(self, body: bytes, big_output: str | None = None) -> dict[str, Any]:
        """The grader's verdict on a payload already on the wire: ``body`` is what it reads,
        ``big_output`` the JSON of an ``output`` too long for it (``output_path``). The
        result as ``GraderResult``'s fields (``graders.verdict.verdict``); the proxy's usage
        in ``usage``, when there is one."""
        files = {"input.json": body}
        if big_output is not None:
            files = {"output.json": big_output.encode(), **files}
        stdin = body if self.grader.type == "script" else None
        return self.judge(self.execute(stdin, files))

    def run(self, payload: Any) -> Any:
        """``run_wire`` for a payload model: its ``GraderResult``."""
        import json  # lazy: the model path only (lean and exec write their JSON themselves)

        from .verdict import result_of  # lazy: the result models (~13 ms), the model path's

        try:
            wire = payload.model_copy(update={"workspace_path": CONTAINER_WORKSPACE})
            big = None
            if wire.output is not None and len(wire.output) > LARGE_OUTPUT_CHARS:
                big = json.dumps(wire.output)
                wire = wire.model_copy(update={"output": None, "output_path": OUTPUT_FILE})
            body = wire.to_wire()
        except BaseException:
            self.close()
            raise
        return result_of(self.run_wire(body, big))

    def judge(self, outcome: RunOutcome) -> dict[str, Any]:
        """The grader's verdict on what it did, as ``GraderResult``'s fields."""
        # Only a grader's run judges: exec's byte-for-byte mode never loads the verdict's
        # readers (re, json) on its hot path.
        from ..sandbox.hardening import privileges_of
        from .verdict import verdict

        grader = self.grader
        fields = verdict(
            grader.dialect or grader.type,
            grader.display_name(),
            outcome,
            timeout=grader.timeout,
            limits=grader.limits,
            named=grader.name is not None,
            pass_score=getattr(grader, "pass_score", None) or 0.5,
        )
        fields["duration_ms"] = outcome.duration_ms
        fields["image"] = {"ref": self.image[0], "id": self.image[1]}
        fields["privileges"] = privileges_of(
            grader.security, grader.network, grader.limits, grader.image
        )
        fields["backend"] = self.backend
        if self.proxy is not None:
            fields["usage"] = self.proxy.usage.model_copy()
        return fields

    def close(self) -> None:
        """The one clean-up, on every path (used, discarded, failed while being made): the
        container, the proxy, the private view, the scratch folder (its sealed inputs:
        ``remove_tree`` opens what its owner closed, and follows no link). Idempotent."""
        self._done = True
        handle, self.handle = self.handle, None
        try:
            if handle is not None:
                handle.discard()
        finally:
            if self.proxy is not None:
                self.proxy.close(wait=False)  # execute closed it, waiting, when it ran
            copy, self.copy = self.copy, None
            if copy is not None:
                copy.close()
            scratch, self.scratch = self.scratch, None
            if scratch is not None:
                remove_tree(scratch)

    discard = close  # a prepared grader not needed after all (the pool's word)


OUTPUT_FILE = f"{CONTAINER_INPUT_DIR}/output.json"


def _proxy(models: Any, target: str, max_calls: int, file: str | None, field: str) -> Any:
    """The model proxy to the operator's ``target`` ("": their default one): the grader may
    name one, never define one (docs/security.md, provenance)."""
    if models is None:
        raise ConfigError(
            "this grader calls a model (target:), and no model targets were given to this command",
            file=file,
            field=field,
        )
    from ..llm.proxy import TargetProxy  # a grader with a model only: its sockets and pydantic

    # "" names no target: the operator's default one.
    return TargetProxy(
        models, models.targets.get(target or None, file=file, field=field), max_calls=max_calls
    )


def operator_models(flag: Path | None) -> ModelHub:
    """The model targets a command without a suite may give a grader: the operator's
    (``--targets FILE``, else ``$GRADEBOX_TARGETS``) and the user's own; never the current
    folder's nor the grader's (a downloaded pack's)."""
    # lazy: the model hub (pydantic, ~300 ms) for a grader with a model only
    from ..llm import ModelHub, load_targets
    from ..llm.targets import TargetSources, operator_files

    return ModelHub(load_targets(TargetSources(operator=operator_files(flag))))


SECRET_SCAN_LIMIT = 20_000
"""Entries of a mounted folder looked at for ``.env`` files before it is mounted."""
WORKSPACE_SCAN_LIMIT = 200_000
"""Entries of ``grade``'s default workspace (the current folder, a checkout with its ``.venv``
or ``node_modules``) looked at: ~0.3 s for this project's 25,000, ~2.5 s at the limit."""


def masked_secrets(
    folder: Path, target: str, scratch: Path, limit: int = SECRET_SCAN_LIMIT
) -> list[Mount] | None:
    """The masks of a folder mounted at ``target``, by the one rule of what is kept from a
    grader (``untrusted.look_through``): each ``.env`` anywhere in it (a service's
    ``app/.env`` as much as the top one), each repository's configs (CI's checkout keeps its
    token in ``.git/config``; its submodules' and worktrees' configs hold the same), covered
    by an empty file or folder (not ``/dev/null``: mounts are ``nodev``). None: the folder is
    too big to look through, and must not be mounted unchecked (``exec``'s current folder, a
    grader script's own folder). ``untrusted.Refused`` (a ``ValueError`` naming the entry):
    it holds a FIFO, a socket, a device or a link to one."""
    try:
        held = look_through(folder, limit)
    except TooMany:
        return None
    mounts = []
    # Empty stand-ins, made once per run: a file over each file kept out, a folder over a
    # folder named .env (hidden whole).
    for names, name, make, mode in (
        (held.masked, "empty", Path.touch, 0o444),
        (held.masked_folders, "void", Path.mkdir, 0o555),
    ):
        cover = scratch / name
        if names and not cover.exists():
            make(cover, mode=mode)
            cover.chmod(mode)
        mounts += [Mount(cover, f"{target}/{n}", read_only=True) for n in sorted(names)]
    return mounts


def is_wide(folder: Path) -> bool:
    """The filesystem root, the home folder or a folder above it (/home: every user's): never
    mounted for a grader (a workspace, ``exec``'s current folder)."""
    folder = folder.resolve()
    return folder == Path("/") or any(folder == h or folder in h.parents for h in _homes())


def _homes() -> list[Path]:
    """``$HOME``, and the home of this user and of every login user (uid 1000 up) as the
    password database has them: as root (``/root``), ``/home`` was no folder above a home."""
    homes = []
    with contextlib.suppress(RuntimeError, OSError):
        homes.append(Path.home().resolve())
    try:
        users = pwd.getpwall()
    except OSError:
        users = []
    for user in users:
        if (user.pw_uid == os.geteuid() or 1000 <= user.pw_uid < 65534) and user.pw_dir != "/":
            homes.append(Path(os.path.normpath(user.pw_dir)))
    return homes


def refuse_wide(folder: Path, what: str) -> None:
    if is_wide(folder):
        # A grader from a downloaded pack would read the whole home folder.
        raise ConfigError(
            f"{what} {folder.resolve()} is the filesystem root, your home folder or a folder "
            "above it: it is never mounted; run from the grader's own folder, or name the "
            "workspace"
        )


def resolve_sub_path(workspace: Path, sub_path: str | None, *, file: str | None = None) -> str:
    """The grader's working directory, relative to the workspace; refuses escapes via symlink."""
    if not sub_path:
        return ""
    root = workspace.resolve()
    target = (root / sub_path).resolve()
    if target != root and root not in target.parents:
        why = "resolves outside the workspace (through a symlink)"
    elif not target.is_dir():
        why = f"is not a directory in the workspace {workspace}"
    else:
        return target.relative_to(root).as_posix()
    raise ConfigError(f"{sub_path!r} {why}", file=file, field="sub_path")
