"""Root filesystems of pinned images, unpacked once and shared read-only by every container.

The OCI backend runs graders on the very image ids the Docker backend uses (lock and
``--locked`` included): each id is exported from the engine once into a content-addressed
cache, ``CACHE/rootfs/<id>``, atomically (unpacked beside it, then renamed into place, under a
lock, so concurrent runs unpack it once and never see half of it). Containers bind it
read-only; nothing ever writes into it.

A non-root runner unpacks it as root of its user namespace (``userns.py``, the mapping its
containers use), so that the image's owners are kept, shifted into its subordinate ids. Device
nodes cannot be made there; they are left out (every container gets a ``/dev`` tmpfs of its own
anyway). Such entries are named ``<id>-u<uid>``, never mixed up with root's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import subprocess
import sys
from pathlib import Path

from ..core.private_cache import cache_dir  # every cache of ours lives there
from ..core.record import Record
from ..core.untrusted import private as _private
from ..errors import EngineError
from . import userns
from .init import INIT_PATH

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:  # the Docker SDK loads only when an image must be unpacked
    from collections.abc import Callable, Iterator

    from ._engine import Engine

__all__ = ["RootfsCache", "cache_dir"]


class Entry(Record):
    """One unpacked root filesystem in the cache: ``image_id``, ``path``, ``size``."""

    __slots__ = _fields = ("image_id", "path", "size")


class RootfsCache:
    """``path_for(image_id)``: the unpacked root filesystem of that image, made if missing.

    Example::

        cache = RootfsCache(Engine.connect())
        root = cache.path_for("sha256:5d29...")   # exported once, then reused
    """

    def __init__(
        self,
        engine: Engine | None,
        root: Path | None = None,
        mount_points: tuple[str, ...] = (),
        open_points: tuple[str, ...] = (),
        mapping: userns.IdMap | None = None,
    ) -> None:
        self.engine = engine
        self.mapping = mapping  # unpack in a user namespace with this mapping (non-root)
        self.root = (root or cache_dir()) / "rootfs"
        self.mount_points = mount_points
        # The runtime gives a tmpfs the mode of the directory it covers: these must be 1777.
        self.open_points = open_points
        self._known: dict[str, Path] = {}

    def _dir(self, image_id: str) -> Path:
        digest = image_id.removeprefix("sha256:")
        if not digest.isalnum():
            raise EngineError(f"not an image id: {image_id!r}")
        return self.root / (f"{digest}-u{os.getuid()}" if self.mapping else digest)

    def path_for(self, image_id: str) -> Path:
        if image_id in self._known:
            return self._known[image_id]
        final = self._dir(image_id)
        # Unpacked with the image's owners and modes, an entry holds its set-user-id files,
        # device nodes and 1777 folders: no other local user may reach them, even in a cache
        # folder others may read (an existing GRADEBOX_CACHE). 0700 is enough for the
        # runtime: it binds the entry as root (of a user namespace mapping our id).
        with contextlib.suppress(OSError):
            os.chmod(self.root, 0o700)
        if not _complete(final):
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            with _locked(self.root / f"{final.name}.lock"):
                # One unpacker; the others wait, then reuse.
                if not _complete(final):
                    self._unpack(image_id, final)
        self._known[image_id] = final
        return final

    def _unpack(self, image_id: str, final: Path) -> None:
        """Export ``image_id`` into ``tar`` (a program, like git: it keeps owners, modes,
        links and device nodes), as root of the user namespace for a non-root runner (see
        the module's docstring), then make the mount points and the init's; installed as
        ``final`` once whole."""
        if self.engine is None:
            raise EngineError(f"image {image_id[:19]} is not unpacked and there is no engine")
        import tempfile  # here: only an unpack needs it, not a run from the cache

        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name[:12]}-", dir=self.root))
        # No device node can be made in a user namespace: those are left out there.
        devices = ' --anchored --exclude="dev/*" --exclude="./dev/*"' if self.mapping else ""
        # tar, then the mount points and the marker made by _FINISH (below), both as the
        # user-namespace root for a non-root runner.
        script = (
            f'set -e; d="$1"; shift; tar -x --numeric-owner{devices} -C "$d"\n'
            'chmod 755 "$d"\n'  # mkdtemp made it 0700: the container user must enter it
            'exec "$@"\n'
        )
        points = [("+" if p in self.open_points else "") + p for p in self.mount_points]
        finish = [sys.executable, "-I", "-S", "-c", _FINISH, str(tmp), image_id, INIT_PATH, *points]
        argv = ["/bin/sh", "-c", script, "unpack", str(tmp), *finish]
        try:
            # Its errors in a file, not a pipe: a pipe nobody drains while the export is
            # written would stop tar once full.
            with tempfile.TemporaryFile() as errors:
                with userns.spawn(argv, self.mapping, stdin=subprocess.PIPE, stderr=errors) as tar:
                    assert tar.stdin is not None
                    # BrokenPipeError: tar ended early, and says why.
                    with contextlib.suppress(BrokenPipeError), tar.stdin:
                        self.engine.export_image(image_id, tar.stdin.write)
                errors.seek(0)
                err = errors.read().decode(errors="replace")[-300:]
            if tar.returncode != 0:
                raise EngineError(f"unpacking {image_id[:19]} failed: {err}")
            _install(tmp, final, self._rmtree)
        except BaseException:
            self._rmtree(tmp)
            raise

    def _rmtree(self, path: Path) -> None:
        """Remove an entry: its files belong to subordinate ids for a non-root runner."""
        mine = os.geteuid() != 0 and path.name.split("-u")[-1] == str(os.getuid())
        if self.mapping is None and not mine:
            import shutil  # here: it loads bz2 and lzma (~2 ms)

            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            userns.run(["rm", "-rf", "--", str(path)], mapping=self.mapping)

    def entries(self) -> list[Entry]:
        out = []
        if not self.root.is_dir():
            return out
        for path in sorted(self.root.iterdir()):
            marker = path / ".gradebox-complete"
            if path.is_dir() and marker.exists():
                size = _du(path)
                out.append(Entry(marker.read_text().strip(), path, size))
        return out

    def remove(self, image_id: str) -> None:
        final = self._dir(image_id)
        with _locked(self.root / f"{final.name}.lock"):
            self._rmtree(final)
        self._known.pop(image_id, None)


def _complete(entry: Path) -> bool:
    """An entry unpacked whole, by us: a folder of ours (no link) that nobody else may write,
    holding our marker. Anything else is unpacked again: the runtime mounts it by name, so
    its maker chooses every program a grader runs (cache_dir() refuses a cache folder others
    can write; this keeps the rule for a cache given its own ``root``)."""
    try:
        st = os.lstat(entry)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and _private(st) and (entry / ".gradebox-complete").exists()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path``, never through a link (one there is another's)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # a link (ELOOP), a full disk: the run says so in one line
        raise EngineError(f"{path}: cannot lock ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _du(path: Path) -> int:
    proc = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    try:
        return int(proc.stdout.split()[0])
    except (IndexError, ValueError):
        return 0


def _install(tmp: Path, final: Path, rmtree: Callable[[Path], object]) -> None:
    """Put the unpacked ``tmp`` in place as ``final``, whatever was there."""
    if final.is_symlink():  # not ours (_complete): the link goes, not what it names
        final.unlink()
    elif final.exists():  # a half-made leftover of a killed unpacker, or not ours
        rmtree(final)
    os.rename(tmp, final)


# Run after tar over the unpacked tree, as its owner (root, or root of the user namespace): the
# mount points (a "+" first: mode 1777, as a tmpfs takes the mode of what it covers), the
# init's, and the marker. The tree is the image's, so a grader's Dockerfile (``image: {build}``)
# chose its links: each path is walked by descriptor, a link resolved inside the tree as the
# runtime resolves a mount's destination (an absolute one from the tree's top, ".." never
# above it), so that no link makes a folder, a mode or a file on the host. Standard library
# only (python -I -S: it runs in the user namespace without our packages).
_FINISH = r"""
import os, stat, sys
root, image_id, init, points = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
D = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
top = os.open(root, D)
# The tree's top is ours, whatever tar made of a "./" member (another id's, it could swap
# any folder under the containers): the owner of the folder that holds it.
os.fchown(top, os.stat(os.path.dirname(root)).st_uid, -1)

def parent_of(path):
    # A descriptor of path's folder inside the tree (made where missing), and its last name.
    names, stack, hops = [n for n in path.split("/") if n], [top], 0
    while len(names) > 1:
        name = names.pop(0)
        if name == ".":
            continue
        if name == "..":
            if len(stack) > 1:
                os.close(stack.pop())
            continue
        try:
            st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
        except FileNotFoundError:
            os.mkdir(name, 0o755, dir_fd=stack[-1])
            st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                raise OSError(f"too many links on the way to {path}")
            link = os.readlink(name, dir_fd=stack[-1])
            if link.startswith("/"):
                for fd in stack[1:]:
                    os.close(fd)
                stack = [top]
            names = [n for n in link.split("/") if n] + names
            continue
        stack.append(os.open(name, D, dir_fd=stack[-1]))  # not a folder: refused here
    for fd in stack[1:-1]:
        os.close(fd)
    return stack[-1], (names or ["."])[0]

def lexists(name, fd):
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False

for point in points:
    open_point = point.startswith("+")
    fd, name = parent_of(point.lstrip("+"))
    if not lexists(name, fd):
        os.mkdir(name, 0o755, dir_fd=fd)
    if open_point and stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
        sub = os.open(name, D, dir_fd=fd)
        os.fchmod(sub, 0o1777)
        os.close(sub)
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
fd, name = parent_of(init)
if not lexists(name, fd):
    os.close(os.open(name, NEW, 0o644, dir_fd=fd))
# The marker, last: whatever the image put under its name goes first (a link: not followed).
if lexists(".gradebox-complete", top):
    os.unlink(".gradebox-complete", dir_fd=top)
out = os.open(".gradebox-complete", NEW, 0o644, dir_fd=top)
os.write(out, (image_id + "\n").encode())
os.close(out)
"""
