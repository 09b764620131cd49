"""The lock: which image id each name must be (``images.lock.json``: in a checkout
``images/``, for an installed gradebox the user's data folder; ``catalog.lock_dir``)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..core.atomic import write_atomic
from ..engine import Engine
from ..errors import ImageError
from .build import _current, status
from .catalog import BASE, LOCK_FILE, lock_bytes, lock_dir, lock_folder


class LockEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    base_id: str | None = None
    inputs: str | None = None


class Lock(BaseModel):
    """``images/images.lock.json``: name -> the image id that was built and reviewed."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    images: dict[str, LockEntry] = Field(default_factory=dict)


def lock_path(directory: Path | None = None) -> Path:
    """``images.lock.json`` in ``directory``, else where this gradebox keeps it
    (``catalog.lock_dir``: the checkout's images/, or the user's data folder)."""
    return (directory or lock_dir()) / LOCK_FILE


def read_lock(path: Path | None = None) -> Lock | None:
    """The lock at ``path`` (else ``lock_path()``), None when there is none; an ``ImageError``
    naming it when another local user could have written it (``catalog.lock_bytes``)."""
    path = path or lock_path()
    data = lock_bytes(path)
    if data is None:
        return None
    try:
        return Lock.model_validate_json(data)
    except ValueError as exc:
        raise ImageError(f"{path}: not a valid lock file ({str(exc).splitlines()[0]})") from None


def write_lock(engine: Engine, path: Path | None = None) -> Lock:
    """Record every built image's id, base id and input hash. Refuses out-of-date images, and
    a folder another local user could change (``catalog.lock_folder``); a link left under the
    name is replaced, never written through (``write_atomic``)."""
    statuses = status(engine)
    stale = [s.name for s in statuses if not s.up_to_date]
    if stale:
        raise ImageError(
            f"cannot lock images that are missing or out of date: {', '.join(stale)}; "
            "run `gradebox images build` first"
        )
    base_id = statuses[0].id
    lock = Lock(
        images={
            s.name: LockEntry(
                id=str(s.id), base_id=None if s.name == BASE else base_id, inputs=s.inputs
            )
            for s in statuses
        }
    )
    path = path or lock_path()
    lock_folder(path.parent)
    write_atomic(path, json.dumps(lock.model_dump(), indent=2, sort_keys=True) + "\n")
    return lock


def verify(engine: Engine, lock: Lock) -> dict[str, str | None]:
    """name -> None when the local image is the locked one, else what is wrong."""
    problems: dict[str, str | None] = {}
    for name, entry in sorted(lock.images.items()):
        iid, _, _ = _current(engine, name)
        if iid is None:
            problems[name] = "missing"
        elif iid != entry.id:
            problems[name] = f"is {iid[7:19]}, the lock says {entry.id[7:19]}"
        else:
            problems[name] = None
    return problems
