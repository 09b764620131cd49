"""Root filesystems of pinned images, unpacked once and shared read-only by every container.

The OCI backend runs graders on the very image ids the Docker backend uses (lock and
``--locked`` included): each id is exported from the engine once into a content-addressed
cache, ``CACHE/rootfs/<id>``, atomically (unpacked beside it, then renamed into place, under a
lock, so concurrent runs unpack it once and never see half of it). Containers bind it
read-only; nothing ever writes into it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EngineError

if TYPE_CHECKING:  # the Docker SDK loads only when an image must be unpacked
    from ._engine import Engine

__all__ = ["RootfsCache", "cache_dir"]


def cache_dir() -> Path:
    """``$GRADEBOX_CACHE``, else ``$XDG_CACHE_HOME/gradebox``, else ``~/.cache/gradebox``."""
    if os.environ.get("GRADEBOX_CACHE"):
        return Path(os.environ["GRADEBOX_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gradebox"


@dataclass
class Entry:
    image_id: str
    path: Path
    size: int


class RootfsCache:
    """``path_for(image_id)``: the unpacked root filesystem of that image, made if missing.

    Example::

        cache = RootfsCache(Engine.connect())
        root = cache.path_for("sha256:5d29...")   # exported once, then reused
    """

    def __init__(self, engine: Engine | None, root: Path | None = None,
                 mount_points: tuple[str, ...] = (),
                 open_points: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.engine = engine
        self.root = (root or cache_dir()) / "rootfs"
        self.mount_points = mount_points
        # The runtime gives a tmpfs the mode of the directory it covers: these must be 1777.
        self.open_points = open_points
        self._known: dict[str, Path] = {}

    def _dir(self, image_id: str) -> Path:
        digest = image_id.removeprefix("sha256:")
        if not digest.isalnum():
            raise EngineError(f"not an image id: {image_id!r}")
        return self.root / digest

    def path_for(self, image_id: str) -> Path:
        if image_id in self._known:
            return self._known[image_id]
        final = self._dir(image_id)
        if not (final / ".gradebox-complete").exists():
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / f"{final.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one unpacker; the others wait, then reuse
                if not (final / ".gradebox-complete").exists():
                    self._unpack(image_id, final)
        self._known[image_id] = final
        return final

    def _unpack(self, image_id: str, final: Path) -> None:
        if self.engine is None:
            raise EngineError(f"image {image_id[:19]} is not unpacked and there is no engine")
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name[:12]}-", dir=self.root))
        try:
            # tar (run as a program, like git) keeps owners, modes, links and device nodes.
            with subprocess.Popen(
                ["tar", "-x", "--numeric-owner", "-C", str(tmp)],
                stdin=subprocess.PIPE, stderr=subprocess.PIPE,
            ) as tar:  # fmt: skip
                assert tar.stdin is not None
                try:
                    self.engine.export_image(image_id, tar.stdin.write)
                finally:
                    tar.stdin.close()
                err = tar.stderr.read() if tar.stderr else b""
            if tar.returncode != 0:
                raise EngineError(f"unpacking {image_id[:19]} failed: {err.decode()[-300:]}")
            os.chmod(tmp, 0o755)  # mkdtemp made it 0700: the container user must enter it
            for point in self.mount_points:
                target = tmp / point.lstrip("/")
                if not os.path.lexists(target):
                    target.mkdir(parents=True, exist_ok=True)
                if point in self.open_points and target.is_dir() and not target.is_symlink():
                    os.chmod(target, 0o1777)
            init = tmp / "sbin" / "gradebox-init"
            if not os.path.lexists(init):
                init.parent.mkdir(parents=True, exist_ok=True)
                init.touch()
            (tmp / ".gradebox-complete").write_text(image_id + "\n")
            if final.exists():  # a half-made leftover of a killed unpacker
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

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
        with open(self.root / f"{final.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            shutil.rmtree(final, ignore_errors=True)
        self._known.pop(image_id, None)


def _du(path: Path) -> int:
    proc = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    try:
        return int(proc.stdout.split()[0])
    except (IndexError, ValueError):
        return 0
