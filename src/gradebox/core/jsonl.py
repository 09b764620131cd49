"""Result files: one JSON object per line, appended as results finish, read back to resume.

A runner killed mid-write leaves at most one torn line, the last one, without its newline:
that line is dropped. Any other line that does not parse is damage nobody explained, and
resuming over it would silently lose or fake results, so it is an error naming the line.

A line is appended whole or not at all: one ``os.write`` on an ``O_APPEND`` descriptor, and
a write the disk cut short is truncated back to where it began, so a full disk leaves every
earlier line readable and ``--resume`` continues once there is room (``StorageError``).

``load_json`` reads the JSON an operator hands us (a payload, a records file's lines): one
line naming the file for what is not UTF-8, too deep, or holds a lone surrogate.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .atomic import storage_error, write_atomic, write_error
from .json_bounds import MAX_OPERATOR_DEPTH, digest, load_json
from .untrusted import open_append, open_regular

MAX_JSON_DEPTH = MAX_OPERATOR_DEPTH
RESULTS_CAP = 1 << 30  # a results file: large, but never a sparse or endless one read whole

__all__ = [
    "MAX_JSON_DEPTH",
    "JsonlWriter",
    "digest",
    "load_json",
    "open_jsonl_for_append",
    "read_jsonl",
    "read_jsonl_from",
    "rewrite_jsonl",
]

M = TypeVar("M", bound=BaseModel)


def read_jsonl(path: Path, model: type[M]) -> Iterator[M]:
    """Every line of a results file as ``model``; only a torn last line is skipped. None
    when it is not a regular file (a FIFO in a folder another user wrote would hang us)."""
    fd = open_regular(path)
    if fd is not None:
        yield from _parse(_read_from(fd, path, 0), path, model, 0)


def read_jsonl_from(path: Path, model: type[M], offset: int = 0) -> tuple[list[M], int]:
    """The complete lines from byte ``offset`` on as ``model``, and the offset after the last
    one: a reader following a file being written (``gradebox view``) reads only what is new,
    and a torn last line waits for its newline."""
    fd = open_regular(path)
    if fd is None:
        return [], 0
    data = _read_from(fd, path, offset)
    end = data.rfind(b"\n") + 1
    return list(_parse(data[:end], path, model, offset)), offset + end


def _read_from(fd: int, path: Path, offset: int) -> bytes:
    """The bytes of ``fd`` from ``offset`` on (closing it), refused in one line past
    ``RESULTS_CAP``: a run folder another user wrote may hold a sparse 100 GiB file."""
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size - offset <= RESULTS_CAP:
            f.seek(offset)
            data = f.read(RESULTS_CAP + 1)
            if len(data) <= RESULTS_CAP:
                return data
    raise ConfigError(f"over {RESULTS_CAP >> 20} MiB: not a results file to read", file=str(path))


def _parse(data: bytes, path: Path, model: type[M], offset: int) -> Iterator[M]:
    complete = data.split(b"\n")[:-1]  # the piece after the last newline is torn (or empty)
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            yield model.model_validate_json(line)
        except (ValidationError, ValueError) as exc:
            where = f"line {number}" if not offset else f"line {number} after byte {offset}"
            raise ConfigError(
                f"{where} is not a valid result ({str(exc).splitlines()[0]}); refusing "
                "to resume over it: repair or remove the file to start over",
                file=str(path),
                line=None if offset else number,
            ) from None


def open_jsonl_for_append(path: Path) -> int:
    """Open a JSONL file to append to (a descriptor, ``O_APPEND``), dropping a torn last line
    a killed writer left: an append after it would be glued onto it and spoil a good record
    too. A folder that cannot take it is a ``StorageError``. Opened by ``untrusted.open_append``:
    a link or a file another user left under the name is refused, never followed, emptied or
    appended to (root would write agent text into a file of their choosing)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_append(path)
    except OSError as exc:
        raise write_error(exc, path, "results folder") from None
    try:
        size = os.fstat(fd).st_size
        if size:
            # Only the tail is read: the last newline is within the last line's length.
            tail, start = b"", size
            while start > 0 and b"\n" not in tail:
                start = max(0, start - (1 << 16))
                tail = os.pread(fd, size - start, start)
            if not tail.endswith(b"\n"):
                cut = tail.rfind(b"\n")
                os.ftruncate(fd, start + cut + 1 if cut >= 0 else 0)
    except OSError as exc:
        os.close(fd)
        raise storage_error(exc, path.parent, "results folder") from None
    return fd


def rewrite_jsonl(path: Path, items: Iterable[BaseModel]) -> None:
    """Replace the file with exactly ``items`` (``write_atomic``: a crash or a full disk
    leaves the old file whole, never a part of the new one)."""
    body = b"".join(item.model_dump_json(by_alias=True).encode() + b"\n" for item in items)
    write_atomic(path, body, what="results folder")


class JsonlWriter:
    """Appends one JSON line per call, whole or not at all, fsynced, from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = open_jsonl_for_append(path)
        self._lock = threading.Lock()

    def append(self, result: BaseModel) -> None:
        """Write one line; a folder that cannot take it all leaves the file as it was and
        raises ``StorageError``."""
        line = result.model_dump_json(by_alias=True).encode() + b"\n"
        with self._lock:
            start = os.fstat(self._fd).st_size
            try:
                # One write on an O_APPEND descriptor: the line lands after every other line
                # (another process's too) in one piece. A short count means the disk is full.
                written = os.write(self._fd, line)
                if written != len(line):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                os.fsync(self._fd)
            except OSError as exc:
                # Back to the last whole line (the file is ours alone: the folder is locked).
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)
                raise storage_error(
                    exc, self.path.parent, f"cannot write {self.path.name} in results folder"
                ) from None

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
