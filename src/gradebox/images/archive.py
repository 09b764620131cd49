"""Locked images moved between machines as one archive (``images save`` / ``images load``).

Image ids differ when the same Dockerfile is built on two machines, so a fleet that must run
the same bytes carries them: the archive holds the lock and a ``docker save`` of every locked
image. Loading reads the archive once, front to back (``load_stream``: a file, or a cluster
node's chunks from the object store), checks its lock against the local lock (and the ids
the caller expects) before any image reaches the engine, tags each image under this
machine's name by its locked id, and verifies each, saying which one differs. A load refused
midway (a later member) removes the images it had brought to the engine.

An archive names nothing on the machine but by its lock: short names (``python``) put under
this machine's repository, each by a sha256 id. The tags a ``docker save`` inside it carries
(its ``manifest.json``'s ``RepoTags``, ``repositories``, an OCI ``index.json``'s names) would
move any name on the engine, a non-gradebox image's too, so they never reach it
(``IterStream`` over ``_untagged``); nor does a member holding an image besides its locked one.
"""

from __future__ import annotations

import contextlib
import io
import json
import posixpath
import re
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from ..engine import Engine, NotFound
from ..errors import EngineError, ImageError
from .catalog import LOCK_CAP, qualified
from .lock import Lock, read_lock, verify

__all__ = ["IterStream", "load_images", "load_stream", "save_images"]

LOCK_MEMBER = "images.lock.json"
SHORT_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")  # ``qualified`` puts it under our repo
IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
MANIFEST_CAP = 1 << 20  # bytes of a ``docker save``'s manifest.json or index.json (~1 KiB)
TAG_MEMBERS = ("repositories",)  # a legacy ``docker save``'s tags: dropped
PIECE = 1 << 20  # bytes of an image handed to the engine at a time


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
    with _undone_if_refused(engine) as added:
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
                    where = f"{source}: {member.name}"
                    iid = lock.images[name].id
                    if not _present(engine, iid):
                        added.append(iid)
                    engine.load_image(IterStream(_untagged(data, iid, where)))
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


@contextlib.contextmanager
def _undone_if_refused(engine: Engine) -> Iterator[list[str]]:
    """The ids a load is about to bring to the engine (each absent before it), removed again
    when the load is refused (or fails) after an image reached the engine: an archive is
    checked member by member as it streams, so a refused third member comes after the first
    two were loaded. Only what the load added goes, and only while nothing names or uses it:
    other runs and other users share the engine (``Engine.remove_image`` is never forced)."""
    added: list[str] = []
    try:
        yield added
    except BaseException:
        for iid in added:
            with contextlib.suppress(EngineError, ImageError):  # absent, named, or in use
                if not engine.image(iid).get("RepoTags"):  # nobody has named it meanwhile
                    engine.remove_image(iid)
        raise


def _present(engine: Engine, image: str) -> bool:
    try:
        engine.image(image)
    except (NotFound, ImageError):
        return False
    return True


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
    for name, entry in sorted(lock.images.items()):
        if not (SHORT_NAME.fullmatch(name) and IMAGE_ID.fullmatch(entry.id)):
            raise ImageError(
                f"{source}: its lock names {name[:80]!r} as {entry.id[:80]!r}; an archive holds "
                "short image names (python) by sha256 id, as `gradebox images save` writes them"
            )
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


class IterStream(io.RawIOBase):
    """An iterable of byte strings as a stream the engine's client reads: each taken when the
    reader reaches it (an exception from it stops the read, and so the load)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = iter(chunks)
        self.chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.chunk:
            nxt = next(self.chunks, None)
            if nxt is None:
                return 0
            self.chunk = memoryview(nxt)
        n = min(len(buffer), len(self.chunk))
        buffer[:n] = self.chunk[:n]
        self.chunk = self.chunk[n:]
        return n


def _untagged(data: IO[bytes], image_id: str, where: str) -> Iterator[bytes]:
    """One image's ``docker save`` (``data``), passed on member by member as the engine may
    load it, in pieces of at most ``PIECE`` bytes (a layer is never held whole): without the
    tags it carries, and refused (``ImageError``; the engine then reads a cut stream and
    loads nothing) unless its manifest names ``image_id`` and no other image. Member names
    must be plain and unique: the engine unpacks ``./manifest.json`` or a second
    ``manifest.json`` onto the first."""
    seen: set[str] = set()
    manifest = False
    with tarfile.open(fileobj=data, mode="r|") as src:
        for member in src:
            name = member.name
            if name in seen or posixpath.normpath(name) != name or name.startswith(("/", "..")):
                raise ImageError(f"{where}: its member {name[:80]!r} is not a plain, unique name")
            seen.add(name)
            if name in TAG_MEMBERS:
                continue
            body = src.extractfile(member) if member.isreg() else None
            if name in ("manifest.json", "index.json"):
                if body is None:
                    raise ImageError(f"{where}: its {name} is not a file")
                body = io.BytesIO(_json_member(body, where, name, image_id))
                manifest = manifest or name == "manifest.json"
                member.size = len(body.getvalue())
            elif body is None:
                member.size = 0  # a link or folder carries no data (whatever its header said)
            # The header written anew from what is sent: a member's own extended header
            # (a pax "size") could say otherwise; a sparse file is sent whole, as a file.
            member.pax_headers = {}
            if body is not None:
                member.type = tarfile.REGTYPE
            yield member.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            if body is not None:
                while piece := body.read(PIECE):
                    yield piece
                yield bytes(-member.size % tarfile.BLOCKSIZE)
        if not manifest:
            raise ImageError(f"{where}: no manifest.json inside; was it made by images save?")
    yield bytes(2 * tarfile.BLOCKSIZE)  # the end of the archive


def _json_member(body: IO[bytes], where: str, name: str, image_id: str) -> bytes:
    """A ``docker save``'s manifest.json (it must hold ``image_id`` alone) or OCI index.json,
    written again without the names it gives."""
    raw = body.read(MANIFEST_CAP + 1)
    try:
        if len(raw) > MANIFEST_CAP:
            raise ValueError(f"over {MANIFEST_CAP >> 20} MiB")
        doc = json.loads(raw)
        if name == "index.json":
            for descriptor in doc.get("manifests") or ():
                descriptor.pop("annotations", None)  # io.containerd.image.name, ref.name
            return json.dumps(doc).encode()
        configs = [entry["Config"] for entry in doc]
        for entry in doc:
            entry["RepoTags"] = None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ImageError(f"{where}: its {name} does not parse ({exc})") from None
    hex_id = image_id.removeprefix("sha256:")
    if configs not in ([f"{hex_id}.json"], [f"blobs/sha256/{hex_id}"]):
        raise ImageError(
            f"{where} holds {len(configs)} image(s), not image {image_id[7:19]} alone as its "
            "lock says"
        )
    return json.dumps(doc).encode()
