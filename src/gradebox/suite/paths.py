"""The suite files a command line names: files, folders and globs, as ``agentv eval`` takes.

``gradebox run evals/**/*.yaml`` works whether or not the shell expands the glob: a pattern
that reaches us is expanded here (``**`` recursive, hidden folders included, as AgentV's
fast-glob with ``dot: true``). A folder stands for the eval files under it (AgentV's names:
``*.eval.yaml``, ``eval.yaml``, and ``.yml``), or, holding none, for the one gradebox suite
file in it (``suite.yaml`` or ``suite.yml``: ``gradebox run examples/quickstart``); holding
both a suite file and eval files below it, it is an error asking which;
``!pattern`` leaves files out. The result is
sorted and without duplicates, so a run over the same arguments finds the same files in the
same order (``--resume`` relies on it).

This module only names files; reading them is ``suite.load_suite``'s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigError

__all__ = ["FOLDER_NAMES", "SUITE_NAMES", "expand_suite_paths", "result_folders"]

FOLDER_NAMES = ("*.eval.yaml", "*.eval.yml", "eval.yaml", "eval.yml")
"""What a folder given on the command line stands for (AgentV's ``resolveEvalPaths``)."""

SUITE_NAMES = ("suite.yaml", "suite.yml")
"""A gradebox suite's own name in its folder: a folder holding no eval file but one of these
(only there, not below: a suite's fixtures may hold others) stands for it, as ``cargo``
finds ``Cargo.toml`` and ``docker compose`` ``compose.yaml``."""

_SUITE_SUFFIXES = (".yaml", ".yml", ".jsonl", ".json")
_GLOB = re.compile(r"[*?[]")


def expand_suite_paths(patterns: list[str], cwd: Path | None = None) -> list[Path]:
    """Files, folders and globs -> the suite files they name, sorted, each once.

    A plain path is kept as written (a missing one is ``load_suite``'s "file not found"); a
    glob or folder that names no suite file is an error naming it, since a typo must not run
    nothing and pass."""
    base = cwd or Path.cwd()
    include = [p.strip() for p in patterns if p.strip() and not p.strip().startswith("!")]
    exclude = [p.strip()[1:] for p in patterns if p.strip().startswith("!")]
    if not include:
        raise ConfigError("no suite files given", field="SUITE_FILES")
    found: dict[str, Path] = {}
    for pattern in include:
        path = Path(pattern)
        full = path if path.is_absolute() else base / path
        if full.is_dir():
            matches = [m for name in FOLDER_NAMES for m in _glob(str(full / "**" / name))]
            what = f"folder {pattern!r} holds no eval file ({', '.join(FOLDER_NAMES)})"
            if not matches:
                matches, what = _suite_in(full, pattern, what)
            else:
                _not_beside_a_suite(full, pattern, matches)
        elif _GLOB.search(pattern) and not full.exists():
            matches = [m for m in _glob(str(full)) if m.endswith(_SUITE_SUFFIXES)]
            what = f"no suite file matches {pattern!r}"
        else:
            found.setdefault(_key(full), path)
            continue
        if not matches:
            raise ConfigError(what, field="SUITE_FILES")
        for match in matches:
            found.setdefault(_key(Path(match)), _shown(Path(match), base))
    dropped = {
        _key(Path(m)) for p in exclude for m in _glob(str(p if Path(p).is_absolute() else base / p))
    }
    kept = [shown for key, shown in sorted(found.items()) if key not in dropped]
    if not kept:
        raise ConfigError("every suite file given was left out by a !pattern", field="SUITE_FILES")
    return kept


def _not_beside_a_suite(folder: Path, pattern: str, matches: list[str]) -> None:
    """Refuse a folder holding its own suite file and eval files below it: which it stands
    for is not ours to guess (a fixture's eval file, run in the suite's place, would run its
    commands on the host; the suite file, in place of AgentV's files, the wrong suite)."""
    own = [n for n in SUITE_NAMES if (folder / n).is_file()]
    if own:
        below = Path(min(matches)).relative_to(folder)
        raise ConfigError(
            f"folder {pattern!r} holds {own[0]} and eval files below it ({str(below)!r}): "
            f"name the one to run, e.g. {str(Path(pattern) / own[0])!r}",
            field="SUITE_FILES",
        )


def _suite_in(folder: Path, pattern: str, what: str) -> tuple[list[str], str]:
    """The one suite file ``folder`` holds (``SUITE_NAMES``), or none and why, naming a YAML
    file it holds when there is one to give instead."""
    own = [str(folder / n) for n in SUITE_NAMES if (folder / n).is_file()]
    if len(own) > 1:
        return [], f"folder {pattern!r} holds both {' and '.join(SUITE_NAMES)}: name the one to run"
    if own:
        return own, what
    try:
        yamls = sorted(e.name for e in os.scandir(folder) if e.name.endswith((".yaml", ".yml")))
    except OSError:
        yamls = []
    if yamls:
        what += f" and no {SUITE_NAMES[0]}; name a file, e.g. {str(Path(pattern) / yamls[0])!r}"
    return [], what


def result_folders(files: list[Path]) -> list[str]:
    """A results sub-folder name per suite file of a run over several: its path, made a
    name (``evals/a/eval.yaml`` -> ``evals-a-eval.yaml``), numbered when two come out alike.
    The same files give the same names, so ``--resume`` finds each suite's results."""
    names: list[str] = []
    for file in files:
        stem = re.sub(r"[^A-Za-z0-9_.]+", "-", file.as_posix()).strip("-.") or "suite"
        name, n = stem, 2
        while name in names:
            name, n = f"{stem}-{n}", n + 1
        names.append(name)
    return names


def _glob(pattern: str) -> list[str]:
    """The files ``pattern`` (absolute) matches. ``**`` never enters a linked folder
    (pathlib's walk): ``glob.glob`` did, so a folder holding ``x -> .`` and ``y -> .`` (a
    loop any checkout may hold, node_modules' among them) cost 2^40 paths, and one link
    found every file again under another name."""
    parts = Path(pattern).parts
    if parts and parts[-1] == "**":  # everything below (pathlib's `**` alone: folders only)
        parts = (*parts, "*")
    first = next((i for i, part in enumerate(parts) if _GLOB.search(part)), len(parts))
    if first == len(parts):
        return [pattern] if os.path.isfile(pattern) else []
    try:
        return [str(m) for m in Path(*parts[:first]).glob(str(Path(*parts[first:]))) if m.is_file()]
    except RecursionError:  # pathlib walks by recursion: a tree ~1,000 folders deep
        raise ConfigError(
            f"folders nested too deep to search for {pattern!r}", field="SUITE_FILES"
        ) from None


def _key(path: Path) -> str:
    """One file, however it is named (a link to it, ``a/../b``): each runs once."""
    return os.path.realpath(path)


def _shown(path: Path, base: Path) -> Path:
    """A match as the user would name it: relative to where they are, when it is below."""
    rel = os.path.relpath(path, base)
    return path if rel.startswith("..") else Path(rel)
