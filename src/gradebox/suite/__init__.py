"""Eval suites: the YAML file a user writes, validated into typed tests and assertions.

Errors name the file, the line and the field (``suite.yaml:14: tests.2.assert.0: ...``). After
``load_suite`` everything is typed: tests carry compiled assertions (built-in checks evaluated
on the host, or grader configurations run in containers).

The folder also holds what reads a suite before a run: ``paths`` (the files a command
line names), ``detect`` (which format a file is in), ``plan`` and ``preflight``.

May import: core, protocol, engine, images, files, sandbox, llm, graders.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from ..core.jsonl import digest
from ..core.pathnames import is_dir
from ..core.types import Bytes, Duration, Threshold
from ..core.yamlfile import LineMap, load_yaml_file, validate
from ..errors import ConfigError, collect
from ..files.repos import is_remote, local_commit
from ..files.workspace import DEFAULT_DIFF_CAP, DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE, Quota
from ..graders.assertion import (
    DEFAULT_REQUIRED,
    LLM_TYPES,
    TEST_TRANSFORM,
    Assertion,
    AssertSet,
    CompileContext,
    GraderAssertion,
    compile_assertion,
    defaults_for_graders,
    group_rubrics,
    leaves,
)
from ..graders.config import EnvKey
from ..graders.custom import CustomAssertion, discover
from ..graders.entries import AssertItem, SchemaOf
from ..graders.run import file_digest, grader_fingerprint, translate_args
from ..images import ImageBuild, input_hash
from ..llm.targets import TargetSet
from ..protocol.models import Message
from ..sandbox.base import Limits
from ..sandbox.defaults import PRIVILEGES
from .detect import detect_format

__all__ = ["Assertion", "AssertSet", "GraderAssertion", "Suite", "Test", "load_suite"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


Command = list[str] | str
Assertions = Annotated[list[Any], SchemaOf(list[AssertItem])]
"""An ``assert`` list: its schema is every kind's (``graders.entries``); each entry is checked
as it compiles, where its error can name its line (and AgentV's files keep their own keys),
and it stays as written."""


class RepoConfig(_Strict):
    """A repository placed in the workspace before the run: from a local folder only (graders
    and targets have no network, and neither does the preparation)."""

    # (The docstring and descriptions are the committed JSON Schema's.) ``source`` may also be
    # a git URL, which an AgentV eval file's workspace names: fetched on the host before any
    # sandbox starts into a cache of mirrors (``gradebox.files.repos``); graders and targets
    # still have no network.
    path: str = Field(description="where in the workspace, e.g. ./repo")
    source: str = Field(description="a local folder (a git repository or plain files)")
    ref: str | None = Field(default=None, description="check this commit or branch out")
    # Set by the run (``preflight``): the commit a URL's ref resolved to, once per run.
    _commit: str | None = PrivateAttr(default=None)
    _offline: bool = PrivateAttr(default=False)  # the run's --offline, for where it stages


class WorkspaceConfig(_Strict):
    template: str | None = Field(default=None, description="copied fresh for each test")
    repos: list[RepoConfig] = Field(default_factory=list)
    before_all: Command | None = Field(
        default=None, description="run once on the prepared template, before any test"
    )
    before_each: Command | None = Field(default=None, description="run in the test's workspace")
    after_each: Command | None = None
    after_all: Command | None = Field(
        default=None, description="run once after the last test (a failure is a warning)"
    )
    include_ignored: bool = Field(
        default=False,
        description="show the content of what the template's .gitignore ignores in "
        "file_changes (it is listed by name either way)",
    )
    max_diff: Bytes = Field(default=DEFAULT_DIFF_CAP, description="file_changes size cap")
    max_size: Bytes = Field(
        default=DEFAULT_MAX_SIZE,
        description="what the target may write: the workspace is a filesystem of this size",
    )
    max_files: int = Field(
        default=DEFAULT_MAX_FILES, ge=16, description="files and folders the workspace may hold"
    )

    def quota(self) -> Quota:
        return Quota(size=int(self.max_size), files=self.max_files)


class ReplaySource(_Strict):
    """AgentV's ``replay`` provider: a recorded answer per test instead of a live agent."""

    fixtures: str | None = Field(
        default=None, description="a replay fixtures JSONL file (agentv.replay_fixture.v1)"
    )
    transcripts: str | None = Field(default=None, description="a transcripts JSONL file")
    source_target: str = Field(description="the target whose answers were recorded")
    suite: str | None = Field(default=None, description="the suite they were recorded for")
    eval_path: str | None = None
    variant: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ReplaySource:
        if (self.fixtures is None) == (self.transcripts is None):
            raise ValueError("a replay target reads exactly one of fixtures, transcripts")
        return self


class HealthCheck(_Strict):
    command: Command
    cwd: str | None = Field(default=None, description="where its paths resolve")


HOST_PROVIDERS = ("model", "mock", "replay")
"""Targets that answer from the host, without a container (``gradebox.lifecycle.host_targets``)."""


class TargetConfig(_Strict):
    """The agent under test: input on stdin, final answer on stdout, workspace writable.

    ``provider: cli`` is AgentV's command template instead: ``{PROMPT}``, ``{PROMPT_FILE}``,
    ``{OUTPUT_FILE}``, ``{FILES}``, ``{EVAL_ID}``, ``{ATTEMPT}`` are filled in, it runs through
    ``sh -c``, and the answer is what it writes to ``{OUTPUT_FILE}``. ``provider: model`` sends
    the input to a model target from the host (the key never enters a container); ``mock``
    answers with ``response``; ``replay`` answers with a recorded transcript.
    """

    provider: Literal["stdio", "cli", "model", "mock", "replay"] = "stdio"
    command: Command | None = None
    label: str | None = Field(default=None, description="the provider's name, for messages")
    model: str | None = Field(
        default=None,
        description="model: the name of a model target (.gradebox/targets.yaml, "
        "or an AgentV provider label)",
    )
    response: str | None = Field(default=None, description="mock: the answer to every test")
    replay: ReplaySource | None = None
    program: str | None = Field(
        default=None, description="cli: a program the image must carry (a coding-agent CLI)"
    )
    answer_format: Literal["auto", "claude-json"] = Field(
        default="auto", description="cli: how {OUTPUT_FILE} is read"
    )
    healthcheck: HealthCheck | None = Field(
        default=None,
        description="cli: run once before the first test; a failure makes every test an error",
    )
    cwd: str | None = Field(default=None, description="cli: where command paths resolve")
    files_format: str = Field(default="{path}", description="cli: each entry of {FILES}")
    image: str | ImageBuild | None = None
    timeout: Duration = 300.0
    network: Literal["none", "bridge"] = "none"
    env: dict[EnvKey, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    # AgentV v4's ``provider_batching`` (a cli target): one call answers every test, JSONL
    # keyed by test id in {OUTPUT_FILE} (``lifecycle.testrun``). Set by the AgentV reader.
    _batch: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _complete(self) -> TargetConfig:
        need = {"stdio": "command", "cli": "command", "model": "model", "replay": "replay"}
        key = need.get(self.provider)
        if key is not None and getattr(self, key) is None:
            raise ValueError(f"a {self.provider} target needs {key!r}")
        return self

    @property
    def on_host(self) -> bool:
        return self.provider in HOST_PROVIDERS


class Defaults(_Strict):
    sandbox: Literal["auto", "oci", "docker", "host"] | None = Field(
        default=None, description="the backend when neither --sandbox nor $GRADEBOX_SANDBOX says"
    )
    image: str | ImageBuild | None = None
    timeout: Duration | None = None
    limits: dict[str, Any] | None = None
    workers: int | None = Field(default=None, ge=1)
    grader: str | None = Field(
        default=None, description="the model target of LLM graders that name none"
    )
    threshold: Threshold | None = Field(
        default=None,
        description="a test passes when its weighted score reaches this (default: all pass)",
    )


class Turn(_Strict):
    input: str | list[Message]
    expected_output: str | list[Message] | None = None
    assert_: Assertions = Field(default_factory=list, alias="assert")


class Conversation(_Strict):
    """Turns sent one by one, each answer kept in the history; each turn graded by its own
    assertions, the test's own assertions grade the whole transcript; the test's score is the
    ``aggregation`` of those scores and it passes at its threshold."""

    turns: list[Turn] = Field(min_length=1)
    aggregation: Literal["mean", "min", "max"] = "mean"
    on_turn_failure: Literal["continue", "stop"] = "continue"
    window_size: int | None = Field(
        default=None, ge=1, description="send only the last N exchanges (system kept)"
    )


class TestCase(_Strict):
    id: str = Field(min_length=1)
    input: str | list[Message] | list[str] | None = None
    expected_output: str | list[Message] | None = None
    output: str | None = Field(default=None, description="the recorded answer, without target")
    criteria: str | None = None
    hint: str | None = None
    input_files: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    workspace: WorkspaceConfig | None = None
    threshold: Threshold | None = None
    skip_defaults: bool = Field(default=False, description="leave out the suite's `assert`")
    reference_workspace: str | None = Field(
        default=None, description="validate-refs: a folder laid over the workspace"
    )
    reference_patch: str | None = Field(
        default=None, description="validate-refs: a patch applied to the workspace"
    )
    repeat: int = Field(
        default=1,
        ge=1,
        le=100,
        description="run the test this many times (AgentV's evaluate_options.repeat)",
    )
    repeat_strategy: Literal["pass_any", "pass_all", "mean", "confidence_interval"] = Field(
        default="pass_any",
        description="the runs' score: the best (pass_any), the lowest (pass_all), the mean, or "
        "the mean's 95% lower bound (confidence_interval); it passes at its threshold",
    )
    conversation: Conversation | None = Field(
        default=None,
        description="a multi-turn conversation with a model target, graded turn "
        "by turn (AgentV's mode: conversation)",
    )
    assert_: Assertions = Field(default_factory=list, alias="assert")


Privilege = Literal[tuple(PRIVILEGES)]  # type: ignore[valid-type]


class SuiteFile(_Strict):
    name: str = "suite"
    description: str | None = None
    allow: list[Privilege] = Field(
        default_factory=list,
        description="hardening the suite's graders and target may relax (see README)",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    defaults: Defaults = Field(default_factory=Defaults)
    workspace: WorkspaceConfig | None = None
    target: TargetConfig | None = None
    assert_: Assertions = Field(
        default_factory=list, alias="assert", description="appended to every test's"
    )
    min_mean_score: float | None = Field(
        default=None, ge=0, le=1, description="the run fails (exit 1) below this mean score"
    )
    preprocessors: list[dict[str, Any]] = Field(
        default_factory=list, description="LLM graders: [{type, command}] turn files into text"
    )
    tests: list[TestCase] = Field(min_length=1)

    @field_validator("tests")
    @classmethod
    def _unique_ids(cls, tests: list[TestCase]) -> list[TestCase]:
        seen: set[str] = set()
        for test in tests:
            if test.id in seen:
                raise ValueError(f"duplicate test id {test.id!r}")
            seen.add(test.id)
        return tests


@dataclass
class Test:
    case: TestCase
    assertions: list[Assertion]
    workspace: WorkspaceConfig | None
    metadata: dict[str, Any] = field(default_factory=dict)
    threshold: float | None = None
    turn_assertions: list[list[Assertion]] = field(default_factory=list)  # a conversation's
    semantics: Literal["gradebox", "agentv"] = "gradebox"  # how its verdict adds up
    # A target matrix (AgentV's ``execution.targets``, several ``providers``): this test runs
    # against ``target`` (in place of the suite's), its results tagged ``target_name``; its id
    # is ``ID@NAME`` and ``source_id`` the ID the target knows it by ({EVAL_ID}, a batch's).
    target: TargetConfig | None = None
    target_name: str | None = None
    source_id: str | None = None

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def target_id(self) -> str:
        """The id its target is given (``{EVAL_ID}``, a batch's JSONL ``id``)."""
        return self.source_id or self.case.id

    def every_assertion(self) -> list[Assertion]:
        """Its own assertions and its conversation turns' (each grades a part of it)."""
        return [*self.assertions, *(a for turn in self.turn_assertions for a in turn)]

    def has_reference(self) -> bool:
        """A reference answer to grade as if the agent had given it (``validate-refs``)."""
        c = self.case
        return bool(c.expected_output or c.reference_workspace or c.reference_patch)


def _transform_print(spec: str) -> list[str]:
    """An AgentV transform as a verdict depends on it: its code, or its module's contents."""
    if spec.startswith("file://"):
        ref = spec.removeprefix("file://")
        colon = ref.rfind(":")
        path = ref[:colon] if colon > 1 else ref
        return [spec, file_digest(Path(path))]
    return [spec]


@dataclass
class Suite:
    path: Path
    spec: SuiteFile
    tests: list[Test]
    customs: dict[str, CustomAssertion]
    targets: TargetSet | None = None  # model targets, when any grader calls a model
    _tree_hashes: dict[Path, str] = field(default_factory=dict, repr=False)
    _repo_prints: dict[tuple[Path, str | None], str] = field(default_factory=dict, repr=False)
    _suite_print: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def root(self) -> Path:
        return self.path.parent.resolve()

    def fingerprint(self, test: Test, portable: bool = False) -> str:
        """What a result of ``test`` depends on: the test, the suite's settings, every grader
        (configuration and the files it runs) and the workspace template's files.

        ``portable``: the same wherever a copy of the suite lies (a cluster node checks its
        copy against the driver's with it); results carry the other, which names places."""
        if self._suite_print is None:  # the suite's settings and target: once per run
            spec = self.spec.model_dump(mode="json", exclude={"tests", "description", "metadata"})
            target = self.spec.target
            files = []
            if target is not None and isinstance(target.command, list):
                files = [
                    file_digest(self.root / rel)
                    for rel in translate_args(target.command, self.root)[1]
                ]
            self._suite_print = digest(spec, *files)
        parts: list[Any] = [
            self._suite_print,
            test.case.model_dump(mode="json", by_alias=True),
            test.metadata,
            test.threshold,
            test.semantics,
        ]
        if test.target is not None:  # a matrix's: its own target, in place of the suite's
            parts += [test.target_name, test.target.model_dump(mode="json"), test.target._batch]
        elif self.spec.target is not None and self.spec.target._batch:
            parts.append("batch")
        if isinstance(test.metadata.get(TEST_TRANSFORM), str):  # the module's text, too
            parts.append(_transform_print(test.metadata[TEST_TRANSFORM]))
        for a in _all(test.every_assertion()):
            parts.append(a.scoring())
            if getattr(a, "transform", None):  # what this grader sees: its transform's text
                parts.append(_transform_print(a.transform))
            if isinstance(a, GraderAssertion):
                where = self.root if portable else None
                parts += [grader_fingerprint(a.grader, where), a.config]
            elif isinstance(a, AssertSet):
                parts.append(a.threshold)  # its program is among _all's
                if a.aggregator != "weighted":  # (the existing sets' keys unchanged)
                    parts.append(a.aggregator)
            else:
                parts.append(a.describe())
        template = self.template_dir(test.workspace)
        if template is not None:
            if template not in self._tree_hashes:
                self._tree_hashes[template] = input_hash(template, "")
            parts.append(self._tree_hashes[template])
        # A repository's branch or tag names a commit of this run's (a remote one's resolved
        # by preflight), a local copy its files now: a result of what they were before is not
        # this run's to reuse. (Not in the portable print: a node resolves the driver's
        # commit after it compares.)
        repos = [self._repo_print(r) for r in (test.workspace.repos if test.workspace else ())]
        if any(repos) and not portable:
            parts.append(repos)
        return digest(*parts)

    def _repo_print(self, repo: RepoConfig) -> str | None:
        """What a repository of a workspace is in this run: a remote one's resolved commit
        (None before preflight), a local one's commit at its ``ref``, else its files' hash."""
        if is_remote(repo.source):
            return repo._commit
        source = (self.root / repo.source).resolve()
        key = (source, repo.ref)
        if key not in self._repo_prints:
            if repo.ref is None:
                self._repo_prints[key] = input_hash(source, "") if is_dir(source) else "missing"
            else:
                self._repo_prints[key] = local_commit(source, repo.ref) or "unresolved"
        return self._repo_prints[key]

    def template_dir(self, ws: WorkspaceConfig | None) -> Path | None:
        return (self.root / ws.template).resolve() if ws and ws.template else None

    def graders(self) -> Iterator[GraderAssertion]:
        """Every assertion of every test that runs in a container."""
        for test in self.tests:
            for a in leaves(test.every_assertion()):
                if isinstance(a, GraderAssertion):
                    yield a


def _all(assertions: list[Assertion]) -> Iterator[Assertion]:
    for a in assertions:
        yield a
        if isinstance(a, AssertSet):
            yield from _all(a.children)
            if a.program is not None:
                yield a.program


# Other harnesses' formats: name -> (module, function) that maps a file of that format onto
# this model. Imported by name when a file is in that format, as sandbox backends are: a format
# builds on this module (``build_suite``), never the reverse.
READERS = {"agentv": ("gradebox.formats.agentv", "load_agentv")}


def load_suite(
    path: str | Path,
    *,
    format: str | None = None,
    targets: tuple[Path, ...] = (),
    target: str | None = None,
) -> Suite:
    """Load and validate a suite file, its graders and its assertions. Runs nothing.
    ``targets``: the operator's targets files (``--targets``), read before the project's;
    ``target``: ``--target NAME``, the target of that name in place of the suite's.

    AgentV eval files are recognised by their shape (or ``format="agentv"``) and mapped onto
    the same model, so everything after loading is shared.

    ``target`` (``run --target NAME``) is the run's target in place of the file's: for an
    AgentV file a provider of its ``targets.yaml`` (as AgentV's ``--target``), for a gradebox
    suite the model target of that name (``.gradebox/targets.yaml``).

    Example::

        suite = load_suite("evals/suite.yaml")
        print(len(suite.tests), [t.id for t in suite.tests])
    """
    path = Path(path)
    file = str(path)
    if path.suffix == ".jsonl":  # AgentV cases, with an optional YAML sidecar
        if not path.is_file():
            raise ConfigError("file not found", file=file)
        data, lines = None, {}
    else:
        data, lines = load_yaml_file(path)
    kind = format or detect_format(path, data)
    if kind in READERS:
        module, name = READERS[kind]
        read = getattr(importlib.import_module(module), name)
        extra = {"target_name": target} if target is not None else {}
        return read(path, data, lines, targets=targets, **extra)  # type: ignore[no-any-return]
    if kind not in (None, "gradebox"):
        raise ConfigError(f"unknown format {kind!r} (gradebox, agentv)", file=file)
    if not isinstance(data, dict):
        raise ConfigError("a suite must be a mapping with 'tests'", file=file)
    if target is not None:
        data = {**data, "target": {"provider": "model", "model": target, "label": target}}
    spec = validate(SuiteFile, data, file=file, lines=lines)
    return build_suite(path, spec, lines, operator_targets=targets)


def build_suite(
    path: Path,
    spec: SuiteFile,
    lines: LineMap,
    *,
    flavor: str = "gradebox",
    origins: list[tuple[str, LineMap, tuple[str, ...]]] | None = None,
    top: tuple[str, LineMap] | None = None,
    search_roots: tuple[Path, ...] = (),
    operator_targets: tuple[Path, ...] = (),
) -> Suite:
    """Compile a validated suite's assertions and check its templates. For a file mapped from
    another format, ``origins`` says where each test was written (file, lines, key path) and
    ``top`` where the suite-level assertions were."""
    suite_dir = path.parent.resolve()
    customs = discover(suite_dir)
    d = spec.defaults
    top_file, top_lines = top or (str(path), lines)

    targets: list[TargetSet] = []  # loaded once, on first use

    def context(file: str, file_lines: LineMap) -> CompileContext:
        c = CompileContext(
            file=file,
            lines=file_lines,
            suite_dir=suite_dir,
            customs=customs,
            defaults=defaults_for_graders(d.image, d.timeout, d.limits),
            flavor="agentv" if flavor == "agentv" else "gradebox",
            preprocessors=list(spec.preprocessors),
            search_roots=search_roots,
            operator_targets=operator_targets,
        )
        if targets:
            c._targets = targets[0]
        return c

    ctx = context(top_file, top_lines)
    if spec.workspace is not None and spec.workspace.template:
        ctx.template = (suite_dir / spec.workspace.template).resolve()
    loaded = ctx.targets if _needs_models(spec) else None
    if loaded is not None:
        if d.grader:
            loaded.default = d.grader
        targets.append(loaded)
        ctx._targets = loaded
    errors: list[ConfigError] = []  # all of them, so `validate` lists every one

    def compiled(entries: list[Any], c: CompileContext, *loc: str) -> list[Assertion]:
        """``entries`` compiled (rubrics grouped), each located at ``(*loc, index)``; what does
        not compile is kept in ``errors``."""
        out = []
        for j, entry in group_rubrics(entries):
            try:
                out.append(compile_assertion(entry, c, (*loc, str(j))))
            except ConfigError as exc:
                errors.append(exc)
        return out

    agentv = flavor == "agentv"
    shared_key = _assert_key(top_lines, ())
    shared_by_gate: dict[float, list[Assertion]] = {}

    def gate_of(threshold: float | None) -> float:
        # AgentV gates `required: true` at the test's threshold; ours at 0.8.
        return threshold if agentv and threshold is not None else DEFAULT_REQUIRED

    def shared(gate: float) -> list[Assertion]:
        if gate not in shared_by_gate:  # compiled once per gate, shared by its tests
            sctx = replace(ctx, required_default=gate)
            shared_by_gate[gate] = compiled(spec.assert_, sctx, shared_key)
        return shared_by_gate[gate]

    def origin(i: int) -> tuple[str, LineMap, tuple[str, ...]]:
        return origins[i] if origins else (str(path), lines, ("tests", str(i)))

    shared(gate_of(d.threshold))  # its errors are reported even when no test inherits it
    tests = []
    for i, case in enumerate(spec.tests):
        file, file_lines, where = origin(i)
        tctx = ctx if (file, file_lines) == (top_file, top_lines) else context(file, file_lines)
        ws_cfg = case.workspace or spec.workspace
        if ws_cfg is not None and ws_cfg.template:
            tctx = replace(tctx, template=(suite_dir / ws_cfg.template).resolve())
        threshold = case.threshold if case.threshold is not None else d.threshold
        tctx = replace(tctx, required_default=gate_of(threshold))
        assertions = compiled(case.assert_, tctx, *where, _assert_key(file_lines, where))
        if not case.skip_defaults:
            assertions += shared(gate_of(threshold))
        turns = [
            compiled(turn.assert_, tctx, *where, "turns", str(t), "assert")
            for t, turn in enumerate(case.conversation.turns if case.conversation else [])
        ]
        tests.append(
            Test(
                case,
                assertions,
                ws_cfg,
                {**spec.metadata, **case.metadata},
                threshold,
                turns,
                "agentv" if agentv else "gradebox",
            )
        )
    suite = Suite(path, spec, tests, customs, targets[0] if targets else None)
    for i, test in enumerate(tests):
        template = suite.template_dir(test.workspace)
        if template is not None and not is_dir(template):
            file, file_lines, where = origin(i)
            at: tuple[str, ...] = (*where, "workspace", "template")
            if not test.case.workspace:  # the suite's
                file, file_lines, at = top_file, top_lines, ("workspace", "template")
            errors.append(
                ConfigError(
                    f"template directory {template} does not exist",
                    file=file,
                    line=file_lines.get(at),
                    field=".".join(at),
                )
            )
    unique = {str(e): e for e in errors}  # one shared template is one error, not one per test
    collect(list(unique.values()))
    return suite


_LLM_AGGREGATORS = ("llm-grader", "llm_grader")


def _needs_models(spec: SuiteFile) -> bool:
    """Any LLM grader, plain-string rubric or script grader with a model proxy: the model
    targets are then loaded (from .gradebox/ and .agentv/ above the suite)."""

    def wants(entry: Any) -> bool:
        if isinstance(entry, str):
            return True
        if isinstance(entry, dict):
            if str(entry.get("type", "")) in LLM_TYPES or "target" in entry:
                return True
            aggregator = entry.get("aggregator")  # AgentV v4's composite: an LLM aggregator
            if isinstance(aggregator, dict) and aggregator.get("type") in _LLM_AGGREGATORS:
                return True
            members = (entry.get(k) for k in ("assert", "assertions", "evaluators"))
            return any(wants(c) for m in members if isinstance(m, list) for c in m)
        return False

    if spec.target is not None and spec.target.provider == "model":
        return True
    turns = (
        e for t in spec.tests if t.conversation for u in t.conversation.turns for e in u.assert_
    )
    return (
        any(wants(e) for e in spec.assert_)
        or any(wants(e) for t in spec.tests for e in t.assert_)
        or any(wants(e) for e in turns)
    )


def _assert_key(lines: LineMap, where: tuple[str, ...]) -> str:
    """``assert``, or the earlier ``assertions``, as the user wrote it (for error locations)."""
    if (*where, "assertions") in lines and (*where, "assert") not in lines:
        return "assertions"
    return "assert"
