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
import hashlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .atomic import storage_error, write_atomic, write_error
from .errors import ConfigError

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

# Deeper input is refused where it is read: Python's decoder and encoder recurse (a
# RecursionError far from the file), and pydantic's own JSON parser stops at 200 levels, so
# a result holding deeper data could not be read back to resume.
MAX_JSON_DEPTH = 100

M = TypeVar("M", bound=BaseModel)


def read_jsonl(path: Path, model: type[M]) -> Iterator[M]:
    """Every line of a results file as ``model``; only a torn last line is skipped."""
    if path.is_file():
        yield from _parse(path.read_bytes(), path, model, 0)


def read_jsonl_from(path: Path, model: type[M], offset: int = 0) -> tuple[list[M], int]:
    """The complete lines from byte ``offset`` on as ``model``, and the offset after the last
    one: a reader following a file being written (``gradebox view``) reads only what is new,
    and a torn last line waits for its newline."""
    if not path.is_file():
        return [], 0
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    return list(_parse(data[:end], path, model, offset)), offset + end


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
    too. A folder that cannot take it is a ``StorageError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
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


def load_json(data: bytes | str, *, file: str, line: int | None = None) -> Any:
    """Parse JSON an operator handed us: UTF-8 text, at most ``MAX_JSON_DEPTH`` deep, every
    string encodable (no lone surrogate escape). Anything else is a ``ConfigError`` naming the
    file (and line), never a traceback from deep in a later step."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                "JSON must be UTF-8",
                file=file,
                line=line,
            ) from None
    try:
        value = json.loads(data)
    except RecursionError:
        raise _too_deep(file, line) from None
    except ValueError as exc:
        raise ConfigError(f"invalid JSON: {exc}", file=file, line=line) from None
    _check_tree(value, file, line)
    return value


def _check_tree(value: Any, file: str, line: int | None) -> None:
    """Depth and lone surrogates, walked with a stack of our own (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _encodable(item, file, line)
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise _too_deep(file, line)
            if isinstance(item, dict):
                for key, sub in item.items():
                    _encodable(key, file, line)
                    stack.append((sub, depth + 1))
            else:
                stack.extend((sub, depth + 1) for sub in item)


def _encodable(text: str, file: str, line: int | None) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"a string holds a lone surrogate (\\u{ord(exc.object[exc.start]):04x}), which is "
            "no Unicode text",
            file=file,
            line=line,
        ) from None


def _too_deep(file: str, line: int | None) -> ConfigError:
    return ConfigError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", file=file, line=line)


def digest(*parts: Any) -> str:
    """A fingerprint of JSON-able parts (bytes are hashed as they are)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, bytes):
            h.update(part)
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return "sha256:" + h.hexdigest()
