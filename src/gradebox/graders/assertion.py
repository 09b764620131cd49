"""A test's assertions: what each entry of an ``assert`` list compiles to, and how their
results add up to the test's verdict.

Every assertion takes the same modifiers, whatever runs it:

- ``name`` (or AgentV's ``metric``): shown in results;
- ``weight``: its share of the test's weighted score (default 1);
- ``negate: true``: pass and fail swap (an ``error`` stays an error: no verdict negated is
  still no verdict; so does a fail that may be a crash: a non-zero exit with no result and
  anything printed, on either stream);
- ``required: true`` (gate at ``min_score``, default 0.8) or ``required: 0.6``: the test
  fails when this assertion scores below its gate, whatever the others score.

Kinds: host-side checks (built-ins over the answer, trace checks over what the agent did),
graders run in containers (program, script, custom assertions) and ``assert-set`` groups
(AgentV v4's ``composite`` is one, whose aggregator may be one more program or LLM grader,
run once its children have results).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic_core import to_jsonable_python

from ..core import untrusted
from ..core.pathnames import exists, is_dir, is_file, resolve_path
from ..core.scores import reaches
from ..core.types import format_duration
from ..core.yamlfile import LineMap
from ..errors import ConfigError, UnsupportedFeature
from ..llm.targets import (
    ModelTarget,
    TargetSet,
    TargetSources,
    agentv_entries,
    agentv_kind,
    agentv_label,
    load_targets,
)
from ..protocol.models import GraderResult, Payload, Status
from .builtin import BuiltinAssertion
from .config import GraderConfig, ProgramGrader, ScriptGrader, grader_from_data
from .custom import CustomAssertion
from .entries import (
    AssertSetEntry,
    Builtin,
    CodeAggregator,
    CompositeEntry,
    CustomEntry,
    Entry,
    LlmJudge,
    ProgramEntry,
    ScriptEntry,
    ThresholdAggregator,
    TraceEntry,
    VerifierEntry,
    WeightedAverage,
    check_entry,
    entry_model,
    type_names,
)
from .fields import FieldAccuracy
from .llm import CommandJudge, LlmAssertion, RubricItem
from .run import project_folder, uv_src_layout
from .trace import TraceAssertion, trace_type
from .trajectory import V4_PASS, SkillTrigger, ToolTrajectory
from .verifier import node_test_grader_data, pytest_grader_data

__all__ = [
    "DEFAULT_REQUIRED",
    "TEST_TRANSFORM",
    "AssertSet",
    "Assertion",
    "CompileContext",
    "GraderAssertion",
    "HostAssertion",
    "aggregate",
    "aggregated",
    "compile_assertion",
    "fold",
    "leaves",
    "parse_transform",
]

DEFAULT_REQUIRED = 0.8
"""The gate of ``required: true`` when no ``min_score`` is given (AgentV's default)."""

_MODIFIERS = ("name", "metric", "weight", "negate", "required", "min_score")

GRADER_TARGET: ContextVar[str | None] = ContextVar("agentv_grader_target", default=None)
"""AgentV's ``--grader-target NAME``: the judge of every LLM grader of the AgentV files loaded
meanwhile, whatever they name (``formats.agentv.chosen_target`` sets it)."""

LLM_TYPES = frozenset(type_names(LlmJudge))

# Names other harnesses use that need what this release does not have: a clear refusal
# naming the line beats a silently dropped check.
_LATER = {
    "agent-rubric": "a coding agent as the judge; use llm-rubric with a model provider",
    "agent-judge": "a coding agent as the judge; use llm-rubric with a model provider",
    "g-eval": "G-Eval is not run; use llm-rubric",
    "similar": "embedding similarity is not run; use llm-rubric or a script grader",
    "javascript": "inline JavaScript runs in AgentV's own process; use a script grader",
    "python": "inline Python runs in AgentV's own process; use a script grader",
    "webhook": "graders have no network; use a script grader",
}


def refused_types() -> set[str]:
    """Types refused by name, with a reason (not custom assertions: the schema says so)."""
    return set(_LATER)


@dataclass(kw_only=True)
class Scoring:
    """The modifiers every assertion takes (see the module docstring)."""

    name: str | None = None
    weight: float = 1.0
    negate: bool = False
    required: float | None = None
    field: str | None = None  # where it was written, for errors found later (the plan)
    line: int | None = None
    file: str | None = None
    transform: str | None = None  # AgentV: a module over the answer this grader sees

    def scoring(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weight": self.weight,
            "negate": self.negate,
            "required": self.required,
        }


@dataclass(kw_only=True)
class HostAssertion(Scoring):
    """Evaluated on the host: a built-in over the answer, or a check over the trace."""

    check: BuiltinAssertion | TraceAssertion | FieldAccuracy | ToolTrajectory | SkillTrigger

    def display_name(self) -> str:
        return self.name or self.check.display_name()

    def evaluate(self, payload: Payload) -> GraderResult:
        if isinstance(self.check, BuiltinAssertion):
            return self.check.evaluate(payload.output)
        return self.check.evaluate(payload)

    def describe(self) -> Any:
        return to_jsonable_python(self.check)


@dataclass(kw_only=True)
class GraderAssertion(Scoring):
    """A program/script grader or a custom assertion, run in a container."""

    grader: GraderConfig
    config: dict[str, Any] | None = None

    def display_name(self) -> str:
        return self.name or self.grader.display_name()


@dataclass(kw_only=True)
class AssertSet(Scoring):
    """``type: assert-set``: one weighted score over its children. Without ``threshold`` it
    passes when every child of nonzero weight passes; with one, when the score reaches it.

    AgentV v4's ``composite`` is one too: ``weighted_average`` (weighted, at 0.8),
    ``threshold`` (``aggregator="count"``: the share of children that passed, against
    ``threshold``), or a ``program`` (a code-grader or LLM grader given the children's results,
    whose result is the set's)."""

    children: list[Assertion]
    threshold: float | None = None
    aggregator: Literal["weighted", "count"] = "weighted"
    program: GraderAssertion | LlmGraderAssertion | None = None

    def display_name(self) -> str:
        return self.name or "assert-set"


@dataclass(kw_only=True)
class LlmGraderAssertion(Scoring):
    """An LLM grader (``llm-grader``, ``llm-rubric``, plain-string rubrics): run on the host,
    which alone holds the model key."""

    llm: LlmAssertion

    def display_name(self) -> str:
        return self.name or self.llm.label

    def describe(self) -> Any:
        return self.llm.describe()


Assertion = HostAssertion | GraderAssertion | LlmGraderAssertion | AssertSet
Leaf = HostAssertion | GraderAssertion | LlmGraderAssertion


def leaves(assertions: list[Assertion]) -> Iterator[Leaf]:
    """Every assertion that runs, depth first (the children of sets in place of the set, then
    the set's aggregator program, if it has one: it runs after them, see ``aggregated``)."""
    for a in assertions:
        if isinstance(a, AssertSet):
            yield from leaves(a.children)
            if a.program is not None:
                yield a.program
        else:
            yield a


def aggregated(assertions: list[Assertion]) -> Iterator[AssertSet]:
    """The sets whose result comes from an aggregator program, innermost first (a set's
    program reads its children's results, so an inner set's program runs before)."""
    for a in assertions:
        if isinstance(a, AssertSet):
            yield from aggregated(a.children)
            if a.program is not None:
                yield a


# --------------------------------------------------------------------------------------------
# From results to a verdict.


def _gated(result: GraderResult, a: Scoring) -> GraderResult:
    result.name = a.name or result.name
    result.weight, result.required = a.weight, a.required
    if a.negate:
        result.negated = True
        if result.no_verdict and result.status is Status.failed:
            # A crash is no verdict: negated, it would be a pass nobody earned.
            result.status, result.passed, result.score = Status.error, False, 0.0
            result.evidence = f"negate needs a verdict, and {result.no_verdict}"
        elif result.status is not Status.error:  # no verdict negated is still no verdict
            passed = not result.passed
            result.passed, result.score = passed, round(1.0 - result.score, 6)
            result.status = Status.passed if passed else Status.failed
            result.evidence = f"negated: {result.evidence}".strip()
    return result


def fold(a: Assertion, results: dict[int, GraderResult]) -> GraderResult:
    """The result of ``a`` from its leaves' results (keyed by ``id(leaf)``)."""
    if not isinstance(a, AssertSet):
        return _gated(results[id(a)], a)
    children = [fold(c, results) for c in a.children]
    if a.program is not None:  # its aggregator's result (an error when a child gave none)
        own = results[id(a.program)].model_copy(update={"children": children})
        own.name, own.type = a.display_name(), "assert-set"
        return _gated(own, a)
    weights = [c.weight for c in a.children]
    total = sum(weights)
    score = (
        sum(r.score * w for r, w in zip(children, weights, strict=True)) / total if total else 0.0
    )
    if a.aggregator == "count":  # v4's runThreshold: the share of children that passed
        score = sum(r.passed for r in children) / len(children)
    if any(r.status is Status.error for r in children):
        status, evidence = Status.error, "a child assertion gave no verdict"
    elif a.aggregator == "count":
        ok = reaches(score, a.threshold or 0.0)
        status = Status.passed if ok else Status.failed
        evidence = (
            f"{sum(r.passed for r in children)}/{len(children)} passed (threshold {a.threshold:g})"
        )
    elif a.threshold is not None:
        ok = reaches(score, a.threshold)
        status = Status.passed if ok else Status.failed
        evidence = f"weighted score {score:.3f} {'>=' if ok else '<'} threshold {a.threshold:g}"
    else:
        ok = all(r.passed for r, w in zip(children, weights, strict=True) if w > 0)
        status = Status.passed if ok else Status.failed
        failing = [r.name for r, w in zip(children, weights, strict=True) if w > 0 and not r.passed]
        evidence = "every child passed" if ok else f"failed: {', '.join(failing)}"
    result = GraderResult(
        name=a.display_name(),
        type="assert-set",
        status=status,
        passed=status is Status.passed,
        score=round(score, 6),
        evidence=evidence,
        children=children,
    )
    crashed = next((r for r in children if r.no_verdict and not r.passed), None)
    if status is Status.failed and crashed is not None:
        result.no_verdict = f"its child {crashed.name!r} gave none: {crashed.no_verdict}"
    return _gated(result, a)


def aggregate(
    results: list[GraderResult], threshold: float | None, *, agentv: bool = False
) -> tuple[Status, float, list[str]]:
    """A test's verdict: ``(status, weighted score, failed gates)``.

    Any error makes it an error (when unsure, never a pass). A required assertion below its
    gate fails the test. Otherwise it passes when the weighted score reaches ``threshold``,
    or, without one, when every assertion passed.

    ``agentv``: AgentV's rule (its ``orchestrator.ts``): a gate fails on the score alone, and
    a failed gate makes the test's score 0.
    """
    if not results:
        return Status.passed, 1.0, []
    weights = [1.0 if r.weight is None else r.weight for r in results]
    total = sum(weights)
    score = (
        sum(r.score * w for r, w in zip(results, weights, strict=True)) / total
        if total
        else (1.0 if all(r.passed for r in results) else 0.0)
    )
    gates = [
        f"{r.name} scored {r.score:.2f} < required {r.required:g}"
        for r in results
        if r.required is not None
        and (not reaches(r.score, r.required) or (not r.passed and not agentv))
    ]
    if any(r.status is Status.error for r in results):
        return Status.error, score, gates
    if gates:
        return Status.failed, 0.0 if agentv else score, gates
    ok = reaches(score, threshold) if threshold is not None else all(r.passed for r in results)
    return (Status.passed if ok else Status.failed), score, gates


# --------------------------------------------------------------------------------------------
# From a YAML entry to an assertion.


@dataclass
class CompileContext:
    """What compiling one suite's assertions needs to know."""

    file: str
    lines: LineMap
    suite_dir: Path
    customs: dict[str, CustomAssertion]
    defaults: dict[str, Any] = field(default_factory=dict)  # image, timeout, limits
    flavor: Literal["gradebox", "agentv"] = "gradebox"
    preprocessors: list[dict[str, Any]] = field(default_factory=list)
    template: Path | None = None  # the workspace template of the test being compiled
    required_default: float = DEFAULT_REQUIRED  # AgentV: `required: true` gates at the threshold
    search_roots: tuple[Path, ...] = ()  # AgentV: where a script a command names is looked for
    operator_targets: tuple[Path, ...] = ()  # --targets FILE: read before the project's
    _targets: TargetSet | None = None

    @property
    def target_sources(self) -> TargetSources:
        return TargetSources(operator=self.operator_targets, project=self.suite_dir)

    @property
    def targets(self) -> TargetSet:
        if self._targets is None:
            self._targets = load_targets(self.target_sources)
        return self._targets


def _fail(ctx: CompileContext, loc: tuple[str, ...], message: str) -> ConfigError:
    loc = tuple(str(part) for part in loc)  # a key written as 1.5 or ~ is no string
    return ConfigError(message, file=ctx.file, line=ctx.lines.get(loc), field=".".join(loc))


def _unsupported(
    ctx: CompileContext, loc: tuple[str, ...], feature: str, message: str
) -> UnsupportedFeature:
    """``feature`` refused at ``loc`` of the file, with what to do instead (``message``)."""
    loc = tuple(str(part) for part in loc)
    return UnsupportedFeature(
        feature, message, file=ctx.file, line=ctx.lines.get(loc), field=".".join(loc)
    )


def _scored(s: Entry, ctx: CompileContext, loc: tuple[str, ...]) -> dict[str, Any]:
    """The modifiers of a validated entry, as the assertion keeps them."""
    gate = (
        s.required
        if s.required is not True  # false, or the gate itself
        else ctx.required_default
        if s.min_score is None
        else s.min_score
    )
    if gate is not False and reaches(0.0, gate):
        # Every score reaches such a gate (0, or within the tolerance scores are compared
        # within): `required` would require nothing.
        where = "min_score" if s.required is True and s.min_score is not None else "required"
        raise _fail(
            ctx, (*loc, where), f"a required gate at {gate:g} never closes: give one above 0"
        )
    return {
        "name": s.name if "name" in s.model_fields_set else s.metric,
        "weight": s.weight,
        "negate": s.negate,
        "required": None if gate is False else float(gate),
        "field": ".".join(loc),
        "line": ctx.lines.get(loc),
        "file": ctx.file,
    }


def compile_assertion(
    entry: Any, ctx: CompileContext, loc: tuple[str, ...], *, depth: int = 0
) -> Assertion:
    """One entry of an ``assert`` list, validated, with errors naming file, line and field."""
    return _compile(entry, ctx, loc, depth=depth)


def _compile(entry: Any, ctx: CompileContext, loc: tuple[str, ...], *, depth: int = 0) -> Assertion:
    if isinstance(entry, str):
        entry = {"type": "llm-rubric", "value": [entry]}  # a rubric of one item
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise _fail(ctx, loc, "an assertion must be a mapping with a 'type'")
    kind = entry["type"]
    if ctx.flavor == "agentv" and "transform" in entry:  # the assertion compiled without it
        transform = _transform(entry["transform"], kind, ctx, loc)
        rest = {k: v for k, v in entry.items() if k != "transform"}
        compiled = _compile(rest, ctx, loc, depth=depth)
        compiled.transform = transform
        return compiled
    if kind in _LATER:
        raise _unsupported(ctx, (*loc, "type"), f"assertion type {kind!r}", _LATER[kind])
    # Validated as a whole by its kind's model (graders.entries), then compiled from its record:
    model = entry_model(kind)
    if ctx.flavor == "agentv" and issubclass(model, Builtin | TraceEntry):
        entry = _promptfoo_extras(
            entry, keep=set() if issubclass(model, Builtin) else {"threshold"}
        )
    if model is CustomEntry:
        return _custom(entry, ctx, loc)
    if model in (ProgramEntry, ScriptEntry):
        return _grader(entry, ctx, loc)
    if model is VerifierEntry:
        return _verifier(entry, ctx, loc)
    if model is AssertSetEntry:
        return _assert_set(entry, ctx, loc, depth)
    if model is CompositeEntry:
        return _composite(entry, ctx, loc, depth)
    if model is LlmJudge:
        return _llm(entry, ctx, loc)
    return _host(entry, ctx, loc)  # a check on the host: its record's check() runs


def _host(entry: dict[str, Any], ctx: CompileContext, loc: tuple[str, ...]) -> HostAssertion:
    """A built-in, field-accuracy, a trace check or one of AgentV v4's: validated once by its
    model, run as its record's ``check()``."""
    kind = entry["type"]
    schema = entry.get("value") not in (None, "")
    if kind.removeprefix("not-") in ("is-json", "contains-json") and schema:
        raise _unsupported(
            ctx,
            (*loc, "value"),
            f"a JSON schema given to {kind}",
            "the schema would not be checked, and any JSON "
            "would pass; check the answer's shape with a script grader (or field-accuracy)",
        )
    record = check_entry(entry, file=ctx.file, lines=ctx.lines, loc=loc)
    score = _scored(record, ctx, loc)
    if isinstance(record, TraceEntry):
        score["negate"] ^= trace_type(kind, record.negate)[1]
        return HostAssertion(check=record.check(entry), **score)
    return HostAssertion(check=record.check(), **score)


TEST_TRANSFORM = "agentv_transform"
"""The metadata key of an AgentV test's ``options.transform`` (``formats.agentv`` sets it)."""

_PROMPTFOO_EXTRAS = {"id", "threshold", "provider", "config", "transform", "description"}

_AGENTV_JUDGE_KEYS = {"temperature", "max_steps", "maxSteps", "model"}
"""AgentV's LLM-grader keys that change nothing here: ``temperature`` (read before the entry
is validated, into the judge's params), an agentic judge's step budget (the judge here answers
in one call) and ``model`` (which AgentV reads and leaves unused: the judge is a provider's)."""

TRANSFORM_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts")


def parse_transform(value: Any, roots: list[Path] | tuple[Path, ...]) -> str:
    """AgentV's ``parseTransformSpec``: inline code as written, or ``file://PATH[:export]``
    with PATH found where AgentV looks (``resolve_path`` over ``roots``: a ``ConfigError``
    when another local user could have written it), made absolute. A ValueError says what
    is wrong in one line."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            "transform must be a non-empty string: file://module.ts (its default export) or code"
        )
    text = value.strip()
    if not text.startswith("file://"):
        return text
    ref = text.removeprefix("file://")
    colon = ref.rfind(":")
    rel, export = (ref[:colon], ref[colon + 1 :]) if colon > 1 else (ref, "")
    found = resolve_path(rel, roots)
    if found is None or not is_file(found):
        raise ValueError(f"transform file not found: {rel}")
    if found.suffix not in TRANSFORM_SUFFIXES:
        raise ValueError(f"transform {rel!r} is no JavaScript or TypeScript module (.js .mjs .ts)")
    return f"file://{found}" + (f":{export}" if export else "")


def _transform(value: Any, kind: str, ctx: CompileContext, loc: tuple[str, ...]) -> str:
    if kind in ("composite", "assert-set"):
        raise _unsupported(
            ctx,
            (*loc, "transform"),
            f"a transform on {kind}",
            "give each member its own transform, or put it in the test's options.transform",
        )
    try:
        return parse_transform(value, ctx.search_roots or (ctx.suite_dir,))
    except ValueError as exc:
        raise _fail(ctx, (*loc, "transform"), str(exc)) from None


def _promptfoo_extras(entry: dict[str, Any], keep: set[str]) -> dict[str, Any]:
    """AgentV passes promptfoo's extra keys of a built-in through (its schema is
    ``passthrough``): an ``id`` names the assertion, the rest change nothing here (``keep``:
    those that do for this type, as a latency check's ``threshold``). Mapped before the
    entry is validated."""
    out = {k: v for k, v in entry.items() if k not in _PROMPTFOO_EXTRAS - keep}
    named = entry.get("name") if "name" in entry else entry.get("metric")
    if isinstance(entry.get("id"), str) and named is None:
        out["name"] = entry["id"]
    return out


def _assert_set(
    entry: dict[str, Any], ctx: CompileContext, loc: tuple[str, ...], depth: int
) -> AssertSet:
    if depth >= 8:
        raise _fail(ctx, loc, "assert-set nested deeper than 8 levels")
    record = check_entry(entry, file=ctx.file, lines=ctx.lines, loc=loc)
    score = _scored(record, ctx, loc)
    threshold, shared = record.threshold, record.config or {}
    if not isinstance(record.assert_, list) or not record.assert_:
        raise _fail(ctx, (*loc, "assert"), "an assert-set needs a non-empty 'assert' list")
    compiled = []
    for i, child in enumerate(record.assert_):
        if shared and isinstance(child, dict):  # the parent's config, child keys winning
            child = {**child, "config": {**shared, **(child.get("config") or {})}}
        compiled.append(compile_assertion(child, ctx, (*loc, "assert", str(i)), depth=depth + 1))
    if threshold is None and all(c.weight == 0 for c in compiled):
        # It passes when every child of nonzero weight passes: with none, always.
        raise _fail(
            ctx,
            (*loc, "assert"),
            "every child of this assert-set weighs 0: it holds for every answer",
        )
    return AssertSet(children=compiled, threshold=threshold, **score)


_PLAIN = {"name": None, "weight": 1.0, "negate": False, "required": None}


def _composite(
    entry: dict[str, Any], ctx: CompileContext, loc: tuple[str, ...], depth: int
) -> AssertSet:
    """AgentV v4's ``composite`` (``loaders/grader-parser.ts``, ``graders/composite.ts``)."""
    if depth >= 8:
        raise _fail(ctx, loc, "composite nested deeper than 8 levels")
    record = check_entry(entry, file=ctx.file, lines=ctx.lines, loc=loc)
    score = _scored(record, ctx, loc)
    key = next(k for k in ("assertions", "assert", "evaluators") if k in entry)  # as written
    children = [
        compile_assertion(m, ctx, (*loc, key, str(i)), depth=depth + 1)
        for i, m in enumerate(record.assertions)
    ]
    agg, aloc = record.aggregator, (*loc, "aggregator")
    if isinstance(agg, WeightedAverage):
        for child in children:  # v4 weighs a member by the aggregator's weights alone
            child.weight = float((agg.weights or {}).get(child.name, 1.0))
        return AssertSet(children=children, threshold=V4_PASS, **score)
    if isinstance(agg, ThresholdAggregator):
        return AssertSet(children=children, threshold=agg.threshold, aggregator="count", **score)
    program: GraderAssertion | LlmGraderAssertion
    if isinstance(agg, CodeAggregator):
        # One more script grader, run in the sandbox; the children's results on its stdin.
        program = _grader(
            {"type": "code-grader", "command": agg.path, "pass_score": V4_PASS},
            ctx,
            aloc,
            dict(_PLAIN),
        )
    else:
        # An LLM grader whose {{EVALUATOR_RESULTS_JSON}} is filled in when the results exist.
        program = _llm({"type": "llm-grader", "prompt": agg.prompt}, ctx, aloc, dict(_PLAIN))
    return AssertSet(children=children, program=program, **score)


_SCRIPT_FIELDS = set(ScriptGrader.model_fields) - {"weight"}
_JS = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".tsx")
_JS_RUNNERS = {"node", "bun", "npx", "tsx", "deno"}


def infer_image(command: Any) -> str | None:
    """``node``/``bun`` or a JavaScript/TypeScript file needs the node image (which carries
    bun for TypeScript); anything else the default."""
    argv = command.split() if isinstance(command, str) else command
    if not isinstance(argv, list) or not argv or not isinstance(argv[0], str):
        return None
    first = Path(argv[0]).name
    if first in _JS_RUNNERS or any(isinstance(a, str) and a.endswith(_JS) for a in argv[:3]):
        return "node"
    return None


def _grader(
    entry: dict[str, Any],
    ctx: CompileContext,
    loc: tuple[str, ...],
    score: dict[str, Any] | None = None,
) -> GraderAssertion:
    """A program or script grader: AgentV's spellings mapped and the suite's defaults filled
    in, then the entry validated once by its model (``graders.entries``), whose record the
    grader is built from. ``score``: the modifiers, when the entry is no user's (an aggregator)."""
    data = {str(k): v for k, v in entry.items()}
    source = ctx.suite_dir
    if data["type"] != "program":
        if "script" in data and "command" not in data:  # the earliest AgentV spelling
            data["command"] = data.pop("script")
        if "cwd" in data:  # AgentV: command paths resolve from cwd, relative to the eval file
            source = _cwd(data["cwd"], ctx, loc)
        if ctx.flavor == "agentv":
            data = _agentv_script(data, ctx, loc)
            env = data.get("env") if isinstance(data.get("env"), dict) else {}
            src = uv_src_layout(data.get("command"), source)
            if src is not None and "PYTHONPATH" not in env and "files" not in data:
                data["env"] = {**env, "PYTHONPATH": src}  # what `uv run` makes importable
            # AgentV hands a script's own keys (expect_edited: [...]) to it as `config`.
            extra = {k: v for k, v in data.items() if k not in _SCRIPT_KEYS}
            given = data.get("config")
            data = {k: v for k, v in data.items() if k in _SCRIPT_KEYS and k != "config"}
            if isinstance(given, dict) or extra:
                data["config"] = {**(given if isinstance(given, dict) else {}), **extra}
    inherited = {k: v for k, v in ctx.defaults.items() if k not in data and v is not None}
    if "image" not in data and "image" not in inherited:
        args = data.get("args")
        guess = infer_image(
            data.get("command") or [data.get("program"), *(args if isinstance(args, list) else [])]
        )
        if guess:
            inherited["image"] = guess
    record = check_entry({**inherited, **data}, file=ctx.file, lines=ctx.lines, loc=loc)
    config = getattr(record, "config", None) if ctx.flavor == "agentv" else None
    if ctx.flavor == "gradebox" and "config" in record.model_fields_set:
        # As it always was: the script's config is its `config`, and that again under `config`.
        config = {**(record.config or {}), "config": record.config}
    grader = _grader_of(record).with_source(source)
    if source != ctx.suite_dir:
        grader.with_source(source, declared_in=ctx.suite_dir)
    return GraderAssertion(grader=grader, config=config, **(score or _scored(record, ctx, loc)))


_SCRIPT_KEYS = _SCRIPT_FIELDS | set(_MODIFIERS) | {"cwd"}
"""What a script entry of an AgentV file keeps; its other keys are its ``config``."""


def _grader_of(record: Any) -> GraderConfig:
    """The grader a validated program or script entry describes. Its model is the grader's
    plus the modifiers (which are the assertion's, not the grader's), so every check of the
    grader ran as the entry was validated: nothing is validated again."""
    cls: type[ProgramGrader] | type[ScriptGrader]
    cls = ProgramGrader if isinstance(record, ProgramGrader) else ScriptGrader
    values = {k: record.__dict__[k] for k in cls.model_fields}
    values.update(type=cls.model_fields["type"].default, name=None, weight=1.0)
    grader = cls.model_construct(**values)
    if isinstance(grader, ScriptGrader):
        grader._dialect_given = record.dialect_given
    return grader


def _cwd(cwd: Any, ctx: CompileContext, loc: tuple[str, ...]) -> Path:
    """A script's ``cwd``: a folder found where AgentV looks (``resolve_path``: next to the
    file first), inside the project folder."""
    if not isinstance(cwd, str):
        raise _fail(ctx, (*loc, "cwd"), "cwd must be a path")
    source = resolve_path(cwd, ctx.search_roots or (ctx.suite_dir,))
    if source is None or not is_dir(source):
        raise _fail(ctx, (*loc, "cwd"), f"{cwd!r} is not a directory next to the file or above")
    root = project_folder(ctx.suite_dir)
    if source != root and root not in source.parents:
        raise _fail(
            ctx,
            (*loc, "cwd"),
            f"{cwd!r} leads out of the project folder {root}: a grader's files must lie inside it",
        )
    return source


def _agentv_script(
    body: dict[str, Any], ctx: CompileContext, loc: tuple[str, ...]
) -> dict[str, Any]:
    """AgentV's script grader: ``provider: true`` or ``{max_calls}`` (today's name for the
    model proxy, ``target`` before it), and a score without ``pass`` judged by AgentV's
    ``scoreToVerdict`` at 0.8 (custom assertions keep their 0.5)."""
    body = dict(body)
    access = body.pop("provider", None)
    if access is not None and "target" not in body:
        if access is True:
            body["target"] = {}
        elif isinstance(access, dict):
            body["target"] = access
        elif access is not False:
            raise _fail(ctx, (*loc, "provider"), "provider is true or {max_calls: N}")
    body.setdefault("pass_score", DEFAULT_REQUIRED)
    if isinstance(body.get("command"), list) and ctx.search_roots:
        body["command"] = [_found_script(a, ctx) for a in body["command"]]
    return body


def _found_script(arg: Any, ctx: CompileContext) -> Any:
    """A script a command names that is not next to the eval file but where AgentV looks
    (its folder up to the repository, then the working directory), named from the eval file's
    folder so that it is mounted (``resolve_path``). An absolute path is the container's: AgentV
    runs the command as written."""
    if not isinstance(arg, str) or not _SCRIPT_LIKE.search(arg) or Path(arg).is_absolute():
        return arg
    found = resolve_path(arg, ctx.search_roots)
    if found is None or not is_file(found) or exists(ctx.suite_dir / arg):
        return arg
    return os.path.relpath(found, ctx.suite_dir)


_SCRIPT_LIKE = re.compile(r"[/\\]|\.(?:[cm]?[jt]sx?|py|sh|bash|rb|go|rs)$", re.I)


def _custom(entry: dict[str, Any], ctx: CompileContext, loc: tuple[str, ...]) -> GraderAssertion:
    """A custom assertion: the entry validated once (its keys but the grader's own settings
    are its ``config``), run as the script grader its file makes."""
    build: dict[str, Any] = {}
    if ctx.flavor == "agentv" and not isinstance(entry.get("image", ""), str):
        # An AgentV file's custom assertion has been given an image build ({build: ...})
        # as its grader is: kept so, though the schema of gradebox suites takes a name only.
        build = {"image": entry["image"]}
        entry = {k: v for k, v in entry.items() if k != "image"}
    record = check_entry(entry, file=ctx.file, lines=ctx.lines, loc=loc)
    custom = ctx.customs.get(record.type)
    if custom is None:
        known = ", ".join(sorted(ctx.customs)) or "none found"
        raise _fail(
            ctx,
            (*loc, "type"),
            f"unknown assertion type {record.type!r}: not a built-in, not program/script, and "
            f"no .gradebox/assertions/{record.type}.* (or .agentv/assertions/) above "
            f"{ctx.suite_dir} (custom assertions found: {known})",
        )
    own = record.model_dump(mode="json", include=set(_CUSTOM_OWN) & record.model_fields_set)
    image = ctx.defaults.get("image") if custom.image() == "python" else custom.image()
    data = {
        "type": "script",
        "dialect": "assertion",
        "name": custom.name,
        "command": custom.command(),
        "image": image,
        **{k: ctx.defaults[k] for k in ("timeout", "limits") if ctx.defaults.get(k) is not None},
        **own,
        **build,
    }
    data = {k: v for k, v in data.items() if v is not None}
    grader = grader_from_data(
        data, file=ctx.file, lines=ctx.lines, prefix=loc, source_dir=custom.path.parent
    )
    return GraderAssertion(
        grader=grader, config=record.model_extra or None, **_scored(record, ctx, loc)
    )


_CUSTOM_OWN = ("timeout", "limits", "image", "network")
"""A custom assertion's keys that are its grader's settings, not its ``config``."""


def _rubric_items(value: Any) -> list[RubricItem]:
    """Rubric items as validated (``entries.RubricItem``, or a string): what the judge reads."""
    return [
        RubricItem(text=item.strip())
        if isinstance(item, str)
        else RubricItem(
            text=item.text_of(),
            weight=item.weight,
            required=bool(item.required or item.min_score),
            id=None if item.id is None else str(item.id),
        )
        for item in (value if isinstance(value, list) else [value])
    ]


def _prompt_file(text: str, ctx: CompileContext, loc: tuple[str, ...]) -> str | None:
    """A prompt that names a file (``file://x.md``, or a path that exists) is read here; in an
    AgentV file, ``file://`` is found where AgentV looks (``resolve_path``)."""
    forced = text.startswith("file://")
    rel = text.removeprefix("file://").strip()
    if "\n" in rel or len(rel) > 1024:
        return None
    if forced and ctx.search_roots:
        path = resolve_path(rel, ctx.search_roots)
    else:
        path = (ctx.suite_dir / rel).resolve()
    if path is not None and is_file(path):
        try:
            return untrusted.read_text(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(ctx, loc, f"cannot read prompt file {rel!r}: {exc}") from None
    if forced or rel.endswith((".md", ".txt", ".prompt")):
        raise _fail(ctx, loc, f"prompt file {rel!r} not found next to the suite")
    return None


def _llm(
    entry: dict[str, Any],
    ctx: CompileContext,
    loc: tuple[str, ...],
    score: dict[str, Any] | None = None,
) -> LlmGraderAssertion:
    """An LLM grader, validated once by its model (with its modifiers and its rubric items, in
    AgentV's shapes too). ``score``: as ``_grader``'s."""
    body = {k: v for k, v in entry.items() if k not in _MODIFIERS}
    kind, temperature = body["type"], body.get("temperature")
    if "transform" in body:  # an AgentV file's graders have theirs run (_transform)
        raise _unsupported(
            ctx,
            (*loc, "transform"),
            "transform",
            "output transforms are AgentV's: write the grader in an AgentV eval file, or "
            "give it preprocessors: [{type, command}]",
        )
    if ctx.flavor == "agentv":
        if "score_ranges" in entry:
            raise _unsupported(
                ctx,
                (*loc, "score_ranges"),
                "score_ranges on an LLM grader",
                "AgentV reads them as the bands of the one rubric item a text value makes; give "
                "them to the item: value: [{outcome: ..., score_ranges: ...}]",
            )
        # AgentV's keys that change nothing here go; any other is named, as the file's other
        # unknown fields are (AgentV hands it to the judge as config that no text prompt reads).
        entry = _promptfoo_extras(entry, keep={"threshold", "provider", "config"})
        entry = {k: v for k, v in entry.items() if k not in _AGENTV_JUDGE_KEYS}
    record = check_entry(entry, file=ctx.file, lines=ctx.lines, loc=loc)
    score = score or _scored(record, ctx, loc)
    rubrics: list[RubricItem] = []
    if kind == "trajectory:goal-success":
        goal = record.value
        goal = goal.get("goal") if isinstance(goal, dict) else goal
        if not isinstance(goal, str) or not goal.strip():
            raise _fail(ctx, (*loc, "value"), "trajectory:goal-success needs value.goal")
        rubrics = [RubricItem(text=f"The agent's tool calls and answer achieve the goal: {goal}")]
    elif isinstance(record.value, dict):
        # Only trajectory:goal-success's value is a mapping: read as no rubric, the item
        # written here would check nothing (the judge grades the criteria by default).
        raise _fail(
            ctx,
            (*loc, "value"),
            "a mapping is trajectory:goal-success's value ({goal}); give rubric items as a "
            "list (value: [{outcome: ...}]) or under rubrics",
        )
    elif record.value is not None:
        rubrics = _rubric_items(record.value)
    if record.rubrics is not None:
        rubrics += _rubric_items(record.rubrics)
    if record.criteria is not None:  # AgentV's `type: rubrics` writes its items (or one) here
        rubrics += _rubric_items(record.criteria)
    prompt, command, config = None, None, {}
    if isinstance(record.prompt, str):
        prompt = _prompt_file(record.prompt, ctx, (*loc, "prompt")) or record.prompt
    elif record.prompt is not None:
        command, config = record.prompt.command, record.prompt.config
        command = command.split() if isinstance(command, str) else command
        if not command:
            raise _fail(ctx, (*loc, "prompt", "command"), "a prompt command is a list of args")
    if prompt is None and command is None and not rubrics and kind not in _DEFAULT_PROMPTED:
        raise _fail(ctx, loc, "an LLM grader needs a prompt or rubric items")
    threshold = record.threshold
    name = body.get("target", body.get("provider"))
    if ctx.flavor == "agentv" and GRADER_TARGET.get():
        name = GRADER_TARGET.get()
    where = (
        (*loc, "target")
        if "target" in body
        else ((*loc, "provider") if "provider" in body else loc)
    )
    target: ModelTarget | None = None
    unresolved = None
    judge: CommandJudge | None = None
    undefined = None
    try:
        target = ctx.targets.get(name if isinstance(name, str) else None, file=None, field=None)
    except ConfigError as exc:
        judge = _command_judge(ctx, where, name) if ctx.flavor == "agentv" else None
        if judge is None:
            error = _judge_error(ctx, where, name, exc)
            if ctx.flavor != "agentv" or isinstance(error, UnsupportedFeature):
                raise error from None
            # AgentV checks a judge's name when it grades; so do we (and before the run).
            unresolved = str(error)
            undefined = _defined_nowhere(ctx, name)
    if (
        target is not None
        and isinstance(temperature, int | float)
        and not isinstance(temperature, bool)
    ):
        target = target.model_copy(update={"params": {**target.params, "temperature": temperature}})
    pre = ctx.preprocessors  # the file's, checked as it was read (formats.agentv)
    if record.preprocessors is not None:
        pre = [p.model_dump() for p in record.preprocessors]
    label = "rubric" if kind in ("llm-rubric", "rubric", "rubrics") and prompt is None else kind
    llm = LlmAssertion(
        target=target,
        rubrics=rubrics,
        prompt=prompt,
        prompt_command=command,
        prompt_config=config,
        preprocessors=pre,
        pass_score=float(threshold),
        label=label,
        unresolved=unresolved,
        undefined=undefined,
        command_judge=judge,
    )
    return LlmGraderAssertion(llm=llm, **score)


def _defined_nowhere(ctx: CompileContext, name: Any) -> str | None:
    """The judge's name when it is defined in no targets file (``validate`` warns, ``run``
    refuses), as opposed to a definition that is broken (a ``use_target`` loop: an error)."""
    name = name if isinstance(name, str) else ctx.targets.default
    if not isinstance(name, str):
        return None
    try:
        return name if ctx.targets.lookup(name) is None else None
    except ConfigError:
        return None


CommandJudges = Callable[[str, TargetSources, Path], "tuple[str, Any] | None"]
_command_judges: list[CommandJudges] = []


def register_command_judges(resolve: CommandJudges) -> None:
    """How an AgentV provider label becomes a command target (``formats.agentv`` registers
    it when it is imported, as it is before any AgentV file is compiled: graders may not
    import formats nor suite). ``resolve(label, sources, eval_folder)``: ``(kind, target)``,
    the target a ``suite.TargetConfig``, or None when the label is no command provider."""
    if resolve not in _command_judges:
        _command_judges.append(resolve)


def _command_judge(ctx: CompileContext, where: tuple[str, ...], name: Any) -> CommandJudge | None:
    """The judge an AgentV llm-grader names when it is a command (a ``cli`` provider, a
    coding-agent CLI, a v4 discovered provider): run as a cli target (AgentV's delegate and
    cli modes). A provider that cannot run here is refused as it would be as the target."""
    name = name if isinstance(name, str) else ctx.targets.default  # grader_target, defaults
    if not isinstance(name, str):
        return None
    for resolve in _command_judges:
        try:
            found = resolve(name, ctx.target_sources, ctx.suite_dir)
        except UnsupportedFeature as exc:
            raise _unsupported(
                ctx,
                where,
                f"{exc.feature} as the judge",
                exc.message.removeprefix(f"{exc.feature}: "),
            ) from None
        if found is not None:
            kind, target = found
            return CommandJudge(label=name, kind=kind, target=target)
    return None


_DEFAULT_PROMPTED = {"llm-rubric", "rubric", "rubrics", "llm-grader"}
"""Without a prompt or items these judge the test's criteria with the default prompt."""


def _judge_error(
    ctx: CompileContext, where: tuple[str, ...], name: Any, exc: ConfigError
) -> ConfigError:
    """A judge that names an AgentV provider that neither is a model nor runs as a command
    (a mock, a replay: ``_command_judge`` took the commands) is refused by name; a judge that
    names nothing known is the file's own error."""
    name = name if isinstance(name, str) else ctx.targets.default  # grader_target, defaults
    if isinstance(name, str):
        for entry, *_ in agentv_entries(ctx.target_sources):
            kind = agentv_kind(entry)
            if agentv_label(entry) == name and kind:  # (none: a use_target, not an agent)
                return _unsupported(
                    ctx,
                    where,
                    f"a {kind} provider as the judge",
                    f"{name!r} is not a model: gradebox's LLM graders call a model from the "
                    "host; name a model provider (openai, azure, anthropic, gemini, ...)",
                )
    return _fail(ctx, where, exc.message)


def _verifier(entry: dict[str, Any], ctx: CompileContext, loc: tuple[str, ...]) -> GraderAssertion:
    """``pytest`` / ``node-test``: the entry validated once, the script grader that runs its
    files made from that record (what it generates, with the suite's defaults, is checked as
    a grader's configuration: only the files' existence is left, which no schema can say)."""
    record = check_entry(entry, file=ctx.file, lines=ctx.lines, loc=loc)
    given = set(record.model_fields_set) - set(_MODIFIERS)
    body = record.model_dump(mode="json", include=given)
    try:
        if record.type == "pytest":
            data = pytest_grader_data(body, ctx.suite_dir, ctx.template)
        else:
            data = node_test_grader_data(body, ctx.suite_dir)
    except ValueError as exc:
        raise _fail(ctx, (*loc, "files"), str(exc)) from None
    inherited = {k: v for k, v in ctx.defaults.items() if k not in data and v is not None}
    grader = grader_from_data(
        {**inherited, **data}, file=ctx.file, lines=ctx.lines, prefix=loc, source_dir=ctx.suite_dir
    )
    return GraderAssertion(grader=grader, **_scored(record, ctx, loc))


def group_rubrics(entries: list[Any]) -> list[tuple[int, Any]]:
    """Plain-string assertions are rubric items of one built-in rubric grader (placed where
    the first one was); every other entry stays as it is. ``(index, entry)`` pairs."""
    strings = [e for e in entries if isinstance(e, str)]
    out: list[tuple[int, Any]] = []
    placed = False
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            if not placed:
                out.append((i, {"type": "llm-rubric", "value": strings}))
                placed = True
            continue
        out.append((i, entry))
    return out


def defaults_for_graders(image: Any, timeout: float | None, limits: Any) -> dict[str, Any]:
    """A suite's ``defaults`` in the YAML form grader entries are validated from."""
    if image is not None and not isinstance(image, str):
        image = image.model_dump()
    return {
        "image": image,
        "timeout": format_duration(timeout) if timeout is not None else None,
        "limits": limits,
    }
