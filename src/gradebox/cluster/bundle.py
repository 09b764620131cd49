"""What travels with a cluster job: the folder holding the suite (or grader) and every file it
names, packed once on the driver and unpacked once per node.

Links stay links (a template's symlink is part of the template) and extraction never writes
outside its folder. ``.env`` files stay on the driver: a node reads keys from its own
environment, never from the job.
"""

from __future__ import annotations

import fcntl
import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import ClusterError
from ..workspace import remove_tree, walk_tree

__all__ = ["MAX_BUNDLE", "common_root", "pack", "unpack"]

MAX_BUNDLE = 512 * 1024 * 1024  # bytes of files; Ray's own working_dir stops at 500 MiB
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def _skipped(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")  # keys never leave the driver


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
                if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
                        or stat.S_ISLNK(info.st_mode)):  # fmt: skip
                    continue  # a FIFO or a socket is nothing a node can use
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
                    if total > limit:
                        raise ClusterError(
                            f"{root}: the files a cluster job needs pass {limit >> 20} MiB; "
                            "keep the suite, its templates and its graders in one small folder"
                        )
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buf.getvalue()


def unpack(fetch: Callable[[], bytes], dest: Path) -> Path:
    """Unpack a bundle at ``dest`` once per node: the first process fetches and unpacks it,
    the others wait on a lock and find it there."""
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(dest.parent / ".bundle.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = dest.with_name(dest.name + ".complete")  # beside it: the bundle stays as packed
        if done.exists():
            return dest
        partial = dest.with_name(dest.name + ".partial")
        remove_tree(partial)
        try:
            with tarfile.open(fileobj=io.BytesIO(fetch()), mode="r:gz") as tar:
                # "tar": no absolute names, nothing written outside `partial`, no set-id bits;
                # a link may point anywhere (a template may hold one), never written through.
                tar.extractall(partial, filter="tar")
        except (tarfile.TarError, OSError) as exc:
            remove_tree(partial)
            raise ClusterError(f"the job's files could not be unpacked here: {exc}") from None
        remove_tree(dest)
        partial.rename(dest)
        done.touch()
    return dest
