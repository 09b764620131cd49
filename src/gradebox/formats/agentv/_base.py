"""What every part of the AgentV reader shares: errors that point at the user's line,
interpolation (``{{ env.VAR }}``, ``${{ VAR }}``, ``{{ name }}``), and AgentV's way of finding a
file a path names: from the eval file's folder up to the repository root, then the working
directory (``buildSearchRoots`` in AgentV's ``file-resolver.ts``).

Eval files, their case files and ``.agentv/`` files are the user's own configuration, read
on the host; nothing here reads what an agent wrote.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from ...core import untrusted
from ...core.pathnames import exists, is_dir, is_file, resolve_path
from ...core.untrusted import trusted as owned
from ...core.yamlfile import LineMap
from ...errors import ConfigError, UnsupportedFeature

__all__ = [
    "Where",
    "dotenv",
    "exists",
    "interpolate_env",
    "is_dir",
    "is_file",
    "render",
    "resolve_path",
    "search_roots",
]

CONFIG_DIR = ".agentv"


class Where:
    """A file with its line map, for errors that point where the user wrote the thing."""

    def __init__(self, path: Path, lines: LineMap) -> None:
        self.path, self.lines = path, lines

    def error(self, loc: tuple[str, ...], message: str) -> ConfigError:
        return ConfigError(message, **self._at(loc))

    def refuse(self, loc: tuple[str, ...], feature: str, message: str) -> UnsupportedFeature:
        """A feature gradebox does not run, named, with what to do instead."""
        return UnsupportedFeature(feature, message, **self._at(loc))

    def unknown(self, item: Any, known: Any, loc: tuple[str, ...], message: str) -> None:
        """Refuse the first field of the mapping ``item`` (by name) that is not in ``known``."""
        extra = sorted(set(item) - set(known), key=str)
        if extra:
            raise self.error((*loc, extra[0]), message)

    def _at(self, loc: tuple[Any, ...]) -> dict[str, Any]:
        # A key the user wrote as a number, null or bool (``1: x``, ``~: 1``) is no string.
        keys = tuple(str(part) for part in loc)
        return {
            "file": str(self.path),
            "line": self.lines.get(keys),
            "field": ".".join(keys) or None,
        }


class Lines1(dict):  # type: ignore[type-arg]
    """Every key of a JSONL (or CSV) case is on its one line."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line

    def get(self, key: Any, default: Any = None) -> Any:
        return self.line


# --------------------------------------------------------------------------------------------
# Interpolation: {{ env.VAR }} and ${{ VAR }} from the environment (and .env files), and
# {{ name }} / {{ vars.name }} from a test's vars.

_ENV = re.compile(
    r"\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}|\$\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}"
)
_VAR = re.compile(r"\{\{\s*(?:vars\.)?([A-Za-z_][\w.-]*)\s*\}\}")


def dotenv(start: Path) -> dict[str, str]:
    """KEY=VALUE lines of the .env files from ``start`` up; the nearer file wins."""
    found: dict[str, str] = {}
    for directory in (start, *start.parents):
        env = directory / ".env"
        if not owned(env):  # (also: not there) another local user's /tmp/.env is not ours
            continue
        try:
            text = untrusted.read_file(env).decode(errors="replace")
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror or exc}", file=str(env)) from None
        for line in text.splitlines():
            key, sep, value = line.strip().removeprefix("export ").partition("=")
            if sep and key and not key.startswith("#"):
                found.setdefault(key.strip(), value.strip().strip("'\""))
    return found


def interpolate_env(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _ENV.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)
    if isinstance(value, list):
        return [interpolate_env(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate_env(v, env) for k, v in value.items()}
    return value


def _lookup(variables: dict[str, Any], dotted: str) -> Any:
    value: Any = variables
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def render(value: Any, variables: dict[str, Any]) -> Any:
    """Fill ``{{ name }}`` and ``{{ vars.name }}`` in strings, recursively. A string that is a
    single placeholder keeps the value's own type; a missing variable is empty."""
    if isinstance(value, str):
        whole = _VAR.fullmatch(value.strip())
        if whole and not value.strip().startswith("{{ env."):
            found = _lookup(variables, whole.group(1))
            return "" if found is None else found

        def one(m: re.Match[str]) -> str:
            if m.group(1).startswith("env."):
                return m.group(0)
            found = _lookup(variables, m.group(1))
            if found is None:
                return ""
            return found if isinstance(found, str) else json.dumps(found)

        return _VAR.sub(one, value)
    if isinstance(value, list):
        return [render(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render(v, variables) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------
# Where AgentV looks for a file a path names.


def search_roots(eval_file: Path) -> list[Path]:
    """The eval file's folder, each parent up to the repository root (the nearest folder
    holding ``.git``; the filesystem root when there is none, as in an unpacked tarball), then
    the working directory: AgentV's ``buildSearchRoots``. ``pathnames.resolve_path`` looks in
    them, and refuses what another local user could have written."""
    roots: list[Path] = []
    for directory in (eval_file.parent.resolve(), *eval_file.parent.resolve().parents):
        roots.append(directory)
        if (directory / ".git").exists():
            break
    cwd = Path.cwd().resolve()
    if cwd not in roots:
        roots.append(cwd)
    return roots


# --------------------------------------------------------------------------------------------
# Case files: YAML, JSON, JSONL, CSV.

Case = tuple[Any, Where, tuple[str, ...]]


def csv_rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    """``(line, {header: cell})`` for each data row of a CSV file."""
    try:
        text = untrusted.read_text(path, encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path)) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as exc:
        raise ConfigError(f"malformed CSV: {exc}", file=str(path)) from None
    rows = [(n, r) for n, r in rows if any(cell.strip() for cell in r)]
    if not rows:
        return []
    headers = [h.strip() for h in rows[0][1]]
    return [
        (n, {h: (r[i] if i < len(r) else "") for i, h in enumerate(headers) if h})
        for n, r in rows[1:]
    ]
