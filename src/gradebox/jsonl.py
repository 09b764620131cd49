"""Result files: one JSON object per line, appended as results finish, read back to resume.

A runner killed mid-write leaves at most one torn line, the last one, without its newline:
that line is dropped. Any other line that does not parse is damage nobody explained, and
resuming over it would silently lose or fake results, so it is an error naming the line.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import ConfigError

__all__ = [
    "JsonlWriter",
    "digest",
    "open_jsonl_for_append",
    "read_jsonl",
    "read_jsonl_from",
    "rewrite_jsonl",
]

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


def open_jsonl_for_append(path: Path) -> TextIO:
    """Open a JSONL file to append to, dropping a torn last line a killed writer left: an
    append after it would be glued onto it and spoil a good record too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
    return path.open("a", encoding="utf-8")


def rewrite_jsonl(path: Path, items: Iterable[BaseModel]) -> None:
    """Replace the file with exactly ``items`` (atomically: a crash leaves old or new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for item in items:
            f.write(item.model_dump_json(by_alias=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class JsonlWriter:
    """Appends one JSON line per call, flushed and fsynced, from any thread."""

    def __init__(self, path: Path) -> None:
        self._file = open_jsonl_for_append(path)
        self._lock = threading.Lock()

    def append(self, result: BaseModel) -> None:
        line = result.model_dump_json(by_alias=True) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


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
