"""JSON read with bounds, and fingerprints, with nothing beyond the standard library.

Two readers, for two writers (docs/security.md): ``load_json`` for what an operator hands us
(a payload, a records file's line): not UTF-8, deeper than ``MAX_OPERATOR_DEPTH`` or a lone
surrogate is a ``ConfigError`` naming the file; ``load_untrusted_json`` for what a grader
printed: deeper than ``MAX_OUTPUT_DEPTH``, a repeated key or anything but JSON is an
``OutputShapeError``, and every string comes back writable. ``protocol`` and ``jsonl``
re-export them; they live here because ``gradebox grade``'s lean path (``cli.grade_lean``)
must read both without importing pydantic.
"""

from __future__ import annotations

import hashlib
import json
import sys

from ..errors import ConfigError

TYPE_CHECKING = False  # not typing's: the lean path of `gradebox grade`
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "MAX_OPERATOR_DEPTH",
    "MAX_OUTPUT_DEPTH",
    "OutputShapeError",
    "clean_text",
    "clean_value",
    "digest",
    "load_json",
    "load_untrusted_json",
]

# Deeper input is refused where it is read: Python's decoder and encoder recurse (a
# RecursionError far from the file), and pydantic's own JSON parser stops at 200 levels, so
# a result holding deeper data could not be read back to resume.
MAX_OPERATOR_DEPTH = 100
"""How deeply JSON an operator hands us may nest (a payload, a records line)."""


def load_json(data: bytes | str, *, file: str, line: int | None = None) -> Any:
    """Parse JSON an operator handed us: UTF-8 text, at most ``MAX_OPERATOR_DEPTH`` deep, every
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
            if depth > MAX_OPERATOR_DEPTH:
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
    return ConfigError(f"JSON nested deeper than {MAX_OPERATOR_DEPTH} levels", file=file, line=line)


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


class OutputShapeError(ValueError):
    """stdout is not JSON, or JSON of no known result shape, or too deep to keep."""


MAX_OUTPUT_DEPTH = 64
"""How deeply a grader's output may nest: deeper is an error, never a crash of the run."""


def clean_text(value: str) -> str:
    """A string that can always be written: lone surrogates (``"\\ud800"``) become U+FFFD."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _clean(value: Any, depth: int = 0) -> Any:
    """``value`` with writable strings; ``depth``: the objects and arrays around it."""
    if depth >= MAX_OUTPUT_DEPTH and isinstance(value, dict | list):
        raise OutputShapeError(f"nested deeper than {MAX_OUTPUT_DEPTH} levels")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, depth + 1) for v in value]
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose key repeats is ambiguous: ``json`` keeps the last value, a reader may
    see the first (``{"pass": false, ..., "pass": true}`` is how an answer spliced into a
    hand-built result reads)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice in one object")
            seen.add(key)
    return value


STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are Python's, not JSON: no other reader (an
    agent's answer checked by ``is-json``, AgentV's ``JSON.parse``) takes them as JSON."""
    raise ValueError(f"{name} is not JSON")


# Found in free text (contains-json): repeated keys allowed, as JSON.parse allows them.
PLAIN_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def parses_as_json(text: str) -> bool:
    """Is ``text`` one JSON document, as JSON.parse reads it (no NaN or Infinity, repeated
    keys allowed)? The ``is-json`` check of an agent's answer."""
    try:
        PLAIN_DECODER.decode(text)
        return True
    except (ValueError, RecursionError):
        return False


_SAFE_RECURSION = 10_000


def load_untrusted_json(text: str) -> Any:
    """Parse what an untrusted process printed: one pass of the C parser (linear in the text,
    whatever it holds), bounded depth, no repeated keys, every string writable.

    Raises ``OutputShapeError`` for anything that is not such JSON."""
    # The C parser stops nesting at the interpreter's recursion limit (RecursionError, not a
    # crash); only a limit raised far above the default could let deep input reach the end of
    # the C stack. Then refuse what could nest that deep (counting is a memchr, not a scan).
    if sys.getrecursionlimit() > _SAFE_RECURSION and (
        text.count("[") + text.count("{") > _SAFE_RECURSION
    ):
        raise OutputShapeError(f"more than {_SAFE_RECURSION} brackets")
    try:
        value = STRICT_DECODER.decode(text)
    except RecursionError:
        raise OutputShapeError(f"nested deeper than {MAX_OUTPUT_DEPTH} levels") from None
    except ValueError as exc:
        raise OutputShapeError(str(exc)) from None
    return _clean(value)


def clean_value(value: Any) -> Any:
    """A parsed value made safe to keep: bounded depth, every string writable."""
    return _clean(value)
