"""AgentV v4's trace checks, with v4's semantics: ``tool-trajectory`` and ``skill-trigger``
(AgentV 5.x replaced them with ``trajectory:*`` and ``skill-used``, in ``trace``). Pure logic:
no process, no I/O.

Each mirrors one class of AgentV v4.42.4's ``packages/core/src/evaluation/graders/``, whose
functions the comments name; a score becomes a verdict as v4's ``scoreToVerdict`` does (pass
at 0.8). The tool calls are those of the agent's reported transcript (``transcript.trace_of``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..core.scores import reaches
from ..protocol.models import GraderResult, Payload, Status
from .transcript import ToolCall, cut_name, trace_of

__all__ = ["V4_PASS", "SkillTrigger", "ToolTrajectory", "deep_equal"]

V4_PASS = 0.8
"""v4's ``DEFAULT_THRESHOLD``: ``scoreToVerdict(score)`` passes at 0.8."""

ArgsMatch = Literal["exact", "superset", "subset", "ignore"] | list[str]


def deep_equal(a: Any, b: Any) -> bool:
    """v4's ``deepEqual`` (``graders/scoring.ts``): same type, arrays item by item, objects
    with the same keys. ``True`` and ``1`` differ, as in JavaScript; ``1`` and ``1.0`` do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _nested(value: Any, dotted: str) -> Any:
    """v4's ``getNestedValue``: ``a.b.c``; None when a step is missing."""
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _args_match(expected: Any, actual: Any, mode: ArgsMatch) -> bool:
    """v4's ``argsMatch`` (``tool-trajectory.ts``): no ``args`` or ``args: any`` matches any
    call; otherwise by ``mode`` (default ``exact``: a deep-equal of the whole arguments)."""
    if expected is None or expected == "any" or mode == "ignore":
        return True
    if not isinstance(actual, dict):
        return False
    if isinstance(mode, list):
        return all(
            deep_equal(_nested(expected, f), _nested(actual, f))
            for f in mode
            if _nested(expected, f) is not None
        )
    if mode == "superset":
        return all(k in actual and deep_equal(v, actual[k]) for k, v in expected.items())
    if mode == "subset":
        return all(k in expected and deep_equal(v, expected[k]) for k, v in actual.items())
    return deep_equal(expected, actual)


class ExpectedTool(BaseModel):
    """One entry of ``expected``: a tool, optionally its arguments and a latency bound.

    Other keys are ignored, as v4's parser ignores them (``input:``/``output:`` in v4's own
    examples check nothing there; checking them here would give verdicts v4 does not)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    tool: str
    args: dict[str, Any] | Literal["any"] | None = None
    max_duration_ms: float | None = Field(default=None, ge=0, alias="maxDurationMs")
    args_match: ArgsMatch | None = Field(default=None, alias="argsMatch")

    @field_validator("tool")
    @classmethod
    def _named(cls, value: str) -> str:
        return _named_tool(value)


def _named_tool(name: str) -> str:
    """A blank tool (a var that rendered to nothing) is one no run calls: expected, it fails
    every run, so negated or allowed (``subset``) it holds for every run."""
    if not name.strip():
        raise ValueError(
            "a blank tool name (a var that rendered to nothing?) is called by no "
            "run: the check would hold for every run, or for none"
        )
    return name


class ToolTrajectory(BaseModel):
    """``type: tool-trajectory`` (v4's ``ToolTrajectoryGrader``).

    Example::

        ToolTrajectory(mode="in_order", expected=[{"tool": "search"}, {"tool": "fetch"}])
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["tool-trajectory"] = "tool-trajectory"
    mode: Literal["any_order", "in_order", "exact", "subset", "superset"]
    minimums: dict[str, float] | None = None
    expected: list[ExpectedTool] | None = None
    args_match: ArgsMatch | None = Field(default=None, alias="argsMatch")

    @field_validator("minimums")
    @classmethod
    def _counts(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None and any(v < 0 for v in value.values()):
            raise ValueError("a minimum is a count >= 0")
        for tool in value or {}:
            _named_tool(tool)
        return value

    @model_validator(mode="after")
    def _complete(self) -> ToolTrajectory:
        # v4's parser skips such an evaluator with a warning; a check silently gone would
        # pass tests it was written to fail, so here it is the file's error.
        if self.mode == "any_order" and self.minimums is None:
            raise ValueError("any_order needs minimums: {tool: count}")
        if self.mode != "any_order" and self.expected is None:
            raise ValueError(f"{self.mode} needs expected: [{{tool, args?}}]")
        # v4 scores these 1.0 ("no tool requirements specified"): a check every run holds.
        if self.mode == "any_order" and not any(v > 0 for v in (self.minimums or {}).values()):
            raise ValueError("any_order with no minimum above 0 holds for every run")
        if self.mode in ("in_order", "exact", "superset") and not self.expected:
            raise ValueError(f"{self.mode} with an empty expected list holds for every run")
        return self

    def display_name(self) -> str:
        return f"tool-trajectory ({self.mode})"

    def _mode_of(self, item: ExpectedTool) -> ArgsMatch:
        """v4's ``resolveArgsMatchMode``: the item's, else the grader's, else ``exact``."""
        return item.args_match or self.args_match or "exact"

    def evaluate(self, payload: Payload) -> GraderResult:
        events = (payload.trace or {}).get("events") if isinstance(payload.trace, dict) else None
        calls = trace_of(payload.messages, events if isinstance(events, list) else None).tool_calls
        # v4: no calls, no trace and no output messages is no evidence: a fail.
        if not calls and not payload.messages and not (payload.output or "").strip():
            return self._result(0.0, ["no trace available for evaluation"])
        named: list[int] = []  # the calls each mode's notes name, for the report's steps
        score, notes = getattr(self, "_" + self.mode)(calls, named)
        return self._result(score, notes, sorted(set(named)))

    def _result(
        self, score: float, notes: list[str], named: list[int] | None = None
    ) -> GraderResult:
        passed = reaches(score, V4_PASS)
        return GraderResult(
            name=self.display_name(),
            type="trace",
            status=Status.passed if passed else Status.failed,
            passed=passed,
            score=round(score, 6),
            evidence="; ".join(notes)[:2000],
            calls=named or [],
        )

    def _any_order(self, calls: list[ToolCall], named: list[int]) -> tuple[float, list[str]]:
        """``evaluateAnyOrder``: the share of tools called at least their minimum, over the
        minimums above 0 only. v4 counts a minimum of 0 as met: four of them beside one real
        requirement make 0.8, v4's pass, for a run that called nothing. A 0 requires nothing,
        so it is named in the evidence and left out of the share (at load, a check with no
        minimum above 0 is refused)."""
        counts: dict[str, int] = {}
        for call in calls:
            counts[call.name] = counts.get(call.name, 0) + 1
        notes, hits = [], 0
        required = {tool: least for tool, least in (self.minimums or {}).items() if least > 0}
        named.extend(i for i, c in enumerate(calls) if c.name in required)
        for tool, least in required.items():
            seen = counts.get(tool, 0)
            hits += seen >= least
            notes.append(f"{tool}: called {seen} times (required >={least:g})")
        free = [tool for tool, least in (self.minimums or {}).items() if tool not in required]
        if free:
            notes.append(f"minimum 0, no requirement: {', '.join(free)}")
        if not required:  # refused at load; never a pass
            return 0.0, [*notes, "no tool requirement above 0"]
        return hits / len(required), notes

    def _latency(self, item: ExpectedTool, call: ToolCall, notes: list[str]) -> int | None:
        """``checkLatency``: 1 (within), 0 (over), None (no bound, or no duration: skipped)."""
        if item.max_duration_ms is None or call.duration_ms is None:
            return None
        ok = call.duration_ms <= item.max_duration_ms
        notes.append(f"{item.tool} took {call.duration_ms:g}ms (max {item.max_duration_ms:g}ms)")
        return int(ok)

    def _in_order(self, calls: list[ToolCall], named: list[int]) -> tuple[float, list[str]]:
        """``evaluateInOrder``: each expected tool after the previous match; a call of the
        right tool with the wrong arguments uses up that call and misses the item."""
        expected = self.expected or []
        if not expected:
            return 1.0, ["no tool sequence specified"]
        notes: list[str] = []
        hits, latency_hits, latency_total, at = 0, 0, 0, 0
        for i, item in enumerate(expected):
            matched: ToolCall | None = None
            while at < len(calls):
                call = calls[at]
                at += 1
                if call.name == item.tool:
                    named.append(at - 1)
                    if _args_match(item.args, call.args, self._mode_of(item)):
                        matched = call
                        notes.append(f"found {item.tool} at position {at - 1}")
                    else:
                        notes.append(
                            f"expected {item.tool} at position {i}: found at {at - 1} "
                            "but its arguments differ"
                        )
                    break
            else:
                notes.append(f"expected {item.tool} at position {i}, not in the rest of the trace")
            if matched is not None:
                hits += 1
                latency = self._latency(item, matched, notes)
                if latency is not None:
                    latency_hits += latency
            skipped = matched is not None and matched.duration_ms is None
            if item.max_duration_ms is not None and not skipped:
                latency_total += 1  # v4 leaves out only bounds skipped for want of a duration
        total = len(expected) + latency_total
        return (hits + latency_hits) / total, notes

    def _exact(self, calls: list[ToolCall], named: list[int]) -> tuple[float, list[str]]:
        """``evaluateExact``: position by position; a length mismatch is noted, and the
        positions beyond the shorter list count as misses."""
        expected = self.expected or []
        if not expected:
            return 1.0, ["no tool sequence specified"]
        notes: list[str] = []
        if len(calls) != len(expected):
            notes.append(f"expected {len(expected)} tool calls, got {len(calls)}")
        hits, latency_hits, latency_total = 0, 0, 0
        for i, item in enumerate(expected):
            if i >= len(calls):
                notes.append(f"position {i}: expected {item.tool}, got nothing")
                latency_total += item.max_duration_ms is not None
                continue
            call = calls[i]
            named.append(i)
            if call.name != item.tool:
                notes.append(f"position {i}: expected {item.tool}, got {cut_name(call.name)}")
            elif not _args_match(item.args, call.args, self._mode_of(item)):
                notes.append(f"position {i}: {item.tool} arguments differ")
            else:
                hits += 1
                notes.append(f"position {i}: {item.tool}")
                latency = self._latency(item, call, notes)
                if latency is not None:
                    latency_hits += latency
                if item.max_duration_ms is not None and call.duration_ms is None:
                    continue  # skipped for want of a duration: not counted
            latency_total += item.max_duration_ms is not None
        total = len(expected) + latency_total
        return (hits + latency_hits) / total, notes

    def _superset(self, calls: list[ToolCall], named: list[int]) -> tuple[float, list[str]]:
        """``evaluateSuperset``: every expected item matches a call of its own."""
        expected = self.expected or []
        if not expected:
            return 1.0, ["no expected tools specified"]
        used: set[int] = set()
        notes, hits = [], 0
        for item in expected:
            j = next(
                (
                    j
                    for j, c in enumerate(calls)
                    if j not in used
                    and c.name == item.tool
                    and _args_match(item.args, c.args, self._mode_of(item))
                ),
                None,
            )
            if j is None:
                notes.append(f"expected {item.tool}, not found")
            else:
                used.add(j)
                named.append(j)
                hits += 1
                notes.append(f"found {item.tool} at position {j}")
        return hits / len(expected), notes

    def _subset(self, calls: list[ToolCall], named: list[int]) -> tuple[float, list[str]]:
        """``evaluateSubset``: every call is one the expected items allow."""
        expected = self.expected or []
        if not expected:
            ok = not calls
            return float(ok), [
                "no tool calls, none allowed" if ok else f"{len(calls)} tool calls, none allowed"
            ]
        if not calls:
            return 1.0, ["no tool calls (trivially a subset)"]
        notes, hits = [], 0
        for i, call in enumerate(calls):
            ok = any(
                call.name == item.tool and _args_match(item.args, call.args, self._mode_of(item))
                for item in expected
            )
            hits += ok
            named.append(i)
            notes.append(f"position {i}: {cut_name(call.name)} is {'' if ok else 'not '}allowed")
        return hits / len(calls), notes


class SkillTrigger(BaseModel):
    """``type: skill-trigger`` (v4's ``SkillTriggerGrader``): did the agent invoke the skill?

    Evidence, over every tool call: a ``Skill`` tool whose ``skill`` argument contains the
    name; a ``Read`` of a path containing ``skills/<name>/``; else any tool output naming that
    path. ``should_trigger: false`` passes when none is found.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["skill-trigger"] = "skill-trigger"
    skill: str = Field(min_length=1)
    # Strict: v4 takes only a boolean (the text "no" it drops, expecting the skill).
    should_trigger: bool = Field(default=True, strict=True)

    @field_validator("skill")
    @classmethod
    def _named(cls, value: str) -> str:
        # A blank skill (a var that rendered to nothing) is found in no run: with
        # should_trigger: false, or negated, the check would hold for every run.
        if not value.strip():
            raise ValueError(
                "a blank skill name (a var that rendered to nothing?) holds for "
                "every run or for none"
            )
        return value

    def display_name(self) -> str:
        return f"skill-trigger {self.skill!r}"

    def evaluate(self, payload: Payload) -> GraderResult:
        calls = trace_of(payload.messages).tool_calls  # v4 reads the output messages only
        marker = f"skills/{self.skill}/"
        found, at = "", None
        for i, call in enumerate(calls):
            args = call.args if isinstance(call.args, dict) else {}
            name = call.name.lower()
            skill = _js_string(args.get("skill"))
            if name == "skill" and self.skill in skill:
                found, at = f"Skill tool invoked with skill={cut_name(skill)!r}", i
                break
            if name == "read":
                path = _js_string(args.get("file_path", args.get("path")))
                if marker in path:
                    found, at = f"Read tool loaded skill file {cut_name(path)}", i
                    break
            if call.output is not None and marker in _js_text(call.output):
                found, at = f"tool {cut_name(call.name)!r} output referenced {marker}", i
                break
        passed = bool(found) == self.should_trigger
        if passed:
            evidence = found or f"skill {self.skill!r} correctly did not trigger"
        elif self.should_trigger:
            evidence = (
                f"skill {self.skill!r} not found in {len(calls)} tool call(s)"
                if calls
                else "no tool calls recorded"
            )
        else:
            evidence = f"skill {self.skill!r} triggered unexpectedly: {found}"
        return GraderResult(
            name=self.display_name(),
            type="trace",
            status=Status.passed if passed else Status.failed,
            passed=passed,
            score=float(passed),
            evidence=evidence,
            calls=[at] if at is not None else [],
        )


def _js_string(value: Any) -> str:
    """JavaScript's ``String(value ?? '')``, for the values a tool argument takes."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _js_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
