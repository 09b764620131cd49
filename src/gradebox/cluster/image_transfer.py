"""Locked images sent to the nodes that lack them, through Ray's object store.

The driver writes the archive ``gradebox images save`` writes (``images.archive``), of the
images some node lacks and no more, and puts it in the object store in chunks of
``CHUNK`` bytes. A node that lacks them reads the chunks one at a time, in order, into the
load ``gradebox images load`` runs (``archive.load_stream``): the archive's lock is checked
against the ids the driver planned before a byte reaches the engine, and every image is
verified once loaded. One process per node loads; the others wait on a lock and find the
images there. A node holding other bytes under a name is never sent anything: it is refused.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine import Engine
from ..images.archive import load_stream, save_images
from ..images.lock import Lock, LockEntry
from .bundle import node_lock

__all__ = ["CHUNK", "load_once", "put_archive"]

CHUNK = 64 << 20  # bytes per object: small next to a node's object store, few round trips


def put_archive(
    engine: Engine, ids: dict[str, str], put: Callable[[bytes], Any]
) -> tuple[list[Any], int]:
    """The archive of ``ids`` (name -> the id the driver planned), as ``put``'s refs of its
    chunks in order, and its size in bytes. Refused (``ImageError``) when the driver's own
    image under a name is no longer the planned id."""
    lock = Lock(images={name: LockEntry(id=iid) for name, iid in sorted(ids.items())})
    refs = []
    with tempfile.TemporaryDirectory(prefix="gradebox-images-") as tmp:
        archive = Path(tmp) / "images.tar"
        size = save_images(engine, lock, archive)
        with open(archive, "rb") as data:
            while chunk := data.read(CHUNK):
                refs.append(put(chunk))
    return refs, size


def load_once(
    lock_file: Path,
    lacking: Callable[[], bool],
    engine: Engine,
    stream: Callable[[], io.RawIOBase],
    expect: dict[str, str],
) -> dict[str, str | None] | None:
    """Load the sent archive unless this node holds its images already: asked again under a
    lock every process of the node takes (``lacking``), so the first one loads and the ones
    that waited find them. What ``load_stream`` verified; None when nothing was loaded."""
    with node_lock(lock_file):
        if not lacking():
            return None
        with io.BufferedReader(stream(), CHUNK >> 4) as data:
            return load_stream(engine, data, "the images the driver sent", expect=expect)
