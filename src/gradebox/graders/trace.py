"""What an agent did, as far as its answer tells: a normalised trace, and the host-side checks
that read it (trajectory and execution-metric assertions). Pure logic: no process, no I/O.

A trace comes from the target's reported transcript: assistant messages whose ``tool_calls``
list the tools it used (``{tool|name, input|args|arguments, output}``, or the OpenAI
``{function: {name, arguments}}`` form), plus the token usage, cost and duration it reported.
A check that needs data the answer does not carry fails, as AgentV's do: missing data is no
evidence of compliance.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..protocol.models import GraderResult, Payload, Status
from .builtin import _search, _TooSlow, is_builtin, quoted
from .skills import check_skills
from .transcript import ToolCall, Trace, cut_name, listed, summary_of, trace_of, vally_input

__all__ = [
    "TRACE_TYPES",
    "ToolCall",
    "Trace",
    "TraceAssertion",
    "decided_on_host",
    "summary_of",
    "trace_of",
    "vally_input",
]


# --------------------------------------------------------------------------------------------
# Trajectory and execution-metric assertions.

TRACE_TYPES = {
    "trajectory:tool-used", "trajectory:tool-sequence", "trajectory:tool-args-match",
    "trajectory:step-count", "execution-metrics", "latency", "cost", "token-usage",
    "skill-used", "not-skill-used",
}  # fmt: skip

V4_TRACE_TYPES = ("tool-trajectory", "skill-trigger")
"""AgentV v4's trace checks (``graders.trajectory``)."""


def decided_on_host(kind: str) -> bool:
    """Whether an assertion of type ``kind`` is decided here, by a rule over what it was
    given (a built-in, a trace check, v4's): a ``{{ var }}`` that renders to nothing inside
    one leaves a check (``\\b\\b``, a tool named ``""``, ``skills/pdf-/``) that no vacuity rule
    can tell from a real one, so its loader refuses it (``formats.agentv.cases``)."""
    base = kind.removeprefix("not-")
    return is_builtin(kind) or base in TRACE_TYPES or base in V4_TRACE_TYPES


_METRIC_KEYS = {
    "execution-metrics": {
        "max_tool_calls", "max_llm_calls", "max_tokens", "max_cost_usd", "max_duration_ms",
        "target_exploration_ratio", "exploration_tolerance",
    },
    "latency": {"max_ms", "threshold"},
    "cost": {"max_usd", "budget"},
    "token-usage": {"max_total_tokens", "max_total", "max_input", "max_output"},
}  # fmt: skip
_READ_ONLY = re.compile(r"read|search|grep|glob|list|find|view|fetch|get|ls|cat", re.I)


def collect_metrics(data: Any) -> Any:
    """A metric check's limits (``max_ms: 500``) gathered under ``metrics``, each refused
    unless it is a finite number >= 0 (the rule of ``TraceAssertion`` and of its entries)."""
    if isinstance(data, dict) and data.get("type") in _METRIC_KEYS:
        allowed = _METRIC_KEYS[data["type"]]
        metrics = {k: v for k, v in data.items() if k in allowed}
        rest = {k: v for k, v in data.items() if k not in allowed}
        if not metrics:
            raise ValueError(f"{data['type']} needs one of: {', '.join(sorted(allowed))}")
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{key} must be a number")
            if not math.isfinite(value) or value < 0:
                # `.inf` holds for every run, a negative limit for none.
                raise ValueError(f"{key} must be a finite number >= 0")
        if data["type"] == "execution-metrics" and set(metrics) == {"exploration_tolerance"}:
            raise ValueError(
                "exploration_tolerance needs target_exploration_ratio: with "
                "no limit, execution-metrics holds for every run"
            )
        return {**rest, "metrics": metrics}
    return data


def check_trace(kind: str, value: Any) -> None:
    """A ValueError when a trace check of type ``kind`` (a type of ``TRACE_TYPES``, negation
    resolved) cannot be run as given, or no run could fail it."""
    if kind.startswith("trajectory:") and value is None:
        raise ValueError(f"{kind} needs a 'value'")
    if kind.endswith("skill-used"):
        _check_skill_value(kind, value)
    if kind == "trajectory:tool-sequence":
        steps = value.get("steps") if isinstance(value, dict) else value
        if not isinstance(steps, list) or not steps:
            raise ValueError("trajectory:tool-sequence needs value.steps, a list of tools")
        if any(_blank(s.get("tool") if isinstance(s, dict) else s) for s in steps):
            raise ValueError(f"trajectory:tool-sequence: {_BLANK_TOOL}")
    if kind == "trajectory:tool-used":
        _check_tool_used(value)
    if kind == "trajectory:step-count":
        spec = value if isinstance(value, dict) else {"max": value}
        low, high = spec.get("min"), spec.get("max")
        for key, bound in (("min", low), ("max", high)):
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or bound < 0
            ):
                raise ValueError(f"trajectory:step-count: {key} must be a whole number >= 0")
        if not low and high is None:
            raise ValueError(
                "trajectory:step-count needs a max or a min above 0: without "
                "one it holds for every run"
            )
    if kind == "trajectory:tool-args-match" and not (
        isinstance(value, dict) and isinstance(value.get("name"), str)
    ):
        raise ValueError("trajectory:tool-args-match needs value.name and value.args")
    if kind == "trajectory:tool-args-match" and _blank(value["name"]):
        raise ValueError(f"trajectory:tool-args-match: {_BLANK_TOOL}")


def trace_type(kind: str, negate: Any) -> tuple[str, bool]:
    """The trace check an entry of type ``kind`` runs, and whether its result is negated once
    more: ``not-X`` is ``X`` negated; AgentV's ``skill-used`` with ``negate: true`` is
    ``not-skill-used`` (AgentV inverts it, then negates it again)."""
    if kind == "skill-used" and negate is True:
        return "not-skill-used", False
    base = kind.removeprefix("not-")
    if kind not in TRACE_TYPES and base in TRACE_TYPES:
        return base, True
    return kind, False


class TraceAssertion(BaseModel):
    """A check over the trace and the reported metrics, evaluated on the host.

    Example::

        TraceAssertion(type="trajectory:tool-used", value={"name": "search", "min": 2})
    """

    model_config = ConfigDict(extra="forbid")

    type: str
    value: Any = None
    mode: Literal["in_order", "exact", "partial"] | None = None
    metrics: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_metrics(cls, data: Any) -> Any:
        return collect_metrics(data)

    @model_validator(mode="after")
    def _check(self) -> TraceAssertion:
        if self.type not in TRACE_TYPES:
            raise ValueError(f"unknown trace assertion {self.type!r}")
        check_trace(self.type, self.value)
        return self

    def display_name(self) -> str:
        if isinstance(self.value, str):
            return f"{self.type} {quoted(self.value[:40])}"
        if isinstance(self.value, dict) and self.value.get("name"):
            return f"{self.type} {quoted(str(self.value['name']))}"
        return self.type

    def evaluate(self, payload: Payload) -> GraderResult:
        trace = trace_of(payload.messages, _events(payload))
        kind = self.type.removeprefix("trajectory:")
        try:
            passed, score, evidence, *named = getattr(self, "_" + kind.replace("-", "_"))(
                trace, payload
            )
            named = named[0] if named else self._named(trace)
        except _TooSlow as exc:
            return GraderResult(
                name=self.display_name(),
                type="trace",
                status=Status.error,
                passed=False,
                score=0.0,
                evidence=str(exc),
            )
        return GraderResult(
            name=self.display_name(),
            type="trace",
            status=Status.passed if passed else Status.failed,
            passed=passed,
            score=score,
            evidence=evidence,
            calls=named,
        )

    def _named(self, trace: Trace) -> list[int]:
        """The calls of the tools this check names (their positions), for the report's steps:
        the tool-used, tool-sequence and tool-args-match checks name tools (the skill checks
        name the calls they counted as they check); the others count or measure the whole run."""
        value = self.value
        if self.type == "trajectory:tool-sequence":
            steps = value.get("steps") if isinstance(value, dict) else value
            names = {s.get("tool") if isinstance(s, dict) else s for s in steps}
        elif self.type == "trajectory:tool-args-match":  # the call that matched, or every try
            found = self._args_matching(trace)
            if found is not None:
                return [found]
            names = {value["name"]}
        elif self.type == "trajectory:tool-used":
            items = value if isinstance(value, list) else [value]
            specs = [i if isinstance(i, dict) else {"name": i} for i in items]
            names = {s["name"] for s in specs if s.get("name")}
            patterns = [str(s["pattern"]) for s in specs if not s.get("name") and s.get("pattern")]
            return [
                i
                for i, c in enumerate(trace.tool_calls)
                if c.name in names or any(_search(p, c.name) for p in patterns)
            ]
        else:
            return []
        return [i for i, c in enumerate(trace.tool_calls) if c.name in names]

    # Each check returns (passed, score, evidence), and the calls it names when it found
    # them itself (else ``_named`` does).

    def _skill_used(self, trace: Trace, _: Payload) -> tuple[bool, float, str, list[int]]:
        ok, why, at = check_skills(self.value, trace, inverse=False)
        return ok, float(ok), why, at

    def _not_skill_used(self, trace: Trace, _: Payload) -> tuple[bool, float, str, list[int]]:
        ok, why, at = check_skills(self.value, trace, inverse=True)
        return ok, float(ok), why, at

    def _tool_used(self, trace: Trace, _: Payload) -> tuple[bool, float, str]:
        spec = self.value
        names = spec if isinstance(spec, list) else [spec]
        if isinstance(spec, dict):
            names = [spec]
        misses = []
        for item in names:
            name = item.get("name") if isinstance(item, dict) else item
            pattern = item.get("pattern") if isinstance(item, dict) else None
            low = int(item.get("min", 1)) if isinstance(item, dict) else 1
            high = item.get("max") if isinstance(item, dict) else None
            # The pattern is the suite's, the names the agent's: bounded like every regex.
            count = sum(
                1
                for c in trace.tool_calls
                if (c.name == name if name else _search(str(pattern), c.name))
            )
            if count < low or (high is not None and count > int(high)):
                bound = f"at least {low}" + (f", at most {high}" if high is not None else "")
                misses.append(f"{name or pattern}: called {count} times, wanted {bound}")
        used = listed([c.name for c in trace.tool_calls])
        if misses:
            return False, 0.0, "; ".join(misses) + f" (trace: {used})"
        return True, 1.0, f"tool usage as required (trace: {used})"

    def _tool_sequence(self, trace: Trace, _: Payload) -> tuple[bool, float, str]:
        value = self.value
        steps = value.get("steps") if isinstance(value, dict) else value
        mode = (value.get("mode") if isinstance(value, dict) else None) or self.mode or "in_order"
        wanted = [s.get("tool") if isinstance(s, dict) else s for s in steps]
        seen = [c.name for c in trace.tool_calls]
        if mode == "exact":
            matched = sum(1 for a, b in zip(wanted, seen, strict=False) if a == b)
            passed = seen == wanted
            score = 1.0 if passed else matched / max(len(wanted), len(seen), 1)
        else:
            i = 0
            for name in seen:
                if i < len(wanted) and name == wanted[i]:
                    i += 1
            passed, score = i == len(wanted), i / len(wanted)
        evidence = f"{mode}: wanted {wanted}, saw {listed(seen)}"
        return passed, score, evidence

    def _tool_args_match(self, trace: Trace, _: Payload) -> tuple[bool, float, str]:
        spec = self.value
        want = spec.get("args") or {}
        mode = spec.get("mode") or self.mode or "partial"
        calls = [c for c in trace.tool_calls if c.name == spec["name"]]
        if self._args_matching(trace) is not None:
            exactly = "exactly " if mode == "exact" else ""
            return True, 1.0, f"a {spec['name']} call has {exactly}these arguments"
        if not calls:
            return False, 0.0, f"no {spec['name']} call in the trace"
        saw = listed([c.args for c in calls], lambda args: cut_name(repr(args)))  # agent-written
        return False, 0.0, f"no {spec['name']} call matches {want} ({mode}); saw {saw}"

    def _args_matching(self, trace: Trace) -> int | None:
        """The position of the first call of the tool with the arguments wanted, or None."""
        spec = self.value
        want = spec.get("args") or {}
        mode = spec.get("mode") or self.mode or "partial"
        ignore = set(spec.get("ignore") or [])
        defaults = spec.get("defaults") or {}
        for i, call in enumerate(trace.tool_calls):
            if call.name != spec["name"]:
                continue
            got = call.args if isinstance(call.args, dict) else {}
            if mode == "exact":
                full = {**defaults, **want}
                if {k: v for k, v in got.items() if k not in ignore} == {
                    k: v for k, v in full.items() if k not in ignore
                }:
                    return i
            elif all(got.get(k) == v for k, v in want.items()):
                return i
        return None

    def _step_count(self, trace: Trace, _: Payload) -> tuple[bool, float, str]:
        spec = self.value if isinstance(self.value, dict) else {"max": self.value}
        kind = spec.get("type", "tool")
        if kind == "tool":
            count = len(trace.tool_calls)
        elif kind == "message":
            count = trace.assistant_messages
        else:
            count = sum(1 for e in trace.events if e.get("type") == kind)
        low, high = spec.get("min"), spec.get("max")
        passed = (low is None or count >= int(low)) and (high is None or count <= int(high))
        return passed, float(passed), f"{count} {kind} steps (min {low}, max {high})"

    def _metrics(self, payload: Payload, trace: Trace) -> dict[str, float | None]:
        usage = payload.token_usage
        tokens = None
        if usage is not None and (usage.input is not None or usage.output is not None):
            tokens = (usage.input or 0) + (usage.output or 0)
        return {
            "tool_calls": float(len(trace.tool_calls)) if _has_trace(payload) else None,
            "llm_calls": float(trace.assistant_messages) if payload.messages else None,
            "tokens": tokens,
            "input": usage.input if usage else None,
            "output": usage.output if usage else None,
            "cost_usd": payload.cost_usd,
            "duration_ms": payload.duration_ms,
        }

    def _gate(self, pairs: list[tuple[str, float | None, float]]) -> tuple[bool, float, str]:
        notes, ok = [], 0
        for label, actual, limit in pairs:
            if actual is None:
                notes.append(f"{label}: not reported (limit {limit:g})")
            elif actual <= limit:
                ok += 1
                notes.append(f"{label} {actual:g} <= {limit:g}")
            else:
                notes.append(f"{label} {actual:g} > {limit:g}")
        return ok == len(pairs), ok / len(pairs), "; ".join(notes)

    def _execution_metrics(self, trace: Trace, payload: Payload) -> tuple[bool, float, str]:
        m, have = self._metrics(payload, trace), self.metrics
        pairs = [
            (label, m[key], have[opt])
            for opt, key, label in (
                ("max_tool_calls", "tool_calls", "tool calls"),
                ("max_llm_calls", "llm_calls", "LLM calls"),
                ("max_tokens", "tokens", "tokens"),
                ("max_cost_usd", "cost_usd", "cost (USD)"),
                ("max_duration_ms", "duration_ms", "duration (ms)"),
            )
            if opt in have
        ]
        if "target_exploration_ratio" in have:
            target = have["target_exploration_ratio"]
            tolerance = have.get("exploration_tolerance", 0.2)
            calls = trace.tool_calls
            if calls:
                ratio = sum(bool(_READ_ONLY.search(c.name)) for c in calls) / len(calls)
                pairs.append(("exploration ratio distance", abs(ratio - target), tolerance))
            else:
                pairs.append(("exploration ratio distance", None, tolerance))
        return self._gate(pairs)

    def _latency(self, trace: Trace, payload: Payload) -> tuple[bool, float, str]:
        limit = self.metrics.get("max_ms", self.metrics.get("threshold"))
        return self._gate([("duration (ms)", payload.duration_ms, float(limit or 0))])

    def _cost(self, trace: Trace, payload: Payload) -> tuple[bool, float, str]:
        limit = self.metrics.get("max_usd", self.metrics.get("budget"))
        return self._gate([("cost (USD)", payload.cost_usd, float(limit or 0))])

    def _token_usage(self, trace: Trace, payload: Payload) -> tuple[bool, float, str]:
        m = self._metrics(payload, trace)
        pairs = [
            (label, m[key], self.metrics[opt])
            for opt, key, label in (
                ("max_total_tokens", "tokens", "tokens"),
                ("max_total", "tokens", "tokens"),
                ("max_input", "input", "input tokens"),
                ("max_output", "output", "output tokens"),
            )
            if opt in self.metrics
        ]
        return self._gate(pairs)


_BLANK_TOOL = (
    "a blank tool name (a var that rendered to nothing?) is called by no run: negated, the "
    "check would hold for every run"
)


def _blank(name: Any) -> bool:
    """A tool or skill name no run can have: not a string, or only whitespace (the transcript
    drops a call with an empty name). A check that needs one fails every run, so negated (or
    as an allowed tool) it holds for every run; a var that rendered to nothing makes one."""
    return not isinstance(name, str) or not name.strip()


def _check_tool_used(value: Any) -> None:
    """Each item names a tool (or a pattern) and a count that some run can miss: no items, a
    blank name, or ``min: 0`` with no ``max`` hold for every run."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError(
            "trajectory:tool-used needs at least one tool: with none it holds for every run"
        )
    for item in items:
        spec = item if isinstance(item, dict) else {"name": item}
        name, pattern = spec.get("name"), spec.get("pattern")
        if not (isinstance(name, str) and name.strip()) and not (
            isinstance(pattern, str) and pattern.strip()
        ):
            raise ValueError("trajectory:tool-used: each tool needs a name or a pattern")
        for key in ("min", "max"):
            bound = spec.get(key)
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or bound < 0
            ):
                raise ValueError(f"trajectory:tool-used: {key} must be a whole number >= 0")
        if spec.get("min", 1) == 0 and spec.get("max") is None:
            raise ValueError(
                f"trajectory:tool-used {name or pattern!r}: min 0 with no max holds for every run"
            )


def _check_skill_value(kind: str, value: Any) -> None:
    if isinstance(value, str) and value.strip():
        return
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return
    named = [
        value[k]
        for k in ("name", "pattern")
        if isinstance(value, dict) and value.get(k) is not None
    ]
    if named and not any(_blank(n) for n in named):
        for key in ("min", "max"):
            if key in value and (
                isinstance(value[key], bool) or not isinstance(value[key], int) or value[key] < 0
            ):
                raise ValueError(f"{kind}: {key} must be a whole number >= 0")
        if kind == "not-skill-used" and ("min" in value or value.get("max", 0) != 0):
            raise ValueError("not-skill-used takes a name or pattern, with no bounds (or max: 0)")
        if kind == "skill-used" and value.get("min", 1) == 0 and value.get("max") is None:
            raise ValueError("skill-used: min 0 with no max holds for every run")
        return
    raise ValueError(f"{kind} needs a skill name, a list of names, or {{name|pattern, min, max}}")


def _events(payload: Payload) -> list[Any]:
    trace = payload.trace or {}
    events = trace.get("events") if isinstance(trace, dict) else None
    return events if isinstance(events, list) else []


def _has_trace(payload: Payload) -> bool:
    return bool(payload.messages) or bool(_events(payload))
