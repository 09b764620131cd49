"""A grader in five lines: the payload read, a typed context, checks, the right result written
for whichever protocol the grader was run under. Standard library only: the same file is in
the python image (as ``gradebox.sdk``) and on the host.

Example (``graders/check.py``)::

    from gradebox.sdk import file, grader

    @grader
    def grade(ctx):
        return [file("out.txt").exists(), file("out.txt").contains("42"),
                ctx.check("mentions the answer", "42" in ctx.output)]

Run as a script grader, a custom assertion or an inline grader it reads JSON on stdin and
prints ``{pass, score, reason, checks}``; run as a program grader it reads
``$EVALUATE_GRADER_INPUT`` and prints ``{name, passed, score, evidence, details}``. An
exception in the function is an error result (traceback on stderr), never a pass.

The folder is what runs inside the images (``sdk``, this module, and ``verify``, the
verifier runner): standard library only, and nothing else of gradebox's imports it.

May import: nothing of gradebox's.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Check", "Context", "FileRef", "Result", "file", "grader", "run"]
__version__ = "0.1.0"  # the gradebox release this SDK ships with (checked by the tests)


@dataclass
class Check:
    """One aspect of a verdict."""

    text: str
    passed: bool
    evidence: str | None = None
    weight: float = 1.0


@dataclass
class Result:
    """A whole verdict, when a list of checks is not enough (a custom score or reason)."""

    passed: bool
    score: float | None = None
    reason: str = ""
    checks: list[Check] = field(default_factory=list)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def _messages(value: Any, role: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list):
        return [v if isinstance(v, dict) else {"role": role, "content": v} for v in value]
    return [{"role": role, "content": value}]


def _workspace() -> Path:
    for key in ("EVALUATE_WORKSPACE", "AGENTV_WORKSPACE_PATH"):
        if os.environ.get(key):
            return Path(os.environ[key])
    return Path.cwd()


class FileRef:
    """A file of the workspace, for checks: ``file("src/app.py").contains("def main")``."""

    def __init__(self, path: str, root: Path | None = None) -> None:
        self.path = path
        self.root = root or _workspace()

    @property
    def full(self) -> Path:
        return self.root / self.path

    def text(self) -> str:
        return self.full.read_text(encoding="utf-8", errors="replace")

    def _read(self) -> str | None:
        try:
            return self.text()
        except OSError:
            return None

    def exists(self) -> Check:
        ok = self.full.is_file()
        return Check(f"{self.path} exists", ok, None if ok else "no such file")

    def contains(self, needle: str) -> Check:
        text = self._read()
        ok = text is not None and needle in text
        why = "no such file" if text is None else (None if ok else f"{needle!r} not found")
        return Check(f"{self.path} contains {needle!r}", ok, why)

    def not_contains(self, needle: str) -> Check:
        text = self._read()
        ok = text is not None and needle not in text
        why = "no such file" if text is None else (None if ok else f"{needle!r} found")
        return Check(f"{self.path} does not contain {needle!r}", ok, why)

    def matches(self, pattern: str, flags: int = 0) -> Check:
        text = self._read()
        found = re.search(pattern, text, flags) if text is not None else None
        why = (
            "no such file"
            if text is None
            else (f"found {found.group(0)[:80]!r}" if found else f"/{pattern}/ does not match")
        )
        return Check(f"{self.path} matches /{pattern}/", bool(found), why)

    def not_matches(self, pattern: str, flags: int = 0) -> Check:
        text = self._read()
        found = re.search(pattern, text, flags) if text is not None else None
        ok = text is not None and found is None
        why = (
            "no such file"
            if text is None
            else (f"found {found.group(0)[:80]!r}" if found else None)
        )
        return Check(f"{self.path} does not match /{pattern}/", ok, why)

    def _field(self, data: Any, dotted: str) -> tuple[bool, Any]:
        for part in dotted.split("."):
            if isinstance(data, list) and part.isdigit() and int(part) < len(data):
                data = data[int(part)]
            elif isinstance(data, dict) and part in data:
                data = data[part]
            else:
                return False, None
        return True, data

    def _structured(
        self, kind: str, dotted: str, expected: Any, parse: Callable[[str], Any]
    ) -> Check:
        label = f"{self.path}: {dotted} == {expected!r}"
        text = self._read()
        if text is None:
            return Check(label, False, "no such file")
        try:
            data = parse(text)
        except Exception as exc:  # noqa: BLE001 (any parser's error is a failed check)
            return Check(label, False, f"not valid {kind}: {exc}")
        found, value = self._field(data, dotted)
        if not found:
            return Check(label, False, f"{dotted} is missing")
        return Check(label, value == expected, f"{dotted} is {value!r}")

    def json_field(self, dotted: str, expected: Any) -> Check:
        """``file("package.json").json_field("scripts.test", "pytest")``."""
        return self._structured("JSON", dotted, expected, json.loads)

    def yaml_field(self, dotted: str, expected: Any) -> Check:
        """Needs PyYAML (in the python image)."""
        import yaml  # type: ignore[import-untyped]  # lazy: PyYAML is not standard library

        return self._structured("YAML", dotted, expected, yaml.safe_load)


def file(path: str) -> FileRef:
    """A workspace file ($EVALUATE_WORKSPACE), for checks."""
    return FileRef(path)


@dataclass
class Context:
    """What the grader is judging, with the snake_case names of the references."""

    raw: dict[str, Any]
    dialect: str  # "stdin" (script, assertion, inline) or "program"

    @property
    def input(self) -> list[dict[str, Any]]:
        return _messages(self.raw.get("input"), "user")

    @property
    def input_text(self) -> str:
        return "\n".join(_text(m.get("content")) for m in self.input if m.get("role") != "system")

    @property
    def output(self) -> str:
        value = self.raw.get("output")
        if value is None and self.raw.get("output_path"):
            value = json.loads(Path(self.raw["output_path"]).read_text(encoding="utf-8"))
        return _text(value)

    @property
    def expected_output(self) -> list[dict[str, Any]]:
        return _messages(self.raw.get("expected_output"), "assistant")

    @property
    def expected_text(self) -> str:
        return "\n".join(_text(m.get("content")) for m in self.expected_output)

    @property
    def criteria(self) -> str:
        return self.raw.get("criteria") or ""

    @property
    def hint(self) -> str:
        return self.raw.get("hint") or ""

    @property
    def metadata(self) -> dict[str, Any]:
        return self.raw.get("metadata") or {}

    @property
    def config(self) -> dict[str, Any]:
        return self.raw.get("config") or {}

    @property
    def file_changes(self) -> str:
        return self.raw.get("file_changes") or ""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.raw.get("messages") or []

    @property
    def trace_summary(self) -> dict[str, Any]:
        return self.raw.get("trace_summary") or {}

    @property
    def workspace(self) -> Path:
        return _workspace()

    def file(self, path: str) -> FileRef:
        return FileRef(path, self.workspace)

    def check(self, text: str, passed: bool, evidence: str | None = None) -> Check:
        return Check(text, bool(passed), evidence)


def _verdict(value: Any) -> tuple[bool, float, str, list[Check]]:
    if isinstance(value, Result):
        checks = value.checks
        score = value.score if value.score is not None else _share(checks, value.passed)
        return value.passed, score, value.reason, checks
    if isinstance(value, Check):
        value = [value]
    if isinstance(value, list | tuple):
        checks = [c for c in value if isinstance(c, Check)]
        if len(checks) != len(value):
            raise TypeError("a grader returns Checks, a Result, a bool or a score")
        passed = all(c.passed for c in checks)
        failed = [c.text for c in checks if not c.passed]
        reason = f"{len(checks) - len(failed)}/{len(checks)} checks passed"
        return (
            passed,
            _share(checks, passed),
            reason + (f"; failed: {failed[0]}" if failed else ""),
            checks,
        )
    if isinstance(value, bool):
        return value, 1.0 if value else 0.0, "passed" if value else "failed", []
    if isinstance(value, int | float):
        score = min(1.0, max(0.0, float(value)))
        return score >= 0.5, score, f"score {score:g}", []
    raise TypeError(
        f"a grader returns Checks, a Result, a bool or a score, not {type(value).__name__}"
    )


def _share(checks: list[Check], passed: bool) -> float:
    total = sum(c.weight for c in checks)
    if not total:
        return 1.0 if passed else 0.0
    return sum(c.weight for c in checks if c.passed) / total


def _read_payload() -> tuple[dict[str, Any], str]:
    """The payload, and the protocol it came by: JSON on stdin (script, assertion, inline
    graders), else the file at $EVALUATE_GRADER_INPUT (program graders)."""
    text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    if text.strip():
        return json.loads(text), "stdin"
    path = os.environ.get("EVALUATE_GRADER_INPUT")
    if path:
        return json.loads(Path(path).read_text(encoding="utf-8")), "program"
    return {}, "stdin"


def run(fn: Callable[[Context], Any], *, name: str | None = None) -> None:
    """Read the payload, call ``fn``, write the result for the protocol, exit."""
    name = name or getattr(fn, "__name__", "grader")
    dialect = "stdin"
    try:
        payload, dialect = _read_payload()
        passed, score, reason, checks = _verdict(fn(Context(payload, dialect)))
    except Exception as exc:  # noqa: BLE001 (the user's bug becomes an error, never a pass)
        traceback.print_exc()
        if dialect == "program":
            # A program grader that exits 0 with a result of no known shape is an error.
            print(json.dumps({"error": f"{name} raised {type(exc).__name__}: {exc}"}))
            sys.exit(0)
        sys.exit(1)
    if dialect == "program":
        details = [
            {
                "name": c.text,
                "kind": "code",
                "passed": c.passed,
                "score": 1.0 if c.passed else 0.0,
                "evidence": c.evidence or "",
            }
            for c in checks
        ]
        print(
            json.dumps(
                {
                    "name": name,
                    "kind": "code",
                    "passed": passed,
                    "score": score,
                    "evidence": reason,
                    "details": details,
                }
            )
        )
    else:
        print(
            json.dumps(
                {
                    "pass": passed,
                    "score": score,
                    "reason": reason,
                    "reasoning": reason,
                    "checks": [
                        {"text": c.text, "pass": c.passed, "evidence": c.evidence} for c in checks
                    ],
                }
            )
        )
    sys.exit(0)


def grader(fn: Callable[[Context], Any] | None = None, *, name: str | None = None) -> Any:
    """Decorate the grading function: run as a program (``__main__``), the grader runs at
    once; imported (by a test), the function is returned unchanged."""

    def wrap(f: Callable[[Context], Any]) -> Callable[[Context], Any]:
        if getattr(f, "__module__", None) == "__main__":
            run(f, name=name)
        return f

    return wrap(fn) if fn is not None else wrap
