"""Built-in deterministic assertions, evaluated on the host: no container, no process.

``contains``, ``icontains``, ``contains-any``, ``contains-all``, ``equals``, ``starts-with``,
``regex``, ``is-json``, ``contains-json``; each may be negated with a ``not-`` prefix.
"""

from __future__ import annotations

import json
import re
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..protocol import GraderResult, Status

__all__ = ["BUILTINS", "BuiltinAssertion", "is_builtin"]

_NEEDS_LIST = {"contains-any", "contains-all"}
_NO_VALUE = {"is-json", "contains-json"}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


REGEX_TIMEOUT = 1.0
"""Seconds a user's regex may take on one answer: an agent's answer must not be able to hang
the run through catastrophic backtracking."""
_MAX_JSON_STARTS = 2000


class _TooSlow(Exception):
    pass


def _search(pattern: str, output: str) -> bool:
    try:
        return regex.search(pattern, output, timeout=REGEX_TIMEOUT) is not None
    except TimeoutError:
        raise _TooSlow(f"the regex took over {REGEX_TIMEOUT:g}s on the answer") from None


def _find_json(output: str) -> bool:
    decoder = json.JSONDecoder()
    for n, match in enumerate(re.finditer(r"[\[{]", output)):
        if n >= _MAX_JSON_STARTS:  # bounded work on a hostile answer of a million brackets
            break
        try:
            decoder.raw_decode(output, match.start())
            return True
        except (ValueError, RecursionError):
            continue
    return False


def _is_json(output: str) -> bool:
    try:
        json.loads(output)
        return True
    except (ValueError, RecursionError):
        return False


BUILTINS = {
    "contains": lambda out, v: _text(v) in out,
    "icontains": lambda out, v: _text(v).lower() in out.lower(),
    "contains-any": lambda out, v: any(_text(x) in out for x in v),
    "contains-all": lambda out, v: all(_text(x) in out for x in v),
    # Surrounding whitespace never counts: a target's stdout ends with a newline.
    "equals": lambda out, v: out.strip() == _text(v).strip(),
    "starts-with": lambda out, v: out.lstrip().startswith(_text(v)),
    "regex": lambda out, v: _search(_text(v), out),
    "is-json": lambda out, v: _is_json(out),
    "contains-json": lambda out, v: _find_json(out),
}


def is_builtin(kind: str) -> bool:
    return kind.removeprefix("not-") in BUILTINS


class BuiltinAssertion(BaseModel):
    """``{type: contains, value: "42", weight: 2}``; ``not-contains`` negates."""

    model_config = ConfigDict(extra="forbid")

    type: str
    value: Any = None
    weight: float = Field(default=1.0, ge=0)
    name: str | None = None

    @model_validator(mode="after")
    def _check(self) -> BuiltinAssertion:
        base = self.type.removeprefix("not-")
        if base not in BUILTINS:
            raise ValueError(f"unknown built-in assertion {self.type!r}")
        if base in _NEEDS_LIST and not isinstance(self.value, list):
            raise ValueError(f"{self.type} needs a list in 'value'")
        if base not in _NO_VALUE and base not in _NEEDS_LIST and self.value is None:
            raise ValueError(f"{self.type} needs a 'value'")
        if base == "regex":
            try:
                regex.compile(_text(self.value))
            except regex.error as exc:
                raise ValueError(f"invalid regex: {exc}") from None
        return self

    def display_name(self) -> str:
        if self.name:
            return self.name
        if self.value is None:
            return self.type
        return (
            f"{self.type} {_text(self.value)[:40]!r}"
            if isinstance(self.value, str)
            else (f"{self.type} {_text(self.value)[:40]}")
        )

    def evaluate(self, output: str | None) -> GraderResult:
        negate = self.type.startswith("not-")
        try:
            hit = bool(BUILTINS[self.type.removeprefix("not-")](output or "", self.value))
        except _TooSlow as exc:
            return GraderResult(
                name=self.display_name(), type="builtin", status=Status.error, passed=False,
                score=0.0, evidence=str(exc),
            )  # fmt: skip
        passed = hit != negate
        answer = (output or "").strip()
        shown = repr(answer if len(answer) <= 80 else answer[:79] + "…")
        return GraderResult(
            name=self.display_name(),
            type="builtin",
            status=Status.passed if passed else Status.failed,
            passed=passed,
            score=1.0 if passed else 0.0,
            evidence=("holds" if passed else "not satisfied") + f" by the answer {shown}",
        )
