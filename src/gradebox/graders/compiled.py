"""A grader file validated once: its normalised configuration, kept in the user's private cache.

``gradebox grade FILE`` validates ``FILE`` with the pydantic models of ``graders.config``
(the contract) on its first run, and ``store`` keeps the result, plain values only, in
``cache_dir()/graders`` (``private_cache``). A later run of the same file finds it with
``load`` and runs without pydantic (``cli.grade_lean``): the same trust as Python's bytecode,
since only someone who can already run code as this user can write that folder. A grader
runs sandboxed with no view of it, and an agent writes only its workspace.

What the entry may decide is only what validating the file decides: everything read from
elsewhere is read again on every call (the files the command names and its ``files:``, which
are mounted, checked and fingerprinted fresh; ``--allow``; the payload; the workspace). So the
key is what changes the result of validating: the file's bytes, its name (the suffix picks
the loader, the stem is the grader's default name), the dialect asked for, gradebox's version
and the size and mtime of each module that validation runs (an editable install changes them
without a new version). An entry is the key, the configuration and a digest of both: one that
is truncated, edited, for another key or of another shape is a miss, validated again, never
an error and never a verdict.

Cached: ``type: program`` and ``type: script`` files (YAML or JSON) whose image is a name or
the default. Never cached: a grader script given as the file (``.py``, ``.sh``: its kind
depends on its mode bits), an ``image: {build: ...}``, a grader with ``target:`` (it needs the
model targets, loaded with pydantic anyway): those always take the full path.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import namedtuple
from pathlib import Path, PurePosixPath

from .._version import __version__
from ..core.private_cache import PrivateCache
from ..sandbox.defaults import Limits, Security

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FOLDER", "GraderRecord", "cache_key", "load", "store"]

FOLDER = "graders"
_FORMAT = "gradebox-grader/1"
SUFFIXES = (".yaml", ".yml", ".json")

# What validating a grader file runs, relative to the package: a change to any is a new key.
LOADER_MODULES = (
    "_version.py", "core/yamlfile.py", "core/types.py", "core/duration.py", "core/sizes.py",
    "core/scores.py", "core/record.py", "core/fstree.py", "graders/config.py",
    "graders/compiled.py", "sandbox/models.py", "sandbox/defaults.py", "images/resolve.py",
)  # fmt: skip
_PACKAGE = Path(__file__).resolve().parent.parent


def _loader_signature() -> list[object]:
    out: list[object] = []
    for rel in LOADER_MODULES:
        try:
            st = os.stat(_PACKAGE / rel)
            out.append([rel, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([rel, None])
    return out


def cache_key(path: Path, raw: bytes, dialect: str) -> str:
    """The key of ``path``'s validated form, for its bytes ``raw`` read as ``dialect``."""
    h = hashlib.sha256()
    head = [_FORMAT, __version__, _loader_signature(), path.name, dialect]
    h.update(json.dumps(head).encode())
    h.update(b"\0")
    h.update(raw)
    return h.hexdigest()


_FIELDS = (
    "type name image timeout env sub_path files limits security network workspace weight "
    "dialect program args shell command target max_calls pass_score source_dir declared_in"
)


class GraderRecord(namedtuple("GraderRecord", _FIELDS)):
    """A validated grader as a plain, frozen record: what every run reads (``graders.run``,
    ``graders.checks``, ``GraderRun``), made by ``GraderConfig.to_record()`` or loaded from
    the cache. ``target``: the model target its proxy reaches ("": the operator's default),
    None for no proxy; fields of the other type are None."""

    __slots__ = ()

    def display_name(self) -> str:
        if self.name:
            return self.name
        if self.type == "program":
            return PurePosixPath(self.program).name
        first = self.command if isinstance(self.command, str) else " ".join(self.command)
        return first[:60]

    def cached(self) -> dict[str, Any] | None:
        """The entry's values, or None when the record is never cached."""
        if (
            self.type not in _KINDS
            or self.target is not None
            or not isinstance(self.image, str | None)
        ):
            return None
        out = {k: getattr(self, k) for k in (*_SHAPE, *_OPTIONAL_STR, *_KINDS[self.type])}
        return {
            **out,
            "limits": self.limits.as_dict(),
            "security": {
                **self.security.as_dict(),
                "capabilities": list(self.security.capabilities),
            },
        }


def _seal(key: str, values: dict[str, Any]) -> str:
    body = json.dumps([key, values], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def store(
    path: Path, raw: bytes, dialect: str, grader: GraderRecord, cache: PrivateCache | None = None
) -> bool:
    """Keep ``grader``, validated from ``raw`` (``path``'s bytes), for the next run; False
    when it was not kept (never cached, or the cache folder is not private)."""
    values = grader.cached()
    if values is None:
        return False
    key = cache_key(path, raw, dialect)
    entry = {"key": key, "grader": values, "seal": _seal(key, values)}
    data = json.dumps(entry, ensure_ascii=False).encode()
    return (cache or PrivateCache(FOLDER)).write(f"{key}.json", data)


def load(
    path: Path, raw: bytes, dialect: str, cache: PrivateCache | None = None
) -> GraderRecord | None:
    """The validated form of ``path`` (its bytes ``raw``), or None: not cached, or an entry
    that is not exactly what ``store`` wrote for this key."""
    key = cache_key(path, raw, dialect)
    data = (cache or PrivateCache(FOLDER)).read(f"{key}.json")
    if data is None:
        return None
    try:
        entry = json.loads(data)
        values = entry["grader"]
        if entry["key"] != key or entry["seal"] != _seal(key, values) or len(entry) != 3:
            return None
        return _grader(values, path.parent.resolve())
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


# Each value's type in an entry, as ``_plain`` writes it: anything else is a miss.
_OPTIONAL_STR = ("name", "image", "sub_path", "dialect")
_SHAPE = {
    "type": str, "timeout": float, "env": dict, "files": list, "network": str,
    "workspace": str, "weight": float, "limits": dict, "security": dict,
}  # fmt: skip
_KINDS = {"program": {"program": str, "args": list, "shell": bool},
          "script": {"command": (list, str), "pass_score": (float, type(None))}}  # fmt: skip


def _grader(values: dict[str, Any], source_dir: Path) -> GraderRecord | None:
    kind = values.get("type")
    if kind not in _KINDS:
        return None
    shape = {**_SHAPE, **_KINDS[kind]}
    if set(values) != {*shape, *_OPTIONAL_STR}:
        return None
    for name, types in shape.items():
        if not isinstance(values[name], types) or isinstance(values[name], bool) != (types is bool):
            return None
    if any(values[n] is not None and not isinstance(values[n], str) for n in _OPTIONAL_STR):
        return None
    strings = [*values["files"], *values["env"], *values["env"].values()]
    strings += (
        values["args"]
        if kind == "program"
        else (values["command"] if isinstance(values["command"], list) else [])
    )
    if not all(isinstance(s, str) for s in strings):
        return None
    if values["network"] not in ("none", "bridge") or values["workspace"] not in ("ro", "rw"):
        return None
    limits, security = values["limits"], values["security"]
    if set(limits) != set(Limits._fields) or set(security) != set(Security._fields):
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in limits.values()):
        return None
    caps = security["capabilities"]
    if not (
        all(isinstance(security[r.name], bool) for r in Security._rows if r.unit == "on/off")
        and (security["user"] is None or isinstance(security["user"], str))
        and isinstance(caps, list)
        and all(isinstance(c, str) for c in caps)
    ):
        return None
    return GraderRecord(
        **{
            **dict.fromkeys(GraderRecord._fields),
            **values,
            "limits": Limits(**limits),
            "security": Security(**{**security, "capabilities": tuple(caps)}),
            "max_calls": 0,
            "source_dir": source_dir,
        }
    )
