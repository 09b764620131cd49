"""What an entry of an ``assert`` list may be, as written: one model per kind, told apart by
``type``. They are the contract of ``schemas/suite.schema.json`` (an editor completes and
checks ``assert`` lists with it) and gradebox suites are checked against them as they load
(``check_entry``), so the schema and the loader cannot disagree.

An entry is validated once, by its kind's model (``check_entry``), and ``graders.assertion``
compiles what runs from that record, never from the raw mapping; it does only the checks a
schema cannot (a file that exists, a model target that is known). AgentV's spellings are
mapped onto these names by ``formats.agentv`` (and ``graders.assertion``) before validation,
so an AgentV file's entry is validated by the same model as a gradebox suite's; AgentV's own
kinds (v4's ``composite``, ``tool-trajectory``, ``skill-trigger``) have their models here too.

Adding a kind is one model here: a subclass of ``Entry`` with ``type: Literal[...]`` naming its
types, decorated with ``@kind``. A ``type`` no model names is a custom assertion
(``.gradebox/assertions/NAME.*``), whose keys are its own.
"""

# No `from __future__ import annotations`: evaluated here, once, the annotations cost a
# fraction of what pydantic's evaluating their strings did (this module is imported by every
# command that loads a suite).
import functools
import math
import shlex
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    SkipValidation,
    Tag,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from typing_extensions import TypedDict

from ..core.types import Duration, Threshold
from ..core.yamlfile import LineMap, to_config_error
from ..images import ImageBuild
from ..sandbox.base import Limits
from .builtin import BuiltinAssertion, refuse_vacuous
from .config import EnvKey, ProgramGrader, ScriptGrader
from .fields import FieldAccuracy, FieldSpec
from .trace import TraceAssertion, check_trace, collect_metrics, trace_type
from .trajectory import SkillTrigger, ToolTrajectory

__all__ = [
    "KINDS",
    "AssertItem",
    "Entry",
    "SchemaOf",
    "TraceEntry",
    "check_entry",
    "entry_model",
    "weight_ok",
    "kind",
    "known_types",
]

_REFUSED: dict[str, Any] = {"not": {}}
"""The JSON Schema no value meets: a key the loader takes only to refuse it with a reason."""

Score = Annotated[float, Field(ge=0, le=1)]


def weight_ok(weight: Any) -> bool:
    """A finite number >= 0: a NaN weight (YAML's ``.nan``) passes ``< 0`` and ``> 0`` alike,
    so a failing child of an assert-set weighed by it went unseen, and the score was NaN."""
    number = isinstance(weight, int | float) and not isinstance(weight, bool)
    return number and math.isfinite(weight) and weight >= 0


def _finite(weight: Any) -> Any:
    if not weight_ok(weight):
        raise ValueError("weight must be a finite number >= 0")
    return weight


Weight = Annotated[float, Field(ge=0, allow_inf_nan=False), BeforeValidator(_finite)]


def _gate(required: Any) -> Any:
    if required is None:
        return False
    if isinstance(required, bool) or isinstance(required, int | float) and 0 <= required <= 1:
        return required
    raise ValueError("required must be true, false or a score 0..1")


Gate = Annotated[bool | Score, BeforeValidator(_gate)]


class Entry(BaseModel):
    """The modifiers every assertion takes (``graders.assertion`` says what each does)."""

    # Built on first use, not at import: `gradebox run` pays for the kinds it checks only.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    name: str | None = Field(default=None, description="shown in results")
    metric: str | None = Field(default=None, description="AgentV's name for `name`")
    weight: Weight = Field(default=1.0, description="its share of the test's score")
    # Strict: `negate: "yes"` or `min_score: true` is a mistake, not a spelling of true or 1.
    negate: bool = Field(
        default=False, description="pass and fail swap (an error stays one)", strict=True
    )
    required: Gate = Field(
        default=False,
        description="the test fails when this scores below its gate: true (min_score, else "
        "0.8) or the gate itself",
    )
    min_score: Score | None = Field(
        default=None, description="the gate of required: true", strict=True
    )


def _union(members: dict[str, Any], tag: Callable[[Any], str | None], error: str) -> Any:
    """A union whose member is the one ``tag(value)`` names (``error`` when it names none),
    so that a mistake is one error, in that member's terms. Tags begin with ``<``: the
    locations of errors leave them out (``core.yamlfile``)."""
    return Annotated[
        Union[tuple(Annotated[t, Tag(name)] for name, t in members.items())],  # noqa: UP007
        Discriminator(tag, custom_error_type="shape", custom_error_message=error),
    ]


KINDS: list[type[BaseModel]] = []
"""Every kind's model, in the order the schema lists them."""


def kind(model: type[Entry]) -> type[Entry]:
    """Register an assertion kind (its ``type`` literal names the types it takes)."""
    KINDS.append(model)
    return model


def _not(names: tuple[str, ...]) -> tuple[str, ...]:
    return (*names, *(f"not-{n}" for n in names))


# -------------------------------------------------------------------------------------------
# Built-in checks over the answer (graders.builtin).

Scalar = str | int | float | bool


class Builtin(Entry):
    """A built-in check's entry; ``check()`` is what runs (refused first if no answer can fail
    it, with the reasons of ``graders.builtin.refuse_vacuous``)."""

    @model_validator(mode="before")
    @classmethod
    def _vacuous(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            refuse_vacuous(data["type"], data.get("value"), data.get("flags"))
        return data

    @model_validator(mode="after")
    def _vacuous_as_read(self) -> "Builtin":
        # And again on what runs: lax reading turns YAML's !!binary "" into "" and a !!set
        # into a list, which the check of what was written cannot see.
        refuse_vacuous(self.type, getattr(self, "value", None), getattr(self, "flags", None))  # type: ignore[attr-defined]
        return self

    def check(self) -> BuiltinAssertion:
        value, flags = getattr(self, "value", None), getattr(self, "flags", None)
        return BuiltinAssertion(self.type, value, flags)  # type: ignore[attr-defined]


@kind
class TextCheck(Builtin):
    """``contains``, ``equals``, ... the answer against one value (surrounding space ignored)."""

    type: Literal[_not(("contains", "icontains", "equals", "starts-with", "ends-with"))]  # type: ignore[valid-type]
    value: Scalar


@kind
class ListCheck(Builtin):
    """``contains-any`` / ``contains-all`` (``i``: any letter case) over a list of values."""

    type: Literal[_not(("contains-any", "contains-all", "icontains-any", "icontains-all"))]  # type: ignore[valid-type]
    value: list[Scalar] = Field(min_length=1)


@kind
class RegexCheck(Builtin):
    """``regex``: the answer matches ``value`` (flags i, m, s, x)."""

    type: Literal["regex", "not-regex"]
    value: str
    flags: str | None = Field(default=None, pattern=r"^[imsx]*$")


@kind
class JsonCheck(Builtin):
    """``is-json``: the answer is JSON; ``contains-json``: it holds a JSON value."""

    type: Literal[_not(("is-json", "contains-json"))]  # type: ignore[valid-type]
    value: Annotated[Any, WithJsonSchema(_REFUSED)] = Field(
        default=None, description="refused: a JSON schema here would not be checked"
    )


@kind
class FieldAccuracyCheck(Entry):
    """``field-accuracy``: fields of a JSON answer against the expected one."""

    type: Literal["field-accuracy"]
    fields: list[FieldSpec] = Field(min_length=1)
    aggregation: Literal["weighted_average", "all_or_nothing"] = "weighted_average"

    def check(self) -> FieldAccuracy:
        return FieldAccuracy(tuple(self.fields), self.aggregation)


# -------------------------------------------------------------------------------------------
# Checks over what the agent did (graders.trace).


class TraceEntry(Entry):
    """A trace check's entry; ``check()`` is what runs. The rules of ``graders.trace`` (a
    limit that is a finite number, a value no run could fail) are checked first, as
    ``TraceAssertion`` checks them, with the same reasons."""

    @model_validator(mode="before")
    @classmethod
    def _rules(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            kind_, _ = trace_type(data["type"], data.get("negate"))
            body = {k: v for k, v in data.items() if k not in Entry.model_fields}
            check_trace(kind_, collect_metrics({**body, "type": kind_}).get("value"))
        return data

    def check(self, written: Any) -> TraceAssertion:
        """What runs (``written``: the entry's keys as written, the order its limits keep)."""
        kind_, _ = trace_type(self.type, self.negate)  # type: ignore[attr-defined]
        limits = [k for k in written if k in self.model_fields_set and k not in Entry.model_fields]
        limits = [k for k in limits if k not in ("type", "value", "mode")]
        # Checked as this entry was validated: constructed, not validated again.
        return TraceAssertion.model_construct(
            type=kind_,
            value=getattr(self, "value", None),
            mode=getattr(self, "mode", None),
            metrics={k: float(getattr(self, k)) for k in limits},
        )


_TRAJECTORY = ("trajectory:tool-used", "trajectory:tool-sequence", "trajectory:tool-args-match",
               "trajectory:step-count")  # fmt: skip


@kind
class TrajectoryCheck(TraceEntry):
    """The agent's tool calls: ``trajectory:tool-used`` and its kin."""

    type: Literal[_not(_TRAJECTORY)]  # type: ignore[valid-type]
    value: Any = Field(description="the tool, the steps, or the bounds it checks")
    mode: Literal["in_order", "exact", "partial"] | None = None


@kind
class SkillCheck(TraceEntry):
    """``skill-used``: the agent used a skill (a name, names, or {name|pattern, min, max})."""

    type: Literal["skill-used", "not-skill-used"]
    value: str | list[str] | dict[str, Any]


Number = Annotated[float, Field(ge=0)]


@kind
class ExecutionMetricsCheck(TraceEntry):
    type: Literal[_not(("execution-metrics",))]  # type: ignore[valid-type]
    max_tool_calls: Number | None = None
    max_llm_calls: Number | None = None
    max_tokens: Number | None = None
    max_cost_usd: Number | None = None
    max_duration_ms: Number | None = None
    target_exploration_ratio: Number | None = None
    exploration_tolerance: Number | None = None


@kind
class LatencyCheck(TraceEntry):
    type: Literal[_not(("latency",))]  # type: ignore[valid-type]
    max_ms: Number | None = None
    threshold: Number | None = Field(default=None, description="promptfoo's name for max_ms")


@kind
class CostCheck(TraceEntry):
    type: Literal[_not(("cost",))]  # type: ignore[valid-type]
    max_usd: Number | None = None
    budget: Number | None = None


@kind
class TokenUsageCheck(TraceEntry):
    type: Literal[_not(("token-usage",))]  # type: ignore[valid-type]
    max_total_tokens: Number | None = None
    max_total: Number | None = None
    max_input: Number | None = None
    max_output: Number | None = None


def _base(model: type[BaseModel], record: BaseModel) -> Any:
    """``record`` as its base ``model`` (what runs): constructed, not validated again, for its
    model's rules ran as ``record`` was validated."""
    values = {k: getattr(record, k) for k in model.model_fields}
    return model.model_construct(_fields_set=record.model_fields_set & set(values), **values)


@kind
class ToolTrajectoryCheck(Entry, ToolTrajectory):  # type: ignore[misc]
    """``tool-trajectory`` (AgentV v4, with v4's semantics): the agent's tool calls against
    ``expected`` (by ``mode``) or, ``any_order``, against ``minimums``."""

    type: Literal["tool-trajectory"]  # type: ignore[assignment]

    def check(self) -> ToolTrajectory:
        return _base(ToolTrajectory, self)


@kind
class SkillTriggerCheck(Entry, SkillTrigger):  # type: ignore[misc]
    """``skill-trigger`` (AgentV v4, with v4's semantics): the agent invoked ``skill`` (with
    ``should_trigger: false``, it did not)."""

    type: Literal["skill-trigger"]  # type: ignore[assignment]

    def check(self) -> SkillTrigger:
        return _base(SkillTrigger, self)


# -------------------------------------------------------------------------------------------
# Judges: LLM graders, run from the host (llm.grader).


def _shape(value: Any) -> str | None:
    return (
        "<text>" if isinstance(value, str)
        else "<item>" if isinstance(value, dict)
        else "<items>" if isinstance(value, list)
        else None
    )  # fmt: skip


def _by_shape(error: str, **members: Any) -> Any:
    """A union told apart by what was written: ``text`` (a string), ``item`` (a mapping),
    ``items`` (a list)."""
    return _union({f"<{shape}>": t for shape, t in members.items()}, _shape, error)


_NOT_AN_ITEM = "a rubric item is a string or {outcome, weight, required}"


def _written(text: str) -> str:
    if not text.strip():
        raise ValueError(_NOT_AN_ITEM)
    return text


ItemText = Annotated[str, AfterValidator(_written)]


def _band_start(key: Any) -> int:
    """The score a band of ``score_ranges`` written as a mapping starts at (``8``, ``"8-10"``)."""
    try:
        return int(str(key).split("-")[0])
    except ValueError:
        raise ValueError("score_ranges keys are scores 0..10") from None


def _band_key(key: Any) -> Any:
    _band_start(key)  # refused unless it names a score
    return key


BandKey = Annotated[Any, AfterValidator(_band_key)]


class ScoreBand(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    score_range: list[int] = Field(min_length=1, description="[lo, hi], of 0..10")
    outcome: str = Field(description="what an answer in this band does")


ScoreRanges = _by_shape(
    "score_ranges is a list or a mapping", item=dict[BandKey, str], items=list[ScoreBand]
)


class RubricItem(BaseModel):
    """One item the judge checks: its text, its share of the score, whether it must hold."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    outcome: str | None = Field(default=None, description="what the answer must do")
    criteria: str | None = None
    text: str | None = None
    id: str | int | None = None
    weight: Weight = 1.0
    required: Gate = False
    min_score: Score | None = Field(default=None, strict=True, description="makes it required")
    score_ranges: ScoreRanges | None = Field(
        default=None,
        description="AgentV's analytic bands (scores 0..10): [{score_range: [lo, hi], outcome}] "
        "or {score: text}; the item holds when the answer reaches 8",
    )
    operator: Literal["correctness", "contradiction"] | None = Field(
        default=None, description="AgentV's; not given to the judge"
    )

    @model_validator(mode="after")
    def _has_text(self) -> "RubricItem":
        if not self.text_of():
            raise ValueError("a rubric item needs its text in 'outcome' (or score_ranges)")
        return self

    def text_of(self) -> str:
        """Its text: ``outcome`` (or ``criteria``, ``text``), else its bands as one item the
        judge passes when the answer reaches 8 or more (AgentV's 0.8); blank: ``""``."""
        given = next((k for k in ("outcome", "criteria", "text") if k in self.model_fields_set), "")
        text = getattr(self, given) if given else None
        if text is None and self.score_ranges:
            ranges = self.score_ranges
            bands = sorted(
                [(b.score_range[0], b.outcome) for b in ranges]
                if isinstance(ranges, list)
                else [(_band_start(k), v) for k, v in ranges.items()]
            )
            title = f"{self.id or 'criterion'}: the answer reaches a score of 8 or more"
            lines = [f"{title} on this 0-10 scale:"] + [f"  {n}: {t.strip()}" for n, t in bands]
            return "\n".join(lines)
        return (text or "").strip()


Items = list[_by_shape(_NOT_AN_ITEM, text=ItemText, item=RubricItem)]  # type: ignore[misc]
Rubric = _by_shape(_NOT_AN_ITEM, text=ItemText, item=RubricItem, items=Items)
"""Rubric items: one (a string, a mapping) or a list of them."""
RubricOrGoal = _by_shape(_NOT_AN_ITEM, text=ItemText, item=dict[str, Any], items=Items)
"""An LLM grader's ``value``: its rubric items, or trajectory:goal-success's ``{goal}``."""


class PromptCommand(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    command: str | list[str] = Field(description="prints the judge's prompt")
    config: dict[str, Any] = Field(default_factory=dict)


class Preprocessor(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    type: str = Field(min_length=1, description="the kind of file it turns into text")
    command: _by_shape(  # type: ignore[valid-type]
        "a preprocessor's command is a string or a list of args",
        text=Annotated[str, Field(min_length=1)],
        items=Annotated[list[str], Field(min_length=1)],
    )


@kind
class LlmJudge(Entry):
    """A model judges the answer: by rubric items, a prompt, or the test's criteria."""

    type: Literal[
        "llm-grader",
        "llm-rubric",
        "llm-judge",
        "llm_judge",
        "rubric",
        "rubrics",
        "trajectory:goal-success",
    ]
    value: RubricOrGoal | None = Field(
        default=None, description="rubric items ({goal} for trajectory:goal-success)"
    )
    rubrics: Rubric | None = None
    criteria: Rubric | None = None
    prompt: str | PromptCommand | None = Field(
        default=None, description="a template, a file (file://x.md), or {command, config}"
    )
    target: str | None = Field(default=None, description="the model target of the judge")
    provider: str | None = Field(default=None, description="AgentV's name for target")
    preprocessors: list[Preprocessor] | None = None
    config: dict[str, Any] | None = None
    threshold: Threshold = Field(
        default=0.8, description="the judge's score that passes", strict=True
    )
    transform: Annotated[Any, WithJsonSchema(_REFUSED)] = Field(
        default=None, description="refused: output transforms run code in AgentV's process"
    )


# -------------------------------------------------------------------------------------------
# Programs run in containers (graders.config), verifiers, groups.


@kind
class ProgramEntry(Entry, ProgramGrader):  # type: ignore[misc]
    """``type: program``: ``program args...``, the payload at $EVALUATE_GRADER_INPUT."""

    type: Literal["program"]  # type: ignore[assignment]


@kind
class ScriptEntry(Entry, ScriptGrader):  # type: ignore[misc]
    """A script grader: ``command`` gets the payload on stdin (AgentV: ``code-grader``)."""

    type: Literal["script", "code-grader", "code-judge", "code_judge"]  # type: ignore[assignment]
    cwd: str | None = Field(default=None, description="where command paths resolve")
    config: dict[str, Any] | None = Field(default=None, description="handed to the script")


@kind
class VerifierEntry(Entry):
    """``pytest`` / ``node-test``: test files run against the agent's workspace."""

    type: Literal["pytest", "node-test"]
    files: str | list[str] = Field(description="test files, relative to the suite")
    dest: str | None = Field(default=None, description="where in the workspace they go")
    args: list[str | int | float] = Field(default_factory=list)
    # The grader's own types: the grader it runs as is built from these, checked here once.
    timeout: Duration | None = None
    image: str | ImageBuild | None = None
    limits: Limits | None = None
    env: dict[EnvKey, str] | None = None


@kind
class AssertSetEntry(Entry):
    """``assert-set``: one weighted score over its children; passes when every child of
    nonzero weight passes, or, with ``threshold``, when the score reaches it."""

    type: Literal["assert-set"]
    # Not checked here (nor their count): each child is, once, as it compiles (graders.assertion).
    assert_: SkipValidation[list["AssertItem"]] = Field(alias="assert", min_length=1)  # noqa: UP037
    threshold: Threshold | None = Field(default=None, strict=True)
    config: dict[str, Any] | None = Field(default=None, description="given to every child")


def _v4_named(member: Any) -> Any:
    name = member.get("name", member.get("metric")) if isinstance(member, dict) else None
    if not isinstance(name, str) or not name.strip():
        # v4 skips a member without a name (its results are keyed by name): it would
        # silently grade nothing.
        raise ValueError("a composite's member needs a name (AgentV v4 skips one without)")
    return member


def _v4_not_negated(negate: Any) -> Any:
    if negate is True:
        # v4 negates a grader in its orchestrator, never a composite's member: honouring it
        # would give verdicts v4 does not, ignoring it a check the user did not write.
        raise ValueError(
            "AgentV v4 ignores negate on a composite's member; negate the composite, or move "
            "the member out"
        )
    return negate


class CompositeMember(TypedDict, total=False):
    """What v4 asks of a composite's member (which is validated as it compiles, as any
    entry is): a name, and no negate."""

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    negate: Annotated[Any, AfterValidator(_v4_not_negated)]


class _Aggregator(BaseModel):
    # v4 reads the keys of its aggregator's type and ignores the others (`target:` is none).
    model_config = ConfigDict(extra="ignore", defer_build=True)


class WeightedAverage(_Aggregator):
    """The members' weighted score, passing at 0.8 (v4 weighs a member by ``weights`` alone,
    1 when it is not named there, never by its own ``weight``)."""

    type: Literal["weighted_average"]
    weights: dict[str, Weight] | None = Field(default=None, description="a member's name: weight")


class ThresholdAggregator(_Aggregator):
    """Passes when the share of members that passed reaches ``threshold``."""

    type: Literal["threshold"]
    threshold: Threshold = Field(strict=True)


def _argv(command: Any) -> Any:
    argv = shlex.split(command) if isinstance(command, str) else command
    if not isinstance(argv, list) or not argv:
        raise ValueError("a code-grader aggregator needs path: the command that runs it")
    return argv


class CodeAggregator(_Aggregator):
    """A script grader given the members' results on its stdin: its result is the set's."""

    type: Literal["code-grader", "code_grader"]
    path: Annotated[list[str], BeforeValidator(_argv)] = Field(
        validation_alias=AliasChoices("path", "command"), description="the command that runs it"
    )


AGGREGATOR_PROMPT = """Review the following evaluation results:
{{EVALUATOR_RESULTS_JSON}}

Decide the final score and verdict based on all grader results.
Return a JSON object with: score (0.0-1.0), verdict (pass/fail), and reasoning."""
"""v4's ``DEFAULT_COMPOSITE_AGGREGATOR_PROMPT``."""


def _prompt(text: str) -> str:
    if not text.strip():
        raise ValueError("prompt is text or file://...")
    return text


class LlmAggregator(_Aggregator):
    """An LLM grader given the members' results (``{{EVALUATOR_RESULTS_JSON}}``): its verdict
    is the set's."""

    type: Literal["llm-grader", "llm_grader"]
    prompt: Annotated[str, AfterValidator(_prompt)] = Field(
        default=AGGREGATOR_PROMPT, description="text or file://..."
    )


_AGGREGATORS = {
    name: model
    for model in (WeightedAverage, ThresholdAggregator, CodeAggregator, LlmAggregator)
    for name in get_args(model.model_fields["type"].annotation)
}


def _aggregator(value: Any) -> str | None:
    kind_ = value.get("type") if isinstance(value, dict) else None
    model = _AGGREGATORS.get(kind_) if isinstance(kind_, str) else None
    return None if model is None else f"<{model.__name__}>"


Aggregator = _union(
    {f"<{m.__name__}>": m for m in _AGGREGATORS.values()},
    _aggregator,
    "a composite needs aggregator: {type: weighted_average | threshold | code-grader | llm-grader}",
)


@kind
class CompositeEntry(Entry):
    """``composite`` (AgentV v4): one verdict over named members, by its ``aggregator``."""

    type: Literal["composite"]
    # Their own kinds are not checked here: each member is, once, as it compiles.
    assertions: list[Annotated[CompositeMember, BeforeValidator(_v4_named)]] = Field(
        min_length=1,
        validation_alias=AliasChoices("assertions", "assert", "evaluators"),
        description="its members, each named (v4 reads `assert` and `evaluators` too)",
    )
    aggregator: Aggregator

    @model_validator(mode="before")
    @classmethod
    def _has_members(cls, data: Any) -> Any:
        # A composite with no members is that one error, whatever else it lacks.
        if isinstance(data, dict) and not {"assertions", "assert", "evaluators"} & set(data):
            raise ValueError("a composite needs a non-empty 'assertions' list")
        return data


class CustomEntry(Entry):
    """A custom assertion: ``.gradebox/assertions/NAME.*`` (or ``.agentv/assertions/``) above
    the suite, run in a container; its other keys are its ``config``."""

    # Its schema's `type` is any name but the kinds' and those refused by name (schemas.py).
    model_config = ConfigDict(extra="allow", defer_build=True)

    type: str = Field(min_length=1, description="the custom assertion's file name")
    image: str | None = None
    timeout: Duration | None = None  # its grader's type: checked here, once
    limits: Limits | None = None
    network: Literal["none", "bridge"] | None = None


def type_names(model: type[BaseModel]) -> tuple[str, ...]:
    return get_args(model.model_fields["type"].annotation)


_BY_TYPE = {name: model for model in KINDS for name in type_names(model)}
_TAGS = {model: f"<{model.__name__}>" for model in [*KINDS, CustomEntry]}


def known_types() -> set[str]:
    """Every ``type`` a kind's model takes (a custom assertion takes any other)."""
    return set(_BY_TYPE)


def entry_model(type_name: str) -> type[BaseModel]:
    return _BY_TYPE.get(type_name, CustomEntry)


def _tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "<rubric>"
    kind_ = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return _TAGS[entry_model(kind_)] if isinstance(kind_, str) else None


AssertItem = _union(
    {"<rubric>": str, **{_TAGS[m]: m for m in [*KINDS, CustomEntry]}},
    _tag,
    "an assertion is a rubric string or a mapping with a 'type'",
)
"""One entry of an ``assert`` list: a rubric item (a plain string) or an assertion."""


class SchemaOf:
    """``Annotated[list[Any], SchemaOf(list[AssertItem])]``: validated and kept as ``list[Any]``,
    its JSON Schema the declared type's."""

    def __init__(self, declared: Any) -> None:
        self.declared = declared  # its schema is built when one is asked for

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(TypeAdapter(self.declared).core_schema)


@functools.cache
def _adapter() -> TypeAdapter[Any]:
    return TypeAdapter(AssertItem)


def check_entry(entry: Any, *, file: str, lines: LineMap, loc: tuple[str, ...]) -> Any:
    """One entry validated by its kind's model: the record (a rubric string stays one), or the
    errors located as a ``ConfigError`` (``suite.yaml:9: tests.0.assert.1.value: ...``; the
    tags that tell the kinds apart are left out of locations, see ``_yaml``)."""
    if isinstance(entry, dict):  # a key written as 1.5 or ~ is an unknown field, no error
        entry = {str(k): v for k, v in entry.items()}
    if isinstance(entry, dict) and "script" in entry and "command" not in entry:
        entry = {**entry, "command": entry["script"]}  # AgentV's earliest spelling
        del entry["script"]
    try:
        return _adapter().validate_python(entry)
    except ValidationError as exc:
        raise to_config_error(exc, file=file, lines=lines, prefix=loc) from None
