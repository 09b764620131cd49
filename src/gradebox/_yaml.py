"""Load YAML keeping line numbers, and turn pydantic errors into ``file:line: field: message``.

This is the one edge where configuration text becomes typed objects: everything inward gets
validated models, never dicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError, ConfigErrors

__all__ = ["LineMap", "load_yaml_file", "validate"]

M = TypeVar("M", bound=BaseModel)
LineMap = dict[tuple[str, ...], int]

# pydantic's stock wording, rewritten for people who write YAML rather than Python.
_REWRITES = {
    "Extra inputs are not permitted": "unknown field (check its spelling)",
    "Field required": "required field is missing",
}


def _walk(node: yaml.Node, path: tuple[str, ...], lines: LineMap) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            lines[child] = key.start_mark.line + 1
            _walk(value, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, str(index)), lines)


class _Lines(dict[tuple[str, ...], int]):
    """Key path -> line, computed on first use: only an error needs line numbers, so the
    common path parses once with the fast C loader and keeps no node tree in memory."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text: str | None = text

    def _fill(self) -> None:
        if self._text is not None:
            text, self._text = self._text, None
            try:
                node = yaml.compose(text, Loader=yaml.SafeLoader)
            except yaml.YAMLError:
                # The C loader read it and the Python one does not (their corners differ):
                # errors then go without line numbers rather than with a traceback.
                return
            if node is not None:
                _walk(node, (), self)

    def __bool__(self) -> bool:
        return True

    def get(self, key, default=None):  # type: ignore[no-untyped-def,override]
        self._fill()
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._fill()
        return super().__contains__(key)

    def __getitem__(self, key: tuple[str, ...]) -> int:
        self._fill()
        return super().__getitem__(key)


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_file(path: Path) -> tuple[Any, LineMap]:
    """Parse ``path`` (YAML or JSON); the map from key paths to 1-based lines is lazy."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path)) from None
    try:
        data = yaml.load(text, Loader=_FAST_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            f"invalid YAML: {problem}", file=str(path), line=mark.line + 1 if mark else None
        ) from None
    return data, _Lines(text)


def _line_for(loc: tuple[str, ...], lines: LineMap) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _clean_loc(loc: tuple[Any, ...]) -> tuple[str, ...]:
    # pydantic marks dict-key errors with a "[key]" step, and the member of a tagged union
    # with its tag (graders.entries names them "<Kind>"); users never wrote either.
    return tuple(str(p) for p in loc if p != "[key]" and not (isinstance(p, str) and p[:1] == "<"))


def validate(
    model: type[M],
    data: Any,
    *,
    file: str,
    lines: LineMap | None = None,
    prefix: tuple[str, ...] = (),
) -> M:
    """Validate ``data`` as ``model``; the first error becomes a located ``ConfigError``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(exc, file=file, lines=lines or {}, prefix=prefix) from None


def to_config_error(
    exc: ValidationError, *, file: str, lines: LineMap, prefix: tuple[str, ...] = ()
) -> ConfigError:
    """Every error of ``exc``, located (a ``ConfigErrors`` when there are several)."""
    errors = exc.errors(include_url=False)
    # A misspelt key also makes the real key "missing": name the misspelling, not both.
    misspelt = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "extra_forbidden"}
    errors = [
        e for e in errors if not (e["type"] == "missing" and tuple(e["loc"][:-1]) in misspelt)
    ]
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    found = []
    for error in errors:
        loc = (*prefix, *_clean_loc(tuple(error["loc"])))
        message = error["msg"]
        for stock, friendly in _REWRITES.items():
            if message.startswith(stock):
                message = friendly
        message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        found.append(
            ConfigError(message, file=file, line=_line_for(loc, lines), field=".".join(loc) or None)
        )
    return found[0] if len(found) == 1 else ConfigErrors(found)
