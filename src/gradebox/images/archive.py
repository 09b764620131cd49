"""Locked images moved between machines as one archive (``images save`` / ``images load``).

Image ids differ when the same Dockerfile is built on two machines, so a fleet that must run
the same bytes carries them: the archive holds the lock and a ``docker save`` of every locked
image. Loading verifies each image against the archive's lock (and against the local lock
when there is one) and says which one differs.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

from ..engine import Engine
from ..errors import ImageError
from .catalog import qualified
from .lock import Lock, read_lock, verify

__all__ = ["load_images", "save_images"]

LOCK_MEMBER = "images.lock.json"


def save_images(engine: Engine, lock: Lock, archive: Path, names: list[str] | None = None) -> int:
    """Write ``archive``: the lock and each locked image (all, or ``names``). The bytes."""
    wanted = names or sorted(lock.images)
    unknown = [n for n in wanted if n not in lock.images]
    if unknown:
        raise ImageError(f"not in the lock: {', '.join(unknown)}")
    problems = {k: v for k, v in verify(engine, lock).items() if k in wanted and v}
    if problems:
        name, why = next(iter(problems.items()))
        raise ImageError(f"image {name} {why}: build and lock before saving")
    subset = Lock(images={n: lock.images[n] for n in wanted})
    with tarfile.open(archive, "w") as tar:
        data = subset.model_dump_json(indent=2).encode()
        info = tarfile.TarInfo(LOCK_MEMBER)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name in wanted:
            with tempfile.TemporaryFile() as tmp:
                engine.save_image(qualified(name), tmp.write)
                info = tarfile.TarInfo(f"{name}.tar")
                info.size = tmp.tell()
                tmp.seek(0)
                tar.addfile(info, tmp)
    return archive.stat().st_size


def load_images(engine: Engine, archive: Path) -> dict[str, str | None]:
    """Load ``archive`` and verify it: name -> None when the loaded image is the locked one,
    else what is wrong. Refuses an archive whose lock differs from the local lock."""
    try:
        tar = tarfile.open(archive, "r")  # noqa: SIM115 (closed by the with below)
    except (OSError, tarfile.TarError) as exc:
        raise ImageError(f"{archive}: not an images archive ({exc})") from None
    with tar:
        member = tar.extractfile(LOCK_MEMBER) if LOCK_MEMBER in tar.getnames() else None
        if member is None:
            raise ImageError(f"{archive}: no {LOCK_MEMBER} inside; was it made by images save?")
        try:
            lock = Lock.model_validate_json(member.read())
        except ValueError as exc:
            raise ImageError(f"{archive}: its lock does not parse ({exc})") from None
        local = read_lock()
        if local is not None:
            differ = [
                n
                for n, e in lock.images.items()
                if n in local.images and local.images[n].id != e.id
            ]
            if differ:
                raise ImageError(
                    f"{archive} holds {', '.join(differ)} with ids that differ from this "
                    "machine's images.lock.json: use the driver's lock, or rebuild and re-lock"
                )
        for name in lock.images:
            stream = tar.extractfile(f"{name}.tar")
            if stream is None:
                raise ImageError(f"{archive}: {name}.tar is missing")
            engine.load_image(stream)
    return verify(engine, lock)
