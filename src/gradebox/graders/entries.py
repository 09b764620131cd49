"""What an entry of an ``assert`` list may be, as written: one model per kind, told apart by
``type``. They are the contract of ``schemas/suite.schema.json`` (an editor completes and
checks ``assert`` lists with it) and gradebox suites are checked against them as they load
(``check_entry``), so the schema and the loader cannot disagree.

An entry is validated once, by its kind's model (``check_entry``), and ``graders.assertion``
compiles what runs from that record, never from the raw mapping; it does only the checks a
schema cannot (a file that exists, a model target that is known). AgentV's spellings are
mapped onto these names by ``formats.agentv`` (and ``graders.assertion``) before validation;
AgentV's own kinds (``composite``, v4's checks) and its trace checks, which take keys these
models do not, are validated by the models that run them.

Adding a kind is one model here: a subclass of ``Entry`` with ``type: Literal[...]`` naming its
types, decorated with ``@kind``. A ``type`` no model names is a custom assertion
(``.gradebox/assertions/NAME.*``), whose keys are its own.
"""

# No `from __future__ import annotations`: evaluated here, once, the annotations cost a
# fraction of what pydantic's evaluating their strings did (this module is imported by every
# command that loads a suite).
import functools
import math
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import (
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

from ..core.types import Duration
from ..core.yamlfile import LineMap, to_config_error
from ..images import ImageBuild
from ..sandbox.base import Limits
from .builtin import BuiltinAssertion, refuse_vacuous
from .config import EnvKey, ProgramGrader, ScriptGrader
from .fields import FieldAccuracy, FieldSpec
from .trace import TraceAssertion, check_trace, collect_metrics, trace_type

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


def _gate(required: Any) -> Any:
    if required is None:
        return False
    if isinstance(required, bool) or isinstance(required, int | float) and 0 <= required <= 1:
        return required
    raise ValueError("required must be true, false or a score 0..1")


class Entry(BaseModel):
    """The modifiers every assertion takes (``graders.assertion`` says what each does)."""

    # Built on first use, not at import: `gradebox run` pays for the kinds it checks only.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    name: str | None = Field(default=None, description="shown in results")
    metric: str | None = Field(default=None, description="AgentV's name for `name`")
    weight: Annotated[float, BeforeValidator(_finite)] = Field(
        default=1.0, ge=0, allow_inf_nan=False, description="its share of the test's score"
    )
    # Strict: `negate: "yes"` or `min_score: true` is a mistake, not a spelling of true or 1.
    negate: bool = Field(
        default=False, description="pass and fail swap (an error stays one)", strict=True
    )
    required: Annotated[bool | Score, BeforeValidator(_gate)] = Field(
        default=False,
        description="the test fails when this scores below its gate: true (min_score, else "
        "0.8) or the gate itself",
    )
    min_score: Score | None = Field(
        default=None, description="the gate of required: true", strict=True
    )


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


# -------------------------------------------------------------------------------------------
# Judges: LLM graders, run from the host (llm.grader).


class RubricItem(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    outcome: str | None = Field(default=None, description="what the answer must do")
    criteria: str | None = None
    text: str | None = None
    id: str | int | None = None
    weight: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    required: bool | Score = False
    min_score: Score | None = None
    score_ranges: list[dict[str, Any]] | dict[str, str] | None = Field(
        default=None, description="AgentV's analytic bands: [{score_range: [lo, hi], outcome}]"
    )


Rubric = str | list[str | RubricItem]


class PromptCommand(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    command: str | list[str] = Field(description="prints the judge's prompt")
    config: dict[str, Any] = Field(default_factory=dict)


class Preprocessor(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    type: str = Field(min_length=1, description="the kind of file it turns into text")
    command: str | list[str]


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
    value: Rubric | dict[str, Any] | None = Field(
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
    threshold: Score = Field(default=0.8, description="the judge's score that passes", strict=True)
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
    threshold: Score | None = Field(default=None, strict=True)
    config: dict[str, Any] | None = Field(default=None, description="given to every child")


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


AssertItem = Annotated[
    Union[  # noqa: UP007  (a Union of a built list: the | operator cannot spread it)
        tuple(
            [Annotated[str, Tag("<rubric>")]]
            + [Annotated[m, Tag(_TAGS[m])] for m in [*KINDS, CustomEntry]]
        )
    ],
    Discriminator(
        _tag,
        custom_error_type="assertion",
        custom_error_message="an assertion is a rubric string or a mapping with a 'type'",
    ),
]
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
