"""Locked images moved between machines as one archive (``images save`` / ``images load``).

Image ids differ when the same Dockerfile is built on two machines, so a fleet that must run
the same bytes carries them: the archive holds the lock and a ``docker save`` of every locked
image. Loading reads the archive once, front to back (``load_stream``: a file, or a cluster
node's chunks from the object store), checks its lock against the local lock (and the ids
the caller expects) before any image reaches the engine, tags each image under this
machine's name by its locked id, and verifies each, saying which one differs.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from ..engine import Engine, NotFound
from ..errors import ImageError
from .catalog import LOCK_CAP, qualified
from .lock import Lock, read_lock, verify

__all__ = ["load_images", "load_stream", "save_images"]

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
                # By the id just verified, not by the tag another build may move meanwhile:
                # the archive carries no tags, a load names each image by its locked id.
                engine.save_image(lock.images[name].id, tmp.write)
                info = tarfile.TarInfo(f"{name}.tar")
                info.size = tmp.tell()
                tmp.seek(0)
                tar.addfile(info, tmp)
    return archive.stat().st_size


def load_images(engine: Engine, archive: Path) -> dict[str, str | None]:
    """Load ``archive`` and verify it: name -> None when the loaded image is the locked one,
    else what is wrong. Refuses an archive whose lock differs from the local lock."""
    try:
        stream = open(archive, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise ImageError(f"{archive}: not an images archive ({exc})") from None
    with stream:
        return load_stream(engine, stream, str(archive))


def load_stream(
    engine: Engine, stream: IO[bytes], source: str, expect: dict[str, str] | None = None
) -> dict[str, str | None]:
    """``load_images`` over an archive read once, front to back (a file, or chunks fetched
    one at a time from a cluster's object store): the lock first, checked before a byte of
    an image reaches the engine (against the local lock, and against ``expect``, name -> id,
    when the caller knows the ids it wants), then each image loaded and tagged under this
    machine's name for it (``catalog.qualified``: its $GRADEBOX_IMAGE_REPO may differ from
    the machine that saved), then verified."""
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            lock: Lock | None = None
            loaded: set[str] = set()
            for member in tar:
                if lock is None:
                    lock = _archive_lock(tar, member, source, expect)
                    continue
                name = member.name.removesuffix(".tar")
                data = tar.extractfile(member) if member.isreg() else None
                if name not in lock.images or name in loaded or data is None:
                    raise ImageError(f"{source}: {member.name} is not an image its lock names")
                engine.load_image(data)
                loaded.add(name)
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ImageError(f"{source}: not an images archive ({exc})") from None
    if lock is None:
        raise ImageError(f"{source}: no {LOCK_MEMBER} inside; was it made by images save?")
    missing = sorted(set(lock.images) - loaded)
    if missing:
        raise ImageError(f"{source}: {missing[0]}.tar is missing")
    for name, entry in sorted(lock.images.items()):
        # By the locked id, never by what the archive's own tags say: the name can only
        # point at the locked bytes (an id is the hash of the image's config).
        repository, _, tag = qualified(name).rpartition(":")
        with contextlib.suppress(NotFound, ImageError):  # not loaded: verify names it
            engine.tag(entry.id, repository, tag)
    return verify(engine, lock)


def _archive_lock(
    tar: tarfile.TarFile, member: tarfile.TarInfo, source: str, expect: dict[str, str] | None
) -> Lock:
    """The archive's lock (its first member, as ``save_images`` writes it), refused when it
    names other ids than this machine's lock or than ``expect``."""
    data = tar.extractfile(member) if member.name == LOCK_MEMBER else None
    if data is None:
        raise ImageError(f"{source}: no {LOCK_MEMBER} first; was it made by images save?")
    try:
        lock = Lock.model_validate_json(data.read(LOCK_CAP))
    except ValueError as exc:
        raise ImageError(f"{source}: its lock does not parse ({exc})") from None
    local = read_lock()
    if local is not None:
        differ = [
            n for n, e in lock.images.items() if n in local.images and local.images[n].id != e.id
        ]
        if differ:
            raise ImageError(
                f"{source} holds {', '.join(differ)} with ids that differ from this "
                "machine's images.lock.json: use the driver's lock, or rebuild and re-lock"
            )
    if expect is not None:
        differ = [n for n, e in lock.images.items() if expect.get(n) != e.id]
        if differ:
            raise ImageError(
                f"{source} holds {', '.join(differ)} with ids other than the ones asked for"
            )
    return lock
