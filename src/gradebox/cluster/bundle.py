"""What travels with a cluster job: the folder holding the suite (or grader) and every file it
names, packed once on the driver and unpacked once per node.

A bundle holds regular files, folders and symbolic links that resolve inside it, nothing else:
a template's link travels as a link, a link out of the folder is refused on the driver, and
a node refuses, naming the member, anything else a bundle might hold (hard links, devices,
FIFOs, links out, a member written through a link) before it writes a byte, so extraction
never reaches past its folder. ``.env`` files stay on the driver: a node reads keys from its
own environment, never from the job.
"""

from __future__ import annotations

import fcntl
import io
import os
import posixpath
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.untrusted import secret_name
from ..errors import ClusterError
from ..files.workspace import remove_tree, walk_tree

__all__ = ["MAX_BUNDLE", "common_root", "node_lock", "pack", "unpack"]

MAX_BUNDLE = 512 * 1024 * 1024  # bytes of files; Ray's own working_dir stops at 500 MiB
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


_skipped = secret_name  # keys never leave the driver: the door's one rule for their names


def common_root(paths: Iterable[Path]) -> Path:
    """The nearest folder holding every path (a file stands for its folder). Refused when
    that is the filesystem's root or the home folder: the job would carry the machine."""
    folders = [p if p.is_dir() else p.parent for p in (q.resolve() for q in paths)]
    root = Path(os.path.commonpath([str(f) for f in folders]))
    if root in (Path("/"), Path.home()):
        far = max(folders, key=lambda f: len(os.path.relpath(f, folders[0])))
        raise ClusterError(
            f"{far}: the suite reaches this far, so its files span {root}; keep the suite, "
            "its templates and its graders under one project folder"
        )
    return root


def pack(root: Path, exclude: Iterable[Path] = (), limit: int = MAX_BUNDLE) -> bytes:
    """``root`` as a gzipped tar: regular files, folders and links only, ``.env`` files and
    caches left out, nothing followed. Refuses more than ``limit`` bytes of files."""
    root = root.resolve()
    skip = {p.resolve() for p in exclude}
    buf = io.BytesIO()
    total = 0

    def descend(rel: str) -> bool:
        return Path(rel).name not in SKIPPED_DIRS and root / rel not in skip

    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        # walk_tree keeps its own stack and follows no link: any depth, nothing outside.
        for _rel, _path, entries in walk_tree(root, descend):
            for entry in entries:
                path = Path(entry.path)
                if _skipped(entry.name) or path in skip or entry.name in SKIPPED_DIRS:
                    continue
                info = entry.stat(follow_symlinks=False)
                if stat.S_IFMT(info.st_mode) not in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK):
                    continue  # a FIFO or a socket is nothing a node can use
                rel = str(path.relative_to(root))
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
                    if total > limit:
                        raise ClusterError(
                            f"{root}: the files a cluster job needs pass {limit >> 20} MiB; "
                            "keep the suite, its templates and its graders in one small folder"
                        )
                elif stat.S_ISLNK(info.st_mode) and not _inside(rel, os.readlink(path)):
                    raise ClusterError(
                        f"{root}/{rel}: a link out of the folder a cluster job carries "
                        f"(to {os.readlink(path)}); make it relative and inside, or copy the file"
                    )
                _add(tar, path, rel, info)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, path: Path, rel: str, info: os.stat_result) -> None:
    """One member, never a hard link: a second name of a file travels as a file of its own
    (a node accepts no hard links at all)."""
    member = tar.gettarinfo(str(path), rel)
    if not stat.S_ISREG(info.st_mode):
        tar.addfile(member)
        return
    member.type, member.linkname, member.size = tarfile.REGTYPE, "", info.st_size
    with open(path, "rb") as data:
        tar.addfile(member, data)


def _inside(name: str, link: str) -> bool:
    """Whether a link at ``name`` with text ``link`` stays inside the bundle by its text."""
    if posixpath.isabs(link):
        return False
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
    return target != ".." and not target.startswith("../")


# What a member that may not be unpacked is, by its type.
_KINDS = {
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a device",
    tarfile.BLKTYPE: "a device",
    tarfile.FIFOTYPE: "a FIFO",
}


def _refusal(member: tarfile.TarInfo, links: set[str]) -> str | None:
    """Why ``member`` may not be unpacked (None: it may). ``links``: the symlinks before it."""
    name = member.name
    parts = name.split("/")
    if posixpath.isabs(name) or ".." in parts:
        return "names a place outside the bundle"
    if any("/".join(parts[:i]) in links for i in range(1, len(parts) + 1)):
        return "would be written through a link"
    if member.issym():
        return None if _inside(name, member.linkname) else f"is a link out ({member.linkname})"
    if member.isreg() or member.isdir():
        return None
    return f"is {_KINDS.get(member.type, 'not a file, folder or link')}"


def _check_members(members: list[tarfile.TarInfo]) -> list[str]:
    """Every member checked before a byte is written; returns the links, to check again
    once they all exist (a link may climb out through another: ``a -> .``, ``b -> a/a/..``)."""
    links: set[str] = set()
    for member in members:
        why = _refusal(member, links)
        if why:
            raise ClusterError(
                f"the job's files could not be unpacked here: member {member.name!r} {why}; "
                "a bundle holds only regular files, folders and links inside it"
            )
        if member.issym():
            links.add(member.name.rstrip("/"))
    return sorted(links)


def _check_links(root: Path, links: list[str]) -> None:
    """Each link resolved on disk, through every other link, stays inside ``root``."""
    top = os.path.realpath(root)
    for name in links:
        if os.path.commonpath([os.path.realpath(root / name), top]) != top:
            raise ClusterError(
                f"the job's files could not be unpacked here: member {name!r} is a link that "
                "resolves outside the bundle"
            )


@contextmanager
def node_lock(lock_file: Path) -> Iterator[None]:
    """Held by one process of the node at a time: the first does the work (unpack a bundle,
    load images) and the ones that waited find it done. Never taken through a link (the
    folder is the node's own, checked by its context)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(os.open(lock_file, flags, 0o600), "rb+", buffering=0) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def unpack(fetch: Callable[[], bytes], dest: Path) -> Path:
    """Unpack a bundle at ``dest`` once per node: the first process fetches and unpacks it,
    the others wait on a lock and find it there."""
    with node_lock(dest.parent / ".bundle.lock"):
        done = dest.with_name(dest.name + ".complete")  # beside it: the bundle stays as packed
        if done.exists():
            return dest
        partial = dest.with_name(dest.name + ".partial")
        remove_tree(partial)
        try:
            with tarfile.open(fileobj=io.BytesIO(fetch()), mode="r:gz") as tar:
                members = tar.getmembers()
                links = _check_members(members)
                # "tar" as well: no absolute names, nothing outside `partial`, no set-id bits.
                tar.extractall(partial, members=members, filter="tar")
            _check_links(partial, links)
        except ClusterError:
            remove_tree(partial)
            raise
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            remove_tree(partial)
            raise ClusterError(f"the job's files could not be unpacked here: {exc}") from None
        remove_tree(dest)
        partial.rename(dest)
        done.touch()
    return dest
