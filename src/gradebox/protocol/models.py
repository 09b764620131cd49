"""Wire formats: what a grader reads, what it may print, and the result gradebox reports.

Every format that crosses a process boundary is a pydantic model here, and the JSON Schemas
that ``gradebox schemas`` writes are generated from these models. Keys are snake_case, as in
the reference protocols (script graders, program graders, custom assertions, inline graders).

This module holds data and pure parsing only: it never runs anything.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    field_validator,
)

from ..core.json_bounds import (
    MAX_OUTPUT_DEPTH,
    PLAIN_DECODER,
    STRICT_DECODER,
    OutputShapeError,
    clean_text,
    clean_value,
    load_untrusted_json,
    parses_as_json,
)  # re-exported: the protocol's, kept free of pydantic there

MAX_JSON_DEPTH = MAX_OUTPUT_DEPTH
"""How deeply a grader's output may nest: deeper is an error, never a crash of the run."""

__all__ = [
    "LARGE_OUTPUT_CHARS",
    "AggregatorInput",
    "Check",
    "GraderOutput",
    "GraderResult",
    "ImageRef",
    "InlinePayload",
    "InlineResult",
    "Message",
    "OutputShapeError",
    "Payload",
    "RunSummary",
    "Status",
    "StepRecord",
    "TargetTotals",
    "TestResult",
    "ToolStep",
    "Transcript",
    "TranscriptStep",
    "TrialRecord",
    "TokenUsage",
    "TraceSummary",
    "Usage",
    "clean_text",
    "clean_value",
    "json_objects_in",
    "parses_as_json",
    "load_untrusted_json",
]

LARGE_OUTPUT_CHARS = 50_000
"""A final answer longer than this is written to a file and passed as ``output_path``."""


class _Open(BaseModel):
    """Wire models keep unknown fields: graders may rely on keys newer than this release."""

    model_config = ConfigDict(extra="allow")


class Message(_Open):
    """One chat message. ``content`` is a string or a list of content blocks."""

    role: str
    content: Any = None


class TraceSummary(_Open):
    event_count: int | None = None
    tool_calls: dict[str, int] = Field(default_factory=dict)
    error_count: int | None = None
    llm_call_count: int | None = None


class TokenUsage(_Open):
    input: int | None = None
    output: int | None = None


def _as_messages(value: Any, role: str) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list):
        return [{"role": role, "content": v} if isinstance(v, str) else v for v in value]
    return value


class Payload(_Open):
    """The grader input: JSON on a script grader's stdin, and the file at EVALUATE_GRADER_INPUT.

    Example::

        Payload(input="What is 15 + 27?", output="The answer is 42.", expected_output="42")

    A string ``input`` becomes one user message and a string ``expected_output`` one assistant
    message. Unknown fields are kept and passed through to the grader unchanged.
    """

    input: list[Message] = Field(default_factory=list)
    input_files: list[str] = Field(default_factory=list)
    output: str | None = None
    expected_output: list[Message] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    criteria: str | None = None
    trace: dict[str, Any] | None = None
    trace_summary: TraceSummary | None = None
    token_usage: TokenUsage | None = None
    cost_usd: float | None = None
    duration_ms: float | None = None
    start_time: str | None = None
    end_time: str | None = None
    file_changes: str | None = None
    workspace_path: str | None = None
    output_path: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] | None = None
    # Inline graders (agent-eval-harness) read ``hint`` and a ``trajectory`` list of steps;
    # Vally program graders read ``trajectory`` as an object (output, events, metrics) and
    # ``stimulus``. A suite run fills in the object form.
    hint: str | None = None
    trajectory: list[Any] | dict[str, Any] | None = None
    stimulus: dict[str, Any] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _input_messages(cls, value: Any) -> Any:
        return _as_messages(value, "user")

    @field_validator("expected_output", mode="before")
    @classmethod
    def _expected_messages(cls, value: Any) -> Any:
        return _as_messages(value, "assistant")

    def to_wire(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False).encode()


class InlinePayload(_Open):
    """The inline-grader input (agent-eval-harness), used by ``batch``, ``trials`` and
    ``calibrate``: ``input`` stays a string or list of strings, as those graders expect.

    Example::

        InlinePayload(input="Find the CEO", output="It is Dario Amodei.", hint="Dario")
    """

    input: str | list[str] = ""
    output: str | None = ""
    hint: str | None = None
    trajectory: list[Any] | None = None
    metadata: dict[str, Any] | None = None
    expected_output: Any = None
    output_path: str | None = None

    def to_wire(self) -> bytes:
        return json.dumps(
            self.model_dump(mode="json", exclude_none=True), ensure_ascii=False
        ).encode()


class AggregatorInput(BaseModel):
    """What a composite's code-grader aggregator reads on stdin (AgentV v4's
    ``runCodeAggregator``): ``{"results": {member name: {score, verdict, assertions}}}``.

    Example::

        AggregatorInput(results={"safety": {"score": 1.0, "verdict": "pass", "assertions": []}})
    """

    results: dict[str, Any]
    # Set by the grader runner as for any payload; never sent: v4's aggregator reads results.
    workspace_path: str | None = None
    output: str | None = None
    output_path: str | None = None

    def to_wire(self) -> bytes:
        return json.dumps({"results": self.results}, ensure_ascii=False).encode()


class InlineResult(BaseModel):
    """What an inline grader prints: ``{pass, score, reasoning?}``."""

    model_config = ConfigDict(populate_by_name=True)

    pass_: bool = Field(alias="pass")
    score: float = Field(ge=0, le=1)
    reasoning: str | None = None


# --------------------------------------------------------------------------------------------
# What graders print: every known dialect, parsed by one lenient model.

# A score is a finite number: `Infinity` (or `1e999`, which parses to it) clamped to 1.0
# would be a pass that no grader meant, and NaN says nothing; both are off-schema.
Score = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class _GraderCheck(_Open):
    text: str = ""
    pass_: StrictBool | None = Field(default=None, alias="pass")
    passed: StrictBool | None = None
    score: Score | None = None
    reason: str | None = None
    evidence: str | None = None


# The schema (``gradebox schemas``) of what ``graders.verdict.read_result`` reads.
class GraderOutput(_Open):
    """Any result object a grader may print on stdout, in one of four dialects.

    - script grader: ``{pass, score, reason, checks}``
    - program grader: ``{name, passed, score, evidence, kind, details}``
    - inline grader: ``{pass, score, reasoning}``
    - custom assertion: ``{pass?, score?, assertions, details?}``
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str | None = None
    pass_: StrictBool | None = Field(default=None, alias="pass")
    passed: StrictBool | None = None
    score: Score | None = None
    reason: str | None = None
    reasoning: str | None = None
    evidence: str | None = None
    kind: str | None = None
    # A dict of anything, or (Vally) a list of sub-results, each one check.
    details: dict[str, Any] | list[Any] | None = None
    checks: list[_GraderCheck] | None = None
    assertions: list[_GraderCheck] | None = None


# Where a JSON object can start: a brace, then a key or the close. Each start that parses
# nothing costs a parse and an exception, so starts that cannot parse (a `{` in code or prose,
# a flood of braces) are never tried. With arrays, a bracket and then a scalar or a close:
# an array whose first element is itself an array or object holds that one, which is tried.
_OBJECT_START = re.compile(r'\{\s*+["}]')
_VALUE_START = re.compile(r'[\[{]\s*+[-"\dtfn\]}]')
# What a start that parses nothing costs at least, and a value found (the parse, the raise).
_FAILED_START, _FOUND = 1024, 256


def json_objects_in(
    text: str,
    *,
    arrays: bool = False,
    first: bool = False,
    unique_keys: bool = True,
    effort: int = 4,
) -> list[tuple[int, int, Any]] | None:
    """Every top-level JSON object in free text (fenced, in prose or alone), in order, as
    ``(start, end, value)``; ``arrays``: objects and arrays (an array that opens with an
    object or array may be found as that inner value); ``first``: stop at the first;
    ``unique_keys``: an object whose key repeats is none. None when finding them would cost
    more than ``effort`` times the text, or something nests past the parser's limit: a reader
    that gave up early could miss one, so it says so.

    Parsing resumes after each value found; each start tried costs what the parser read (at
    least a fixed amount), so the whole search stays linear in the text."""
    decoder = STRICT_DECODER if unique_keys else PLAIN_DECODER
    found: list[tuple[int, int, Any]] = []
    budget, end = effort * len(text) + 4096, 0
    for m in (_VALUE_START if arrays else _OBJECT_START).finditer(text):
        pos = m.start()
        if pos < end:  # inside the value found last
            continue
        if budget <= 0:
            return None
        value, stop, cost = _object_at(text, pos, decoder)
        if cost < 0:  # nested past the parser's recursion limit
            return None
        if stop is None:
            budget -= max(cost, _FAILED_START)
            continue
        budget -= max(cost, _FOUND)
        end = stop
        if isinstance(value, dict) or arrays:
            found.append((pos, stop, value))
            if first:
                break
    return found


def _object_at(
    text: str, pos: int, decoder: json.JSONDecoder = STRICT_DECODER
) -> tuple[Any, int | None, int]:
    """The JSON value at ``pos`` (value, end, characters read), or ``(None, None, read)``;
    ``(None, None, -1)`` when it nests too deep to parse.

    It is parsed from a window that grows fourfold while the window's end may be what broke
    it: a parse error's message counts the lines before it, so parsing at ``pos`` in the
    whole text would read all of it before ``pos`` for every ``{`` that starts nothing."""
    size, read = 64, 0
    while True:
        window = text[pos : pos + size]
        try:
            value, end = decoder.raw_decode(window)
        except json.JSONDecodeError as exc:
            cut = pos + size < len(text)
            if cut and (exc.pos >= len(window) - 8 or exc.msg.startswith("Unterminated")):
                read += len(window)
                size *= 4
                continue
            return None, None, read + exc.pos + 1
        except RecursionError:
            return None, None, -1
        except ValueError:  # a number too long to convert
            return None, None, read + len(window)
        return value, pos + end, read + end


# --------------------------------------------------------------------------------------------
# Our result: stable and documented.


class Status(StrEnum):
    passed = "passed"
    failed = "failed"
    error = "error"  # no verdict: timeout, crash, OOM, unparseable output, failed start


class Check(BaseModel):
    """One aspect of a grader's verdict."""

    text: str
    passed: bool
    score: float | None = None
    evidence: str | None = None


class Usage(BaseModel):
    """Model calls, tokens and cost: of one grader, one test, or the run.

    ``cached_calls`` were answered from the response cache (no tokens paid for them);
    ``cost_usd`` is known only when the targets give prices."""

    calls: int = 0
    cached_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def add(self, done: Any) -> None:
        """Count one completion (anything with text/tokens/cached/cost_usd)."""
        self.calls += 1
        if done.cached:
            self.cached_calls += 1
            return
        self.input_tokens += done.input_tokens
        self.output_tokens += done.output_tokens
        if done.cost_usd is not None:
            self.cost_usd = round((self.cost_usd or 0.0) + done.cost_usd, 8)

    def merge(self, other: Usage | None) -> None:
        if other is None:
            return
        self.calls += other.calls
        self.cached_calls += other.cached_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        if other.cost_usd is not None:
            self.cost_usd = round((self.cost_usd or 0.0) + other.cost_usd, 8)


class ImageRef(BaseModel):
    """The image a grader ran on: what the configuration named, and the immutable id used."""

    ref: str
    id: str


GraderType = Literal[
    "program",
    "script",
    "builtin",
    "assertion",
    "inline",
    "trace",
    "assert-set",
    "llm",
    "pytest",
    "node-test",
    "field-accuracy",
    "turn",
]


class GraderResult(BaseModel):
    """The normalised result of one grader run, whatever dialect the grader spoke.

    ``status`` is ``passed``/``failed`` when the grader gave a verdict and ``error`` when it
    could not (then ``passed`` is false and ``score`` 0).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    type: GraderType = "program"
    status: Status
    passed: bool
    score: float
    evidence: str = ""
    checks: list[Check] = Field(default_factory=list)
    details: dict[str, Any] | None = None
    exit_code: int | None = None
    duration_ms: int = 0
    image: ImageRef | None = None
    timed_out: bool = False
    oom_killed: bool = False
    output_truncated: bool = False
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    privileges: list[str] = Field(
        default_factory=list,
        description="hardening the run allowed this grader to relax (see `allow`)",
    )
    backend: str | None = Field(default=None, description="the sandbox backend that ran it")
    weight: float | None = Field(default=None, description="its weight in the test's score")
    negated: bool = Field(default=False, description="`negate: true`: pass and fail swapped")
    required: float | None = Field(
        default=None, description="a gate: the test fails when this scores below it"
    )
    children: list[GraderResult] = Field(
        default_factory=list, description="an assert-set's assertions, each with its result"
    )
    usage: Usage | None = Field(default=None, description="model calls it made, and tokens")
    raw_response: str | None = Field(
        default=None, description="an LLM grader's answer that could not be parsed, kept"
    )
    warnings: list[str] = Field(
        default_factory=list, description="e.g. files the agent planted that a verifier ignored"
    )
    calls: list[int] = Field(
        default_factory=list,
        description="a trace check: the tool calls its verdict names (their `position` in "
        "the test's transcript)",
    )
    # Not on the wire: why a `failed` status is no verdict the grader gave (a non-zero exit
    # that cannot be told from a crash), so `negate` turns it into an error, never a pass.
    _no_verdict: str | None = PrivateAttr(default=None)

    @classmethod
    def errored(cls, name: str, type: GraderType, evidence: str, **more: Any) -> GraderResult:
        """A grader with no verdict: an ``error`` that says why, never a pass (``more``: its
        other fields, such as the run's tails)."""
        return cls(
            name=name,
            type=type,
            status=Status.error,
            passed=False,
            score=0.0,
            evidence=evidence,
            **more,
        )

    @property
    def no_verdict(self) -> str | None:
        return self._no_verdict

    @no_verdict.setter
    def no_verdict(self, why: str | None) -> None:
        self._no_verdict = why


# --------------------------------------------------------------------------------------------
# Suite runs: one line of results.jsonl per test, and the run's summary.json.


class StepRecord(BaseModel):
    """A command that is not a grader: the target, before_each, after_each."""

    exit_code: int | None = None
    duration_ms: int = 0
    timed_out: bool = False
    stderr_tail: str | None = None
    claimed: dict[str, Any] | None = Field(
        default=None,
        description="what a cli target wrote about itself (duration_ms, token_usage, "
        "cost_usd), kept apart: checks hold what gradebox measured (duration_ms above)",
    )
    warnings: list[str] = Field(
        default_factory=list, description="a claim that contradicts the measurement"
    )


class TrialRecord(BaseModel):
    """One run of a test that runs several times (``repeat``), or one trial of a prompt
    (``gradebox trials``): its verdict, and what a reader needs to see why, each field as the
    run wrote it into its own ``TestResult`` (so capped the same way). Older runs kept only
    the verdict: the rest is empty there."""

    sample: int
    status: Status
    score: float
    error: str | None = None
    output: str | None = Field(default=None, description="its answer")
    file_changes: str | None = Field(
        default=None, description="its changes as a unified diff (capped: workspace.max_diff)"
    )
    file_changes_bytes: int = 0
    file_changes_notes: FileChangesNotes | None = Field(
        default=None, description="where its diff was cut, and the files it cannot show as is"
    )
    graders: list[GraderResult] = Field(
        default_factory=list, description="its graders' results, with their evidence"
    )
    gates_failed: list[str] = Field(default_factory=list)


class ToolStep(BaseModel):
    """One tool call of a kept transcript: what the agent called, with what, and what came
    back (as it reported them)."""

    position: int = Field(
        description="its place among the transcript's tool calls, from 0: the position a "
        "trace check's evidence names"
    )
    name: str
    args: Any = None
    output: Any = None
    error: bool = False
    duration_ms: float | None = None
    cut: bool = Field(default=False, description="its arguments or output were cut")


class TranscriptStep(BaseModel):
    """One message of a kept transcript."""

    role: str
    text: str | None = None
    tool_calls: list[ToolStep] = Field(default_factory=list)
    duration_ms: float | None = None
    token_usage: TokenUsage | None = None
    cut: bool = Field(default=False, description="its text was cut")


class Transcript(BaseModel):
    """What the agent reported it did (its messages and tool calls), as the trace checks
    read it, bounded for the report: ``cut`` says what was left out."""

    steps: list[TranscriptStep] = Field(default_factory=list)
    messages: int = Field(default=0, description="messages the agent reported")
    tool_calls: int = Field(default=0, description="tool calls the agent reported")
    cut: list[str] = Field(default_factory=list, description="what was left out, and why")


class ChangedFileNote(BaseModel):
    """A changed file ``file_changes`` cannot show as it is: its content is not diffed line
    by line (``cut``), or git's headers quote its name (``quoted``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="as the file system has it (a byte not UTF-8 as \\xNN)")
    quoted: str | None = Field(
        default=None, description="its name between the quotes of git's headers, after a/ or b/"
    )
    cut: Literal["binary", "size", "lines", "sparse"] | None = Field(
        default=None,
        description="why its content is not diffed: binary; over file_bytes (size) or "
        "file_lines (lines), shown as a one-line summary; a file with holes (sparse)",
    )
    size: int | None = Field(default=None, description="the cut side's size in bytes")


class FileChangesNotes(BaseModel):
    """What ``file_changes`` does not show whole, as the host made it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(description="bytes git wrote; past cap the diff is cut at a line")
    cap: int = Field(description="workspace.max_diff: the bytes of the diff kept")
    paths: int = Field(description="changed paths (those .gitignore ignores not counted)")
    file_bytes: int = Field(description="a larger file is not diffed line by line")
    file_lines: int = Field(description="a file of more lines is not diffed line by line")
    files: list[ChangedFileNote] = Field(default_factory=list)
    more: int = Field(default=0, description="files to note past those listed")


class TestResult(BaseModel):
    """One test of a suite run: a line of ``results.jsonl``.

    ``status`` is ``error`` when any grader errored (or the target or a hook failed),
    else ``passed`` when every assertion passed, else ``failed``. ``score`` is the weighted
    mean of the assertion scores.
    """

    __test__ = False  # not a pytest class

    id: str
    status: Status
    passed: bool
    score: float
    suite: str | None = Field(default=None, description="the suite it belongs to (its name)")
    file: str | None = Field(default=None, description="the suite file, as the run named it")
    input: list[Message] = Field(default_factory=list)
    output: str | None = None
    expected_output: list[Message] = Field(default_factory=list)
    file_changes_bytes: int = 0
    file_changes: str | None = Field(
        default=None,
        description="the agent's changes as a unified diff, as graders read it (capped like "
        "`file_changes`: workspace.max_diff)",
    )
    file_changes_notes: FileChangesNotes | None = Field(
        default=None,
        description="where file_changes was cut, and the files it cannot show as they are",
    )
    graders: list[GraderResult] = Field(default_factory=list)
    transcript: Transcript | None = Field(
        default=None,
        description="the agent's messages and tool calls, when it reported more than its "
        "answer (bounded: its `cut` says what was left out)",
    )
    target: StepRecord | None = None
    error: str | None = None
    timings_ms: dict[str, int] = Field(default_factory=dict)
    images: dict[str, str] = Field(default_factory=dict)
    repos: dict[str, str] | None = Field(
        default=None,
        description="repositories fetched into the workspace: its path -> URL@commit (a "
        "branch or tag as the run resolved it)",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    target_name: str | None = Field(
        default=None,
        description="the target it ran against, in a target matrix (AgentV's "
        "execution.targets, several providers; its id is then ID@TARGET)",
    )
    started_at: str | None = None
    finished_at: str | None = None
    fingerprint: str | None = Field(
        default=None,
        description="sha256 of the test and of everything that grades it: --resume reuses "
        "this result only while it matches",
    )
    details_dropped: bool = False
    threshold: float | None = Field(
        default=None, description="pass when the weighted score reaches it (else: all pass)"
    )
    gates_failed: list[str] = Field(
        default_factory=list, description="required assertions that scored below their gate"
    )
    usage: Usage | None = Field(default=None, description="model calls of its graders")
    node: str | None = Field(
        default=None, description="the cluster node that ran it (Ray node id and address)"
    )
    attempts: int | None = Field(
        default=None,
        description="on a cluster: times it was sent to a node (a lost node's "
        "tests are sent again)",
    )
    trials: list[TrialRecord] | None = Field(
        default=None,
        description="a test with repeat: N: every run, with its answer and graders (the "
        "result is the best one; by default it passes when any run passed)",
    )


class TargetTotals(BaseModel):
    """One target's share of a target matrix's run (``RunSummary.targets``)."""

    total: int
    passed: int
    failed: int
    errored: int
    not_run: int = 0
    pass_rate: float
    mean_score: float


class RunSummary(BaseModel):
    """``summary.json`` of a suite run."""

    suite: str
    run_id: str
    total: int
    passed: int
    failed: int
    errored: int
    not_run: int = 0
    pass_rate: float
    mean_score: float
    duration_s: float
    workers: int
    interrupted: bool = False
    reused: int = Field(default=0, description="results of unchanged tests kept by --resume")
    min_mean_score: float | None = Field(
        default=None, description="the suite's quality gate on mean_score (AgentV `threshold`)"
    )
    usage: Usage | None = Field(default=None, description="every model call of the run")
    warnings: list[str] = Field(
        default_factory=list, description="what failed without changing a verdict (after_all)"
    )
    nodes: dict[str, int] | None = Field(
        default=None, description="on a cluster: tests run by each node"
    )
    targets: dict[str, TargetTotals] | None = Field(
        default=None,
        description="a target matrix's totals, per target (every test ran once per target)",
    )
    gradebox_version: str | None = Field(default=None, description="the gradebox that ran it")
    started_at: str
    finished_at: str
