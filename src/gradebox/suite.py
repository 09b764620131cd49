"""Eval suites: the YAML file a user writes, validated into typed tests and assertions.

Errors name the file, the line and the field (``suite.yaml:14: tests.2.assert.0: ...``). After
``load_suite`` everything is typed: tests carry compiled assertions (built-in checks evaluated
on the host, or grader configurations run in containers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._types import Bytes, Duration, format_duration
from ._yaml import LineMap, load_yaml_file, validate
from .errors import ConfigError
from .graders.builtin import BuiltinAssertion, is_builtin
from .graders.config import EnvKey, GraderConfig, ScriptGrader, grader_from_data
from .graders.custom import CustomAssertion, discover
from .images import ImageBuild, input_hash
from .jsonl import digest
from .protocol import Message
from .sandbox.base import Limits
from .workspace import DEFAULT_DIFF_CAP, DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE, Quota

__all__ = ["Assertion", "GraderAssertion", "Suite", "Test", "load_suite"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


Command = list[str] | str


class WorkspaceConfig(_Strict):
    template: str | None = Field(default=None, description="copied fresh for each test")
    before_each: Command | None = Field(default=None, description="run in the test's workspace")
    after_each: Command | None = None
    include_ignored: bool = Field(
        default=False, description="show files matched by .gitignore in file_changes"
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


class TargetConfig(_Strict):
    """The agent under test: input on stdin, final answer on stdout, workspace writable."""

    command: Command
    image: str | ImageBuild | None = None
    timeout: Duration = 300.0
    network: Literal["none", "bridge"] = "none"
    env: dict[EnvKey, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)


class Defaults(_Strict):
    sandbox: Literal["auto", "oci", "docker", "host"] | None = Field(
        default=None, description="the backend when neither --sandbox nor $GRADEBOX_SANDBOX says"
    )
    image: str | ImageBuild | None = None
    timeout: Duration | None = None
    limits: dict[str, Any] | None = None
    workers: int | None = Field(default=None, ge=1)


class TestCase(_Strict):
    id: str = Field(min_length=1)
    input: str | list[Message] | list[str] | None = None
    expected_output: str | list[Message] | None = None
    output: str | None = Field(default=None, description="the recorded answer, without target")
    criteria: str | None = None
    hint: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    workspace: WorkspaceConfig | None = None
    assert_: list[Any] = Field(default_factory=list, alias="assert")


Privilege = Literal[
    "root", "capabilities", "network", "writable-root", "privilege-escalation", "limits"
]


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
class GraderAssertion:
    """A program/script grader or a custom assertion, run in a container."""

    grader: GraderConfig
    config: dict[str, Any] | None = None
    field: str | None = None  # where it was written, for errors found later (the plan)
    line: int | None = None

    @property
    def weight(self) -> float:
        return self.grader.weight

    def display_name(self) -> str:
        return self.grader.display_name()


Assertion = BuiltinAssertion | GraderAssertion


@dataclass
class Test:
    case: TestCase
    assertions: list[Assertion]
    workspace: WorkspaceConfig | None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.case.id


@dataclass
class Suite:
    path: Path
    spec: SuiteFile
    tests: list[Test]
    customs: dict[str, CustomAssertion]
    _tree_hashes: dict[Path, str] = field(default_factory=dict, repr=False)
    _suite_print: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def root(self) -> Path:
        return self.path.parent.resolve()

    def fingerprint(self, test: Test) -> str:
        """What a result of ``test`` depends on: the test, the suite's settings, every grader
        (configuration and the files it runs) and the workspace template's files."""
        from .graders.run import file_digest, grader_fingerprint, translate_args

        if self._suite_print is None:  # the suite's settings and target: once per run
            spec = self.spec.model_dump(mode="json", exclude={"tests", "description", "metadata"})
            target = self.spec.target
            files = []
            if target is not None and not isinstance(target.command, str):
                files = [file_digest(self.root / rel)
                         for rel in translate_args(target.command, self.root)[1]]  # fmt: skip
            self._suite_print = digest(spec, *files)
        parts: list[Any] = [self._suite_print, test.case.model_dump(mode="json", by_alias=True),
                            test.metadata]  # fmt: skip
        for a in test.assertions:
            if isinstance(a, GraderAssertion):
                parts += [grader_fingerprint(a.grader), a.config]
            else:
                parts.append(a.model_dump(mode="json"))
        template = self.template_dir(test.workspace)
        if template is not None:
            if template not in self._tree_hashes:
                self._tree_hashes[template] = input_hash(template, "")
            parts.append(self._tree_hashes[template])
        return digest(*parts)

    def template_dir(self, ws: WorkspaceConfig | None) -> Path | None:
        return (self.root / ws.template).resolve() if ws and ws.template else None


_GRADER_DEFAULT_KEYS = ("image", "timeout", "limits")


def _compile_assertion(
    entry: Any,
    *,
    file: str,
    lines: LineMap,
    loc: tuple[str, ...],
    test_id: str,
    suite_dir: Path,
    defaults: Defaults,
    customs: dict[str, CustomAssertion],
) -> Assertion:
    here = ".".join(loc)
    if isinstance(entry, str):
        raise ConfigError(
            f"test {test_id!r}: a plain string is an LLM rubric ({entry[:40]!r}), and LLM "
            "graders are not available yet; use a program, script, built-in or custom assertion",
            file=file,
            line=lines.get(loc),
            field=here,
        )
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise ConfigError(
            "an assertion must be a mapping with a 'type'",
            file=file,
            line=lines.get(loc),
            field=here,
        )
    kind = entry["type"]
    if is_builtin(kind):
        return validate(BuiltinAssertion, entry, file=file, lines=lines, prefix=loc)
    if kind in ("program", "script"):
        inherited = {
            k: _default(defaults, k)
            for k in _GRADER_DEFAULT_KEYS
            if k not in entry and _default(defaults, k) is not None
        }
        grader = grader_from_data(
            {**inherited, **entry}, file=file, lines=lines, prefix=loc, source_dir=suite_dir
        )
        return GraderAssertion(grader, field=here, line=lines.get(loc))
    custom = customs.get(kind)
    if custom is None:
        known = ", ".join(sorted(customs)) or "none found"
        raise ConfigError(
            f"unknown assertion type {kind!r} in test {test_id!r}: not a built-in, not "
            f"program/script, and no .gradebox/assertions/{kind}.* above {suite_dir} "
            f"(custom assertions found: {known})",
            file=file,
            line=lines.get((*loc, "type")),
            field=f"{here}.type",
        )
    own = {
        k: entry[k]
        for k in ("name", "weight", "timeout", "limits", "image", "network")
        if k in entry
    }
    config = {k: v for k, v in entry.items() if k not in own and k != "type"}
    data = {
        "type": "script",
        "dialect": "assertion",
        "name": custom.name,
        "command": custom.command(),
        "image": _default(defaults, "image") if custom.image() == "python" else custom.image(),
        **{
            k: _default(defaults, k)
            for k in ("timeout", "limits")
            if _default(defaults, k) is not None
        },
        **own,
    }
    data = {k: v for k, v in data.items() if v is not None}
    grader = grader_from_data(
        data, file=file, lines=lines, prefix=loc, source_dir=custom.path.parent
    )
    assert isinstance(grader, ScriptGrader)
    return GraderAssertion(grader, config=config or None, field=here, line=lines.get(loc))


def _default(defaults: Defaults, key: str) -> Any:
    value = getattr(defaults, key)
    if isinstance(value, ImageBuild):
        return value.model_dump()
    if key == "timeout" and value is not None:
        return format_duration(value)  # grader entries are validated from their YAML form
    return value


def load_suite(path: str | Path) -> Suite:
    """Load and validate a suite file, its graders and its assertions. Runs nothing.

    Example::

        suite = load_suite("evals/suite.yaml")
        print(len(suite.tests), [t.id for t in suite.tests])
    """
    path = Path(path)
    data, lines = load_yaml_file(path)
    file = str(path)
    if not isinstance(data, dict):
        raise ConfigError("a suite must be a mapping with 'tests'", file=file)
    spec = validate(SuiteFile, data, file=file, lines=lines)
    suite_dir = path.parent.resolve()
    customs = discover(suite_dir)
    tests = []
    for i, case in enumerate(spec.tests):
        assertions = [
            _compile_assertion(
                entry,
                file=file,
                lines=lines,
                loc=("tests", str(i), "assert", str(j)),
                test_id=case.id,
                suite_dir=suite_dir,
                defaults=spec.defaults,
                customs=customs,
            )
            for j, entry in enumerate(case.assert_)
        ]
        ws = case.workspace or spec.workspace
        tests.append(Test(case, assertions, ws, {**spec.metadata, **case.metadata}))
    suite = Suite(path, spec, tests, customs)
    for i, test in enumerate(tests):
        template = suite.template_dir(test.workspace)
        if template is not None and not template.is_dir():
            where = (
                ("tests", str(i), "workspace", "template")
                if test.case.workspace
                else ("workspace", "template")
            )
            raise ConfigError(
                f"template directory {template} does not exist",
                file=file,
                line=lines.get(where),
                field=".".join(where),
            )
    return suite
