"""AgentV's ``field-accuracy``: fields of a JSON answer against the reference answer, evaluated
on the host. Pure logic.

The answer is the agent's, so it is parsed as hostile JSON (bounded size and depth, by
``load_untrusted_json``); a path walks at most 64 steps. Each field is ``exact`` (deep
equality), ``numeric_tolerance`` (``tolerance``, ``relative``) or ``date`` (same calendar day;
ISO, ``15-JAN-2025``, ``MM/DD/YYYY`` or ``DD/MM/YYYY`` as its ``formats`` say). A field the
reference lacks passes; a ``required`` field (the default) the answer lacks fails; an optional
one it lacks does not count. The score is the weighted mean (or ``all_or_nothing``); as in
AgentV, it passes at 0.8.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.scores import reaches
from ..protocol.models import (
    Check,
    GraderResult,
    OutputShapeError,
    Payload,
    Status,
    load_untrusted_json,
)

__all__ = ["FieldAccuracy"]

PASS_SCORE = 0.8  # AgentV's scoreToVerdict default
_MAX_ANSWER = 1 << 20
_MONTH_NAMES = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
# A month by its name or its first three letters (and "sept").
_MONTHS = {n: i for i, name in enumerate(_MONTH_NAMES, 1) for n in (name, name[:3])} | {"sept": 9}
_NUMERIC_DATE = re.compile(r"^(\d{1,2})[/-](\d{1,2})[/-](\d{4})$")
_NAMED_DATE = re.compile(r"^(\d{1,2})-([A-Za-z]{3,9})-(\d{4})$")
_FENCE = re.compile(r"```(?:json)?")


class FieldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1, max_length=1000)
    match: Literal["exact", "numeric_tolerance", "date"]
    required: bool = True
    weight: float = Field(default=1.0, ge=0)
    tolerance: float = Field(default=0.0, ge=0, allow_inf_nan=False)  # .inf: any number
    relative: bool = False
    formats: list[str] | None = None


@dataclass(frozen=True)
class FieldAccuracy:
    """``{type: field-accuracy, fields: [...], aggregation?}``: a record compiled from the
    validated entry (``graders.entries.FieldAccuracyCheck``)."""

    fields: tuple[FieldSpec, ...]
    aggregation: Literal["weighted_average", "all_or_nothing"] = "weighted_average"
    type: Literal["field-accuracy"] = "field-accuracy"

    def display_name(self) -> str:
        return "field-accuracy"

    def evaluate(self, payload: Payload) -> GraderResult:
        def result(passed: bool, score: float, evidence: str, checks: list[Check]) -> GraderResult:
            return GraderResult(
                name=self.display_name(),
                type="field-accuracy",
                status=Status.passed if passed else Status.failed,
                passed=passed,
                score=round(score, 6),
                evidence=evidence,
                checks=checks,
            )

        answer = _json_object(payload.output or "")
        if answer is None:
            return result(False, 0.0, "the answer is not a JSON object", [])
        expected = _expected(payload)
        if expected is None:
            return result(False, 0.0, "no JSON object in the reference answer", [])
        scored = [_field(spec, answer, expected) for spec in self.fields]
        checks = [Check(text=text, passed=hit) for _, _, hit, text in scored]
        if self.aggregation == "all_or_nothing":
            score = 1.0 if all(hit for _, _, hit, _ in scored) else 0.0
        else:
            total = sum(w for _, w, _, _ in scored)
            score = sum(s * w for s, w, _, _ in scored) / total if total else 0.0
        hits = sum(hit for _, _, hit, _ in scored)
        return result(
            reaches(score, PASS_SCORE),
            score,
            f"{hits} of {len(scored)} fields match (score {score:.3f})",
            checks,
        )


def _json_object(text: str) -> dict[str, Any] | None:
    """AgentV's parseJsonFromText: fences dropped, the outermost ``{...}``, as an object."""
    text = _FENCE.sub("", text[:_MAX_ANSWER]).strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        found = load_untrusted_json(text[start : end + 1])
    except OutputShapeError:
        return None
    return found if isinstance(found, dict) else None


def _expected(payload: Payload) -> dict[str, Any] | None:
    for message in reversed(payload.expected_output):
        if message.role != "assistant" or not message.content:
            continue
        if isinstance(message.content, dict):
            return message.content
        if isinstance(message.content, str):
            found = _json_object(message.content)
            if found is not None:
                return found
    return None


_MISSING = object()


def _resolve(data: Any, path: str) -> Any:
    parts = [p for p in re.split(r"[.\[\]]", path) if p][:64]
    for part in parts:
        if isinstance(data, list) and part.isdigit():
            index = int(part)
            data = data[index] if index < len(data) else _MISSING
        elif isinstance(data, dict):
            data = data.get(part, _MISSING)
        else:
            return _MISSING
        if data is _MISSING or data is None:
            return _MISSING
    return data


def _field(
    spec: FieldSpec, answer: dict[str, Any], expected: dict[str, Any]
) -> tuple[float, float, bool, str]:
    """``(score, weight, hit, message)`` of one field, as AgentV computes it."""
    want, got = _resolve(expected, spec.path), _resolve(answer, spec.path)
    if want is _MISSING:
        return 1.0, spec.weight, True, f"{spec.path}: no expected value"
    if got is _MISSING:
        if spec.required:
            return 0.0, spec.weight, False, f"{spec.path} (required, missing)"
        return 1.0, 0.0, True, f"{spec.path}: optional field missing"
    if spec.match == "exact":
        if _same(got, want):
            return 1.0, spec.weight, True, spec.path
        if type(got) is not type(want) and not (_number(got) and _number(want)):
            return 0.0, spec.weight, False, f"{spec.path} (type mismatch)"
        return 0.0, spec.weight, False, f"{spec.path} (value mismatch)"
    if spec.match == "numeric_tolerance":
        a, b = _to_number(got), _to_number(want)
        if a is None or b is None:
            return 0.0, spec.weight, False, f"{spec.path} (non-numeric value)"
        diff = abs(a - b)
        off = diff / abs(b) if spec.relative and b != 0 else diff
        ok = off <= spec.tolerance
        word = "within" if ok else "outside"
        return float(ok), spec.weight, ok, f"{spec.path} ({word} tolerance: diff={diff:.2f})"
    formats = spec.formats or ["YYYY-MM-DD", "DD-MMM-YYYY", "MM/DD/YYYY", "DD/MM/YYYY"]
    a_day, b_day = _date(str(got), formats), _date(str(want), formats)
    if a_day is None:
        return 0.0, spec.weight, False, f"{spec.path} (unparseable candidate date)"
    if b_day is None:
        return 0.0, spec.weight, False, f"{spec.path} (unparseable expected date)"
    if a_day == b_day:
        return 1.0, spec.weight, True, spec.path
    return 0.0, spec.weight, False, f"{spec.path} (date mismatch: got {a_day}, expected {b_day})"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """JavaScript's deepEqual over JSON values (1 and 1.0 are the same number)."""
    if _number(a) and _number(b):
        return bool(a == b)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _to_number(value: Any) -> float | None:
    if _number(value):
        return float(value)
    if isinstance(value, str):
        m = re.match(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", value[:100])
        return float(m.group(0)) if m else None
    return None


def _date(text: str, formats: list[str]) -> date | None:
    text = text.strip()[:100]
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).date()
    except ValueError:
        pass
    m = _NAMED_DATE.match(text)
    if m and m.group(2).lower() in _MONTHS:
        return _day(int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))
    m = _NUMERIC_DATE.match(text)
    if not m:
        return None
    first, second, year = int(m.group(1)), int(m.group(2)), int(m.group(3))
    us = any("MM/DD" in f or "MM-DD" in f for f in formats)
    eu = any("DD/MM" in f or "DD-MM" in f for f in formats)
    if us and not eu:
        return _day(year, first, second)
    if eu and not us:
        return _day(year, second, first)
    if first > 12 >= second:
        return _day(year, second, first)
    return _day(year, first, second)


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None
