"""Grader configuration: the ``type: program`` and ``type: script`` models and their loader.

Validation happens here, at the edge, with errors that name the file, the line and the field.
Everything after this module runs on the plain, frozen ``GraderRecord`` that
``GraderConfig.to_record()`` makes (``graders.compiled`` keeps the same records).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from ..core.fstree import normalise_sub_path
from ..core.types import Duration, Threshold
from ..core.yamlfile import LineMap, load_yaml_file, validate
from ..errors import ConfigError
from ..images import ImageBuild
from ..sandbox.base import Limits, Security
from .compiled import GraderRecord

__all__ = [
    "RESERVED_ENV",
    "GraderConfig",
    "ModelAccess",
    "ProgramGrader",
    "ScriptGrader",
    "grader_from_data",
    "load_grader",
    "normalise_sub_path",
]

RESERVED_ENV = ("EVALUATE_WORKSPACE", "EVALUATE_GRADER_INPUT")


def _not_reserved(key: str) -> str:
    if key.upper() in RESERVED_ENV:
        raise ValueError(
            f"reserved name: {key.upper()} is set by gradebox for every grader and cannot be "
            "given in env (any letter case); remove this key"
        )
    if not key or "=" in key or "\0" in key:
        raise ValueError(f"{key!r} is not a valid environment variable name")
    return key


EnvKey = Annotated[str, AfterValidator(_not_reserved)]


class _GraderBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, description="shown in results; default: file name")
    image: str | ImageBuild | None = Field(
        default=None,
        description="an image name from images/ (python, shell, node), a reference pinned by "
        "digest, or {build: ./Dockerfile}; default: python",
    )
    timeout: Duration = Field(default=60.0, description="e.g. 500ms, 60s, 2m; default 60s")
    env: dict[EnvKey, str] = Field(
        default_factory=dict, description="merged into the grader's environment"
    )
    sub_path: str | None = Field(
        default=None, description="working directory, relative to the workspace root"
    )
    files: list[str] = Field(
        default_factory=list,
        description="more files or folders the grader reads (a helper package: [../src]), "
        "relative to its file; mounted read-only where its command sees them (/grader/...). "
        "Inside the project folder, never a .env, never the grader file's folder or one above",
    )
    limits: Limits = Field(default_factory=Limits)
    security: Security = Field(default_factory=Security)
    network: Literal["none", "bridge"] = Field(default="none", description="none: loopback only")
    workspace: Literal["ro", "rw"] = Field(
        default="ro", description="rw gives the grader a private copy it may change"
    )
    weight: float = Field(default=1.0, ge=0, description="weight in a suite test's score")
    dialect: Literal["program", "script", "assertion", "inline", "pytest", "node-test"] | None = (
        Field(
            default=None,
            description="how its output is judged (see the dialect table); default: its type. "
            "Custom assertions speak `assertion`, batch/trials/calibrate graders `inline`",
        )
    )

    _source_dir: Path | None = PrivateAttr(default=None)
    _declared_in: Path | None = PrivateAttr(default=None)

    @field_validator("files")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for path in value:
            text = path.replace("\\", "/")
            if not text.strip() or "\0" in text or "\n" in text or len(text) > 4096:
                raise ValueError(f"{path[:80]!r} is not a path")
            if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
                raise ValueError(f"{path!r} is absolute: name it relative to the grader's file")
        return value

    @field_validator("sub_path")
    @classmethod
    def _sub_path(cls, value: str | None) -> str | None:
        return None if value is None else normalise_sub_path(value)

    @property
    def source_dir(self) -> Path | None:
        """The directory of the file this grader was defined in (relative paths start here)."""
        return self._source_dir

    @property
    def declared_in(self) -> Path | None:
        """The directory of the file that declared this grader, when its ``cwd`` moved
        ``source_dir`` elsewhere (None: the same)."""
        return self._declared_in

    def to_record(self) -> GraderRecord:
        """The plain, frozen record every run reads (and the cache of grader files keeps)."""
        access = getattr(self, "target", None)
        own = (
            dict(program=self.program, args=list(self.args), shell=self.shell)
            if isinstance(self, ProgramGrader)
            else dict(command=self.command, pass_score=self.pass_score)
        )
        return GraderRecord(
            **{
                **dict.fromkeys(GraderRecord._fields),
                **own,
                "type": self.type,
                "name": self.name,
                "image": self.image,
                "timeout": float(self.timeout),
                "env": dict(self.env),
                "sub_path": self.sub_path,
                "files": list(self.files),
                "limits": self.limits,
                "security": self.security,
                "network": self.network,
                "workspace": self.workspace,
                "weight": float(self.weight),
                "dialect": self.dialect,
                "target": (access.name or "") if access else None,  # "": the operator's default
                "max_calls": access.max_calls if access else 0,
                "source_dir": self._source_dir,
                "declared_in": self._declared_in,
            }
        )

    def with_source(self, directory: Path | None, declared_in: Path | None = None) -> _GraderBase:
        self._source_dir = directory.resolve() if directory else None
        self._declared_in = declared_in.resolve() if declared_in else None
        return self


class ProgramGrader(_GraderBase):
    """Runs ``program args...``; the payload is at $EVALUATE_GRADER_INPUT.

    Example (grader.yaml)::

        type: program
        program: python3
        args: [graders/check_output.py]
        timeout: 60s
    """

    type: Literal["program"] = "program"
    program: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    shell: bool = Field(default=False, description="run through sh -c instead of exec")

    @model_validator(mode="before")
    @classmethod
    def _flatten_config(cls, data: Any) -> Any:
        # The reference writes program graders as {type, config: {program, args, ...}}.
        if isinstance(data, dict) and isinstance(data.get("config"), dict):
            nested = data["config"]
            if "program" in nested:
                data = {**{k: v for k, v in data.items() if k != "config"}, **nested}
        return data

    def display_name(self) -> str:
        return self.name or PurePosixPath(self.program).name

    @model_validator(mode="after")
    def _program_dialect(self) -> ProgramGrader:
        if self.dialect not in (None, "program"):
            raise ValueError("a program grader speaks the program dialect; use type: script")
        self.dialect = "program"
        return self


class ModelAccess(BaseModel):
    """``target: {max_calls: N}``: the grader may call a model through its own proxy."""

    model_config = ConfigDict(extra="forbid")

    max_calls: int = Field(default=50, ge=1, le=100_000, description="calls past this get 429")
    name: str | None = Field(
        default=None, description="the model target; default: the suite's grader target"
    )

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data


class ScriptGrader(_GraderBase):
    """Runs ``command`` with the payload as JSON on stdin (a string runs through ``sh -c``).

    Example::

        type: script
        command: [python3, validators/check_answer.py]
    """

    type: Literal["script"] = "script"
    command: list[str] | str
    target: ModelAccess | None = Field(
        default=None, description="a model proxy for this grader, reached on its loopback"
    )
    pass_score: Threshold | None = Field(
        default=None,
        description="a result with a score and no pass passes at this score (default 0.5; "
        "script graders of AgentV eval files: 0.8, AgentV's scoreToVerdict)",
    )

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: list[str] | str) -> list[str] | str:
        if not value or (isinstance(value, list) and not value[0]):
            raise ValueError("command must not be empty")
        return value

    @model_validator(mode="after")
    def _script_dialect(self) -> ScriptGrader:
        if self.dialect == "program":
            raise ValueError("a script grader cannot speak the program dialect")
        self._dialect_given = self.dialect is not None
        self.dialect = self.dialect or "script"
        return self

    _dialect_given: bool = PrivateAttr(default=False)

    @property
    def dialect_given(self) -> bool:
        """Whether the configuration named its dialect (else it is the default, ``script``)."""
        return self._dialect_given

    def display_name(self) -> str:
        if self.name:
            return self.name
        first = self.command if isinstance(self.command, str) else " ".join(self.command)
        return first[:60]


GraderConfig = ProgramGrader | ScriptGrader
_KINDS: dict[str, type[ProgramGrader] | type[ScriptGrader]] = {
    "program": ProgramGrader,
    "script": ScriptGrader,
}


def grader_from_data(
    data: Any,
    *,
    file: str,
    lines: LineMap | None = None,
    prefix: tuple[str, ...] = (),
    source_dir: Path | None = None,
    default_name: str | None = None,
) -> GraderConfig:
    """Validate one grader mapping (from a grader file or a suite's ``assert`` list)."""
    lines = lines or {}
    if not isinstance(data, dict):
        raise ConfigError(
            "a grader must be a mapping with a 'type' field",
            file=file,
            line=lines.get(prefix),
            field=".".join(prefix) or None,
        )
    kind = data.get("type")
    if kind is None and ("program" in data or "command" in data):
        kind = "program" if "program" in data else "script"
        data = {**data, "type": kind}
    if not isinstance(kind, str) or kind not in _KINDS:
        named = repr(kind[:60]) if isinstance(kind, str) else f"(a {type(kind).__name__})"
        raise ConfigError(
            f"unknown grader type {named}; expected 'program' or 'script'",
            file=file,
            line=lines.get((*prefix, "type")),
            field=".".join((*prefix, "type")),
        )
    grader = validate(_KINDS[kind], data, file=file, lines=lines, prefix=prefix)
    if grader.name is None and default_name:
        grader.name = default_name
    grader.with_source(source_dir)
    return grader


def load_grader(path: str | Path, raw: bytes | None = None) -> GraderConfig:
    """Load a grader file (YAML or JSON); ``raw``: its bytes, already read.

    Example::

        grader = load_grader("graders/check.yaml")
    """
    path = Path(path)
    data, lines = load_yaml_file(path, raw)
    return grader_from_data(
        data, file=str(path), lines=lines, source_dir=path.parent, default_name=path.stem
    )
