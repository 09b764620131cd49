"""Trees an agent wrote, walked, copied, measured and removed by file descriptor.

A workspace holds whatever the agent made: names that are not UTF-8, folders nested tens of
thousands deep, paths far longer than ``PATH_MAX``, links to the host, FIFOs. Nothing here
hands the kernel a path longer than one name: each folder is opened relative to its parent
(``O_NOFOLLOW``) and left through its ``..`` (checked against the folder it came from), so any
depth and any length is walked with one descriptor open, in time linear in the tree. Names are
bytes as the kernel gave them; no link is ever followed; nothing recurses.

What must not happen here: following a link, turning a name into text, or building a path
from the root for every entry (that is quadratic in the depth).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "Folder",
    "QuotaPassed",
    "chown_tree",
    "copy_file",
    "copy_tree",
    "normalise_sub_path",
    "remove_tree",
    "tree_usage",
    "unmount_below",
    "walk_folders",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Folder:
    """One folder of a walk: open as ``fd`` while the walk is on it (until the next step).

    A plain class (not a dataclass: ``gradebox exec`` removes its scratch folder with this
    module, and ``dataclasses`` costs its hot path ~5 ms); equal only to itself."""

    __slots__ = ("fd", "name", "parent", "depth", "length", "entries", "subdirs", "ident",
                 "data", "_next")  # fmt: skip

    def __init__(
        self,
        fd: int,
        name: bytes,  # b"" for the root
        parent: Folder | None,
        depth: int,  # 0 for the root
        length: int,  # bytes of its path below the root, without building it
        entries: list[tuple[bytes, os.stat_result]],  # (name, lstat), sorted by name
        subdirs: list[bytes],  # what the walk enters next, in order; prune it on entering
        ident: tuple[int, int],
        data: Any = None,  # the caller's
        _next: int = 0,
    ) -> None:
        self.fd, self.name, self.parent, self.depth, self.length = fd, name, parent, depth, length
        self.entries, self.subdirs, self.ident = entries, subdirs, ident
        self.data, self._next = data, _next

    def __repr__(self) -> str:
        return f"Folder(fd={self.fd}, name={self.name!r}, depth={self.depth})"

    def rel(self) -> bytes:
        """Its path below the root (costs its depth: call it for a few folders, not all)."""
        parts, here = [], self
        while here is not None and here.parent is not None:
            parts.append(here.name)
            here = here.parent
        return b"/".join(reversed(parts))


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _open_folder(fd: int, name: bytes, parent: Folder | None) -> Folder:
    entries = []
    with os.scandir(fd) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone between the listing and the look
            entries.append((os.fsencode(entry.name), st))
    entries.sort(key=lambda e: e[0])
    depth = 0 if parent is None else parent.depth + 1
    length = 0 if parent is None else parent.length + bool(parent.parent) + len(name)
    return Folder(
        fd,
        name,
        parent,
        depth,
        length,
        entries,
        [n for n, st in entries if stat.S_ISDIR(st.st_mode)],
        _ident(os.fstat(fd)),
    )


def walk_folders(
    root: Path | bytes | str, *, dir_fd: int | None = None, strict: bool = True
) -> Iterator[tuple[bool, Folder]]:
    """``(True, folder)`` on entering each folder under ``root`` (itself first), ``(False,
    folder)`` on leaving it, after its subfolders; ``folder.fd`` is open during both.

    ``root`` itself must be a folder, not a link (``dir_fd``: relative to that folder). A
    subfolder that cannot be opened raises ``OSError`` (``strict``) or is passed over. A
    folder moved while it is walked raises ``OSError`` (ESTALE) rather than walk elsewhere.
    """
    fd = os.open(root, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        here = _open_folder(fd, b"", None)
    except BaseException:
        os.close(fd)
        raise
    try:
        yield True, here
        while True:
            if here._next < len(here.subdirs):
                name = here.subdirs[here._next]
                here._next += 1
                try:
                    child_fd = os.open(name, _DIR_FLAGS, dir_fd=here.fd)
                except OSError:
                    if strict:
                        raise
                    continue
                try:
                    child = _open_folder(child_fd, name, here)
                except BaseException:
                    os.close(child_fd)
                    raise
                os.close(here.fd)
                here.fd, here = -1, child
                yield True, here
                continue
            yield False, here
            parent = here.parent
            if parent is None:
                break
            up = os.open(b"..", _DIR_FLAGS, dir_fd=here.fd)
            if _ident(os.fstat(up)) != parent.ident:
                os.close(up)
                raise OSError(errno.ESTALE, "a folder was moved while it was read")
            os.close(here.fd)
            here.fd, here = -1, parent
            here.fd = up
    finally:
        if here.fd >= 0:
            os.close(here.fd)
            here.fd = -1


def remove_tree(path: Path | str) -> None:
    """``rm -rf`` at any depth and path length, following no link; errors are ignored."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    _open_to_owner(path, st, None)
    with contextlib.suppress(OSError):
        _empty(path, None)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _empty(root: Path | str | bytes, dir_fd: int | None) -> None:
    """Remove everything inside ``root`` (children first), leaving ``root`` itself."""
    for entering, folder in walk_folders(root, dir_fd=dir_fd, strict=False):
        if entering:
            for name, st in folder.entries:  # before the walk opens them
                _open_to_owner(name, st, folder.fd)
            continue
        for name, st in folder.entries:
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(name, dir_fd=folder.fd)
                else:
                    os.unlink(name, dir_fd=folder.fd)


def _open_to_owner(name: Path | str | bytes, st: os.stat_result, dir_fd: int | None) -> None:
    """Without root, a folder of ours that we may not write (the sealed input folder, 0500)
    or even open (made 000 by an agent that ran as our uid) keeps all it holds: give its
    owner rwx back before it is emptied. Changed through a descriptor opened without
    following links (O_PATH), never by its name: a name swapped for a link changes nothing
    elsewhere. Root needs none of it."""
    me = os.geteuid()
    if me == 0 or not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
        return
    if st.st_mode & 0o700 == 0o700:
        return
    with contextlib.suppress(OSError):
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | 0o700)
        finally:
            os.close(fd)


def _remove_at(dir_fd: int, name: bytes) -> None:
    """Remove ``name`` in the folder ``dir_fd`` (a folder with all it holds)."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        _open_to_owner(name, st, dir_fd)
        _empty(name, dir_fd)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def tree_usage(root: Path, stop_at: tuple[int, int] | None = None) -> tuple[int, int]:
    """``(bytes allocated, entries)`` under ``root``; stops counting once past ``stop_at``."""
    size = files = 0
    with contextlib.closing(walk_folders(root)) as walk:
        for entering, folder in walk:
            if not entering:
                continue
            for _name, st in folder.entries:
                files += 1
                size += st.st_blocks * 512
            if stop_at and (size > stop_at[0] or files > stop_at[1]):
                break
    return size, files


def chown_tree(root: Path, owner: tuple[int, int]) -> None:
    """Hand every entry under ``root`` to ``owner`` (root only; no link followed)."""
    if os.geteuid() != 0:
        return
    os.lchown(root, *owner)
    with contextlib.closing(walk_folders(root)) as walk:
        for entering, folder in walk:
            if entering:
                for name, _st in folder.entries:
                    os.chown(name, *owner, dir_fd=folder.fd, follow_symlinks=False)


class QuotaPassed(OSError):
    """``copy_tree``'s ``max_bytes`` was passed: the quota's ENOSPC, not the disk's."""


def copy_tree(
    source: Path,
    dest: Path,
    owner: tuple[int, int] | None = None,
    *,
    merge: bool = False,
    max_bytes: int | None = None,
) -> list[str]:
    """Copy the tree at ``source`` into ``dest`` (created), following no link on either side.

    Links are recreated as links; FIFOs, sockets and devices are skipped (their paths below
    ``source`` are returned); set-id bits are dropped. ``owner``: hand every entry to that
    uid:gid (as root). ``merge``: ``dest`` may hold a tree already; what ``source`` holds
    replaces what has its name there (a folder is merged into a folder, never into a link).
    ``max_bytes``: stop with ENOSPC once the files' sizes add up past it: a copy writes every
    byte of a file with holes (a 1 TB sparse file the agent made costs it nothing), and every
    hard link to one file once more, so a quota checked only after the copy is too late.
    """
    skipped: list[str] = []
    budget = [max_bytes]
    dest.mkdir(parents=True, exist_ok=True)
    chown = owner is not None and os.geteuid() == 0
    out = os.open(dest, _DIR_FLAGS)
    outs: list[tuple[int, int]] = [_ident(os.fstat(out))]
    walk = walk_folders(source)
    try:
        for entering, folder in walk:
            if entering:
                if folder.parent is not None:
                    inner = _enter_copy(out, folder.name, merge)
                    os.close(out)
                    out = inner
                    outs.append(_ident(os.fstat(out)))
                for name, st in folder.entries:
                    if stat.S_ISREG(st.st_mode) and budget[0] is not None:
                        budget[0] -= st.st_size
                        if budget[0] < 0:
                            raise QuotaPassed(errno.ENOSPC, "the files to copy pass the quota")
                    if not stat.S_ISDIR(st.st_mode) and not _copy_entry(
                        folder.fd, name, st, out, merge, owner if chown else None
                    ):
                        skipped.append(os.fsdecode(b"/".join(filter(None, (folder.rel(), name)))))
                continue
            if folder.parent is None:
                break
            # Its real mode once it is filled (it may be 0500), then back to the parent's copy.
            os.fchmod(out, stat.S_IMODE(os.fstat(folder.fd).st_mode) & 0o1777)
            if chown:
                os.chown(out, *owner)  # type: ignore[misc]
            up = os.open(b"..", _DIR_FLAGS, dir_fd=out)
            outs.pop()
            if _ident(os.fstat(up)) != outs[-1]:
                os.close(up)
                raise OSError(errno.ESTALE, f"{dest} was moved while it was written")
            os.close(out)
            out = up
    finally:
        walk.close()
        os.close(out)
    if chown:
        os.lchown(dest, *owner)  # type: ignore[misc]
    return skipped


def _enter_copy(out: int, name: bytes, merge: bool) -> int:
    """The copy of folder ``name`` inside ``out``, opened (made, or merged into when it is a
    real folder already)."""
    if merge:
        try:
            st = os.lstat(name, dir_fd=out)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            _remove_at(out, name)
        elif st is not None:
            return os.open(name, _DIR_FLAGS, dir_fd=out)
    os.mkdir(name, 0o700, dir_fd=out)
    return os.open(name, _DIR_FLAGS, dir_fd=out)


def _copy_entry(
    src: int, name: bytes, st: os.stat_result, out: int, merge: bool, owner: tuple[int, int] | None
) -> bool:
    """Copy one file or link; False for what is neither (a FIFO, a socket, a device)."""
    mode = st.st_mode
    if not (stat.S_ISLNK(mode) or stat.S_ISREG(mode)):
        return False
    if merge:
        _remove_at(out, name)
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=out)
    else:
        _copy_file(src, name, out, stat.S_IMODE(mode) & 0o777)
    if owner is not None:
        os.chown(name, *owner, dir_fd=out, follow_symlinks=False)
    return True


def copy_file(source: Path, dest: Path, mode: int) -> None:
    """Copy the regular file ``source`` to ``dest`` (made, with ``mode``): a link as its last
    name is not followed, and what is not a regular file (a FIFO swapped in since it was
    checked) is never read, ``OSError`` instead."""
    src = os.open(source.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        out = os.open(dest.parent, _DIR_FLAGS)
        try:
            _copy_file(src, os.fsencode(source.name), out, mode, os.fsencode(dest.name))
        finally:
            os.close(out)
    finally:
        os.close(src)


def _copy_file(src: int, name: bytes, out: int, mode: int, as_name: bytes | None = None) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file any more", os.fsdecode(name))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        dst = os.open(as_name or name, flags, 0o600, dir_fd=out)
        try:
            # sendfile moves the bytes in the kernel; a quota'd destination ends it with
            # ENOSPC, which the caller reports.
            while os.sendfile(dst, fd, None, 1 << 24):
                pass
            os.fchmod(dst, mode)
        finally:
            os.close(dst)
    finally:
        os.close(fd)


def normalise_sub_path(value: str) -> str:
    """Check what can be checked without the workspace: both slash styles, no absolute path,
    no ``..`` that climbs out. Symlinks are checked on the host when the workspace is known."""
    text = value.replace("\\", "/")
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        raise ValueError(f"{value!r} is absolute; sub_path must be relative to the workspace")
    parts: list[str] = []
    for part in PurePosixPath(text).parts:
        if part == "..":
            if not parts:
                raise ValueError(f"{value!r} climbs out of the workspace with '..'")
            parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return "/".join(parts)


def real_folder_below(root: Path, rel: str) -> Path:
    """``root/rel`` with every folder on the way made or found real: a link (or a file) among
    them raises ``ValueError``, so what is written there next stays below ``root``. For a stage
    the host fills alone, before any sandbox: what an earlier repository or the template put
    there (a link out of it) must not steer where the next one lands."""
    here = root
    for part in PurePosixPath(rel).parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            os.mkdir(here, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            kind = "a link" if stat.S_ISLNK(st.st_mode) else "not a folder"
            raise ValueError(f"{rel!r}: {here.relative_to(root)} is {kind} in the workspace")
    return here


# Mounts: a workspace is a filesystem of its own, detached before its folder is removed.
_MNT_DETACH, _UMOUNT_NOFOLLOW = 2, 8
_libc: Any = None


def libc() -> Any:
    """The C library, loaded on first use: ctypes is not on `gradebox exec`'s path, and the
    process's own symbols hold it (no ``find_library``: it forks ``ldconfig``)."""
    global _libc
    if _libc is None:
        import ctypes  # lazy: ctypes (~2.5 ms) is not on `gradebox exec`'s path

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def unmount(path: Path) -> None:
    libc().umount2(str(path).encode(), _MNT_DETACH | _UMOUNT_NOFOLLOW)


def unmount_below(root: Path) -> None:
    """Detach every mount at or below ``root`` (workspaces a killed runner left mounted).
    ``root`` itself is not followed if it is a link: what is mounted at a link's target is not
    below the link (a link planted in /tmp by another user must not unmount the host)."""
    prefix = str(Path(root).parent.resolve() / Path(root).name)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[4] for line in lines if len(line.split()) > 4]
    for point in sorted(points, key=len, reverse=True):
        point = point.encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            unmount(Path(point))
