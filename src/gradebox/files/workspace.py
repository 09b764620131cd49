"""Test workspaces on the host: a fresh copy of the template, on a filesystem of its own.

Everything here reads files an agent wrote, so everything treats them as hostile: copies,
measures and removals go by file descriptor (``fstree``: any name, any depth, no link
followed), special files are skipped, and the workspace lives on a size- and file-limited
filesystem when the host allows it. The baseline and ``file_changes`` are ``baseline``'s.
All of this runs on the host, never inside a sandbox.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core import settings
from ..core.atomic import out_of_space
from ..core.fstree import (
    QuotaPassed,
    chown_tree,
    copy_tree,
    libc,
    remove_tree,
    tree_usage,
    unmount,
    unmount_below,
)
from ..core.sizes import format_bytes
from ..errors import WorkspaceError
from .baseline import DEFAULT_DIFF_CAP, Baseline, truncate_diff
from .repos import clone_into, repo_folder

__all__ = [
    "DEFAULT_DIFF_CAP",
    "DEFAULT_MAX_FILES",
    "DEFAULT_MAX_SIZE",
    "Baseline",
    "Quota",
    "Workspace",
    "WorkspaceError",
    "chown_tree",
    "copy_template",
    "remove_tree",
    "safe_copy",
    "truncate_diff",
    "walk_tree",
    "unmount_below",
]

log = logging.getLogger("gradebox.workspace")

DEFAULT_MAX_SIZE = 1 << 30
DEFAULT_MAX_FILES = 100_000


def safe_copy(
    source: Path, dest: Path, owner: tuple[int, int] | None = None, max_bytes: int | None = None
) -> list[str]:
    """Copy the tree at ``source`` into ``dest`` (created) without following any link.

    Links are recreated as links, FIFOs, sockets and devices are skipped (their relative paths
    are returned), set-id bits are dropped. ``owner``: hand every entry to that uid:gid.
    ``max_bytes``: ENOSPC once the files' sizes (holes included) pass it.
    """
    return copy_tree(source, dest, owner, max_bytes=max_bytes)


def walk_tree(
    root: Path, descend: Callable[[str], bool] = lambda rel: True
) -> Iterator[tuple[str, Path, list[os.DirEntry[str]]]]:
    """``(relative path, path, entries)`` of every directory under ``root``, parents first.

    No link is ever followed, and it keeps its own stack: a tree nested thousands deep is
    walked like any other. ``descend(rel)`` prunes a subdirectory. It names entries by path,
    so a path past ``PATH_MAX`` raises ``OSError``: it is for the suite's own folders (the
    cluster bundle); what an agent wrote is walked by ``fstree``, by descriptor."""
    stack = [""]
    while stack:
        rel = stack.pop()
        path = root / rel if rel else root
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
        yield rel, path, entries
        for entry in reversed(entries):
            child = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False) and descend(child):
                stack.append(child)


def copy_template(template: Path | None, dest: Path, owner: tuple[int, int] | None = None) -> Path:
    """A fresh copy of ``template`` at ``dest`` (empty when there is none).

    ``owner``: hand the copy to the sandbox user so an ``rw`` target can write it.
    """
    if template is None:
        dest.mkdir(parents=True, exist_ok=True)
        if owner is not None and os.geteuid() == 0:
            os.lchown(dest, *owner)
    else:
        safe_copy(template, dest, owner)
    return dest


def materialise_repo(
    root: Path,
    source: str,
    stage: Path,
    where: str,
    ref: str | None,
    owner: tuple[int, int] | None = None,
) -> None:
    """Place a local repository (the suite author's, next to the suite) at ``stage/where``:
    a clone checked out at ``ref`` when one is given, else a copy that follows no link."""
    src = (root / source).resolve()
    if not src.is_dir():
        raise WorkspaceError(f"repository source {src} is not a directory")
    # The template or an earlier repository may hold a link out: none followed here.
    dest = repo_folder(stage, where)
    if ref is None:
        safe_copy(src, dest, owner)
        return
    clone_into(dest, str(src), ref, where=where, what=f"{source} at {ref}", timeout=300)
    if owner is not None:
        chown_tree(dest, owner)


# ---------------------------------------------------------------------------------------------
# A workspace on a filesystem of its own, limited in size and in files.


@dataclass(frozen=True)
class Quota:
    """What an agent (or an ``rw`` grader) may write: bytes and files (inodes)."""

    size: int = DEFAULT_MAX_SIZE
    files: int = DEFAULT_MAX_FILES

    def describe(self) -> str:
        return f"{format_bytes(self.size)} and {self.files:,} files"


_MS_NOSUID, _MS_NODEV = 2, 4


def quota_mounts() -> bool:
    """Can a workspace be a tmpfs of its quota here (root, on Linux)? Elsewhere the quota is
    checked after the fact, and a ``workspace: rw`` grader's copy is not size-limited
    (docs/non-root.md; ``gradebox doctor`` says so)."""
    return os.geteuid() == 0 and hasattr(os, "sched_getaffinity")


def _mount_tmpfs(path: Path, quota: Quota, owner: tuple[int, int] | None) -> bool:
    """A tmpfs of ``quota`` at ``path``: the kernel refuses writes past it (ENOSPC)."""
    if not quota_mounts():
        return False
    uid, gid = owner or (os.getuid(), os.getgid())
    opts = f"size={quota.size},nr_inodes={quota.files + 1},mode=0755,uid={uid},gid={gid}"
    rc = libc().mount(
        b"gradebox-ws", str(path).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts.encode()
    )
    if rc != 0:
        log.warning(
            "no size-limited workspace (%s): quota checked after the fact",
            os.strerror(ctypes.get_errno()),
        )
        return False
    return True


def overlay_mode() -> str:
    """``$GRADEBOX_WORKSPACE``: ``overlay`` (the default, where the kernel allows) or ``copy``."""
    return settings.current().workspace


def _mount_overlay(lower: Path, layer: Path, merged: Path, owner: tuple[int, int] | None) -> bool:
    """An overlay at ``merged``: reads from ``lower``, writes into ``layer/upper`` only."""
    if os.geteuid() != 0 or overlay_mode() == "copy":
        return False
    upper, work = layer / "upper", layer / "work"
    upper.mkdir(mode=0o755, exist_ok=True)
    work.mkdir(mode=0o700, exist_ok=True)
    st = os.stat(lower)
    os.chmod(upper, stat.S_IMODE(st.st_mode))
    os.chown(upper, *(owner or (st.st_uid, st.st_gid)))
    # No redirects, index or metacopy: the upper layer holds plain files and whiteouts only.
    opts = (
        f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,index=off,metacopy=off"
    )
    rc = libc().mount(
        b"gradebox-ws", str(merged).encode(), b"overlay", _MS_NOSUID | _MS_NODEV, opts.encode()
    )
    if rc != 0:
        log.info("no overlay (%s): the workspace is copied", os.strerror(ctypes.get_errno()))
        return False
    return True


class Workspace:
    """A directory an untrusted process may write, on a filesystem of its own.

    As root, a tmpfs of ``quota`` is mounted there, so the kernel itself stops a runaway agent
    (ENOSPC) and nothing it writes reaches the host's disk. Elsewhere the quota is checked
    after the fact, and ``exceeded()`` says so all the same.

    Example::

        ws = Workspace.create(scratch / "workspace", template, owner=(65534, 65534))
        ...                       # the agent works in ws.path
        if reason := ws.exceeded():
            ...                   # the test is an error
        ws.close()
    """

    def __init__(self, path: Path, quota: Quota, mounted: bool) -> None:
        self.path, self.quota, self.mounted = path, quota, mounted
        self.skipped: list[str] = []
        self.layer: Path | None = None  # the overlay's writable layer, when there is one

    @property
    def kind(self) -> str:
        return "overlay" if self.layer is not None else "copy"

    @classmethod
    def create(
        cls,
        path: Path,
        template: Path | None = None,
        *,
        owner: tuple[int, int] | None = None,
        quota: Quota | None = None,
        lower: Path | None = None,
    ) -> Workspace:
        """A workspace at ``path``: empty, a copy of ``template``, or (``lower``) an overlay
        whose writes land in a size-limited layer of their own and are never merged back
        (falling back to a copy of ``lower`` where the kernel says no)."""
        quota = quota or Quota()
        path.mkdir(parents=True, exist_ok=True)
        if lower is not None:
            ws = cls._overlay(path, lower, owner, quota)
            if ws is not None:
                return ws
            template = lower
        ws = cls(path, quota, _mount_tmpfs(path, quota, owner))
        try:
            if template is not None:
                ws.fill(template, owner)
            elif owner is not None and os.geteuid() == 0:
                os.lchown(path, *owner)
        except BaseException:
            ws.close()
            raise
        return ws

    @classmethod
    def _overlay(
        cls, path: Path, lower: Path, owner: tuple[int, int] | None, quota: Quota
    ) -> Workspace | None:
        layer = path.with_name(path.name + ".layer")
        layer.mkdir(mode=0o700, exist_ok=True)
        quota_mounted = _mount_tmpfs(layer, quota, None)
        try:
            if _mount_overlay(lower, layer, path, owner):
                ws = cls(path, quota, quota_mounted)
                ws.layer = layer
                return ws
        except BaseException:
            if quota_mounted:  # never a mount left behind (lower gone: the run ended)
                unmount(layer)
            raise
        if quota_mounted:
            unmount(layer)
        return None

    def fill(self, source: Path, owner: tuple[int, int] | None = None) -> None:
        """Copy ``source`` in (no links followed, special files skipped)."""
        try:
            # Unmounted, nothing stops the copy at the quota but this count (holes included).
            limit = None if self.mounted else self.quota.size
            self.skipped = safe_copy(source, self.path, owner, limit)
        except OSError as exc:
            # A mounted workspace is its quota's size; unmounted, only our count says quota
            # (a full disk under $TMPDIR is the machine's fault: the caller ends the run).
            if not out_of_space(exc):
                raise WorkspaceError(f"cannot copy {source}: {exc}") from None
            if self.mounted or isinstance(exc, QuotaPassed):
                raise WorkspaceError(
                    f"copying {source} exceeds the workspace quota ({self.quota.describe()})"
                ) from None
            raise  # the scratch folder itself is full

    def exceeded(self) -> str | None:
        """Why the workspace is over (or at) its quota, or None."""
        if self.mounted:
            st = os.statvfs(self.layer or self.path)
            free_bytes = st.f_bavail * st.f_frsize
            if free_bytes < min(1 << 20, self.quota.size // 100) or st.f_favail < 2:
                return f"the workspace quota ({self.quota.describe()}) was exhausted"
            return None
        try:
            size, files = tree_usage(self.layer or self.path, (self.quota.size, self.quota.files))
        except OSError as exc:
            return f"the workspace could not be measured against its quota ({exc.strerror})"
        if size > self.quota.size or files > self.quota.files:
            return f"the workspace quota ({self.quota.describe()}) was exceeded"
        return None

    def close(self) -> None:
        if self.layer is not None:
            unmount(self.path)  # the overlay, then the layer under it
            if self.mounted:
                unmount(self.layer)
            self.layer, self.mounted = None, False
        elif self.mounted:
            unmount(self.path)
            self.mounted = False
