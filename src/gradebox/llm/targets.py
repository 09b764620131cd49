"""Named model endpoints: ``.gradebox/targets.yaml``, and AgentV's ``.agentv/targets.yaml``,
``.agentv/config.yaml`` and ``.agentv/providers.yaml``, read only from those who may define them
(``gradebox.core.provenance``): the operator's file (``--targets FILE``, ``$GRADEBOX_TARGETS``), the
suite's folder and the folders above it, and the user's own (``~/.gradebox/``, ``~/.agentv/``).
Never a grader's folder, nor the folder ``gradebox exec`` runs from: a grader may name a target, and
only the operator and the suite's project define one.

A target names the *environment variable* that holds its key, never the key: keys are read
from the environment at call time and never written to results, logs or containers. AgentV
files that write ``api_key: ${{ VAR }}`` or ``"{{ env.VAR }}"`` are read the same way.

Example (``.gradebox/targets.yaml``)::

    default_grader: judge
    targets:
      - name: judge
        provider: openai            # OpenAI-compatible chat completions, or anthropic
        model: gpt-4.1-mini
        base_url: http://127.0.0.1:8000/v1   # or "{{ env.LLM_BASE_URL }}"
        api_key_env: OPENAI_API_KEY
        params: {temperature: 0, max_tokens: 800}
        price: {input: 0.40, output: 1.60}   # USD per million tokens
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from ..core import settings
from ..core.pathnames import is_file
from ..core.provenance import Origin, Source
from ..core.untrusted import trusted as owned
from ..core.yamlfile import LineMap, load_yaml_file, validate
from ..errors import ConfigError

__all__ = [
    "MODEL_KINDS",
    "ModelTarget",
    "Price",
    "TargetSet",
    "TargetSources",
    "agentv_config",
    "agentv_defaults",
    "agentv_entries",
    "agentv_kind",
    "agentv_label",
    "load_targets",
]

GEMINI_OPENAI_URL = "https://generativelanguage.googleapis.com/v1beta/openai/"

_REF = re.compile(r"^\s*(?:\$\{\{\s*([A-Za-z_]\w*)\s*\}\}|\{\{\s*env\.([A-Za-z_]\w*)\s*\}\})\s*$")
_ANY_REF = re.compile(r"\$\{\{\s*([A-Za-z_]\w*)\s*\}\}|\{\{\s*env\.([A-Za-z_]\w*)\s*\}\}")


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="USD per million input tokens")
    output: float = Field(ge=0, description="USD per million output tokens")


class ModelTarget(BaseModel):
    """One model endpoint a grader may call."""

    model_config = ConfigDict(extra="forbid")

    name: str
    provider: Literal["openai", "anthropic", "azure"] = Field(
        default="openai",
        description="openai: chat completions (any OpenAI-compatible base_url); anthropic: "
        "messages; azure: Azure OpenAI's Responses API (base_url is the resource endpoint, "
        "model the deployment)",
    )
    model: str
    base_url: str | None = None
    api_key_env: str | None = Field(
        default=None, description="the NAME of the environment variable holding the key"
    )
    api_version: str | None = Field(default=None, description="azure: the api-version")
    requires_env: list[str] = Field(
        default_factory=list,
        description="variables its URL or model came from that were unset when it was read",
    )
    key_optional: bool | None = Field(
        default=None,
        description="whether it may run without a key (default: when base_url is a server "
        "of your own)",
    )
    params: dict[str, Any] = Field(default_factory=dict, description="temperature, max_tokens")
    price: Price | None = None
    timeout: float = Field(default=120.0, gt=0, description="seconds per request")
    # Who defined it (set by the loader, never by a file: a private attribute is no field).
    _origin: Origin | None = PrivateAttr(default=None)
    _use_target: str | None = PrivateAttr(default=None)  # an alias whose variable is unset

    @property
    def origin(self) -> Origin | None:
        return self._origin

    def api_key(self) -> str | None:
        """Read at call time, never stored; only for a target the operator or the suite's
        project defined (one a grader's files defined never gets a key)."""
        if self._origin is not None and not self._origin.configures:
            raise ConfigError(
                f"model target {self.name!r} was defined by {self._origin}: only the operator "
                "and the suite's project define targets; a grader may only name one"
            )
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def identity(self) -> dict[str, Any]:
        """What determines an answer besides the prompt (the cache key's part)."""
        return {
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "api_version": self.api_version,
            "params": self.params,
        }

    def missing_env(self) -> list[str]:
        """The variables this target needs that are not set now (checked before a run)."""
        wanted = list(self.requires_env)
        optional = self.key_optional
        if optional is None:  # a local OpenAI-compatible server needs none
            optional = self.base_url is not None and self.provider != "azure"
        if self.api_key_env and not optional:
            wanted.append(self.api_key_env)
        return [name for name in wanted if not os.environ.get(name)]

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.price is None:
            return None
        return (input_tokens * self.price.input + output_tokens * self.price.output) / 1e6


class _TargetsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_grader: str | None = None
    targets: list[ModelTarget] = Field(default_factory=list)


@dataclass
class TargetSet:
    """Every model target visible from a suite, by name; the default grader target."""

    targets: dict[str, ModelTarget] = field(default_factory=dict)
    default: str | None = None
    sources: dict[str, str] = field(default_factory=dict)  # name -> file, for errors
    # AgentV's ``use_target``: name -> the target's name, or ``${{ VAR }}`` naming it,
    # resolved when a test uses it (an unset variable is that test's error, not the file's).
    aliases: dict[str, str] = field(default_factory=dict)

    def add(self, target: ModelTarget, origin: Origin) -> None:
        """Define ``target`` unless a nearer source did; only a source that configures may."""
        if not origin.configures:
            raise ConfigError(
                f"a {origin.source} may name a model target, never define one (only the "
                "operator and the suite's project do)",
                file=origin.file,
                field="targets",
            )
        if target.name in self.targets or target.name in self.aliases:
            return
        target._origin = origin
        self.targets[target.name] = target
        self.sources[target.name] = origin.file or ""

    def alias(self, name: str, use_target: str, origin: Origin) -> None:
        if origin.configures and name not in self.targets and name not in self.aliases:
            self.aliases[name] = use_target
            self.sources[name] = origin.file or ""

    def lookup(self, name: str) -> ModelTarget | None:
        """The target ``name`` is, following ``use_target`` (None: defined nowhere). A
        ``${{ VAR }}`` that is unset gives a target that needs VAR: ``missing_env`` names it
        before a run, and it reaches no endpoint."""
        seen = [name]
        for _ in range(10):
            if name in self.targets:
                return self.targets[name]
            if name not in self.aliases:
                return None
            raw = self.aliases[name].strip()
            var = _env_name(raw)
            value = (os.environ.get(var) or "").strip() if var else raw
            if not value:
                if var is None:
                    raise ConfigError(
                        f"target {name!r} has an empty use_target", file=self.sources.get(name)
                    )
                unset = ModelTarget(name=name, model=raw, requires_env=[var], key_optional=True)
                unset._use_target = raw
                return unset
            if value not in self.targets and value not in self.aliases:
                via = f"${{{{ {var} }}}}, which is {value!r}" if var else repr(value)
                raise ConfigError(
                    f"target {name!r} uses use_target: {via}, and no model target has that "
                    f"name (targets: {', '.join(sorted(self.targets)) or 'none found'})",
                    file=self.sources.get(name),
                )
            if value in seen:
                raise ConfigError(
                    f"use_target loops: {' -> '.join([*seen, value])}", file=self.sources.get(name)
                )
            seen.append(value)
            name = value
        raise ConfigError(f"use_target goes deeper than 10 from {seen[0]!r}")

    def get(self, name: str | None, *, file: str | None, field: str | None) -> ModelTarget:
        wanted = name or self.default
        if wanted is None:
            raise ConfigError(
                "an LLM grader needs a model target: name one with `target:`, or set "
                "default_grader in .gradebox/targets.yaml (or defaults.grader in "
                ".agentv/config.yaml)",
                file=file,
                field=field,
            )
        found = self.lookup(wanted)
        if found is None:
            known = ", ".join(sorted(self.targets)) or "none found"
            raise ConfigError(
                f"no model target named {wanted!r} (targets: {known}; they come from "
                "--targets FILE, $GRADEBOX_TARGETS, the suite's .gradebox/ or .agentv/, or "
                "~/.gradebox/)",
                file=file,
                field=field,
            )
        return found


def _env_name(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    m = _REF.match(value)
    return (m.group(1) or m.group(2)) if m else None


def _fill(value: Any) -> Any:
    """Non-secret values (base_url, model) may reference the environment too."""
    if isinstance(value, str):
        return _ANY_REF.sub(lambda m: os.environ.get(m.group(1) or m.group(2), ""), value)
    return value


# AgentV's model providers: our wire kind, the usual variable of the key, the default URL.
_AGENTV_KINDS: dict[str, tuple[str, str | None, str | None]] = {
    "openai": ("openai", "OPENAI_API_KEY", None),
    "azure": ("azure", "AZURE_OPENAI_API_KEY", None),
    "anthropic": ("anthropic", "ANTHROPIC_API_KEY", None),
    "gemini": ("openai", "GOOGLE_GENERATIVE_AI_API_KEY", GEMINI_OPENAI_URL),
    "google": ("openai", "GOOGLE_GENERATIVE_AI_API_KEY", GEMINI_OPENAI_URL),
    "openrouter": ("openai", "OPENROUTER_API_KEY", "https://openrouter.ai/api/v1"),
    "ollama": ("openai", None, "http://127.0.0.1:11434/v1"),
    "vllm": ("openai", None, None),
}
MODEL_KINDS = frozenset(_AGENTV_KINDS)
"""AgentV provider ids that are a model behind an API (the rest are agents or fixtures)."""


def agentv_kind(entry: dict[str, Any]) -> str:
    """An AgentV provider entry's backend: ``id`` (today: ``openai``, ``agentv:codex-cli``,
    ``openai:gpt-4.1``) or ``provider`` (the earlier targets files)."""
    raw = str(entry.get("provider") or entry.get("id") or "").strip()
    raw = raw.removeprefix("agentv:")
    return raw.split(":", 1)[0]


def agentv_label(entry: dict[str, Any]) -> str | None:
    for key in ("label", "name", "id"):
        if isinstance(entry.get(key), str) and entry[key].strip():
            return str(entry[key]).strip()
    return None


def agentv_config(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's settings: today's are flat on the entry, or under ``config``."""
    nested = entry.get("config") if isinstance(entry.get("config"), dict) else {}
    return {**{k: v for k, v in entry.items() if k != "config"}, **nested}


def _empty_refs(value: Any) -> list[str]:
    """The variables a value reads that are unset or empty: checked before a run, so a
    missing endpoint is one line naming the variable, not an HTTP error per test."""
    if not isinstance(value, str):
        return []
    return [
        name
        for m in _ANY_REF.finditer(value)
        if not os.environ.get(name := (m.group(1) or m.group(2)))
    ]


def _from_agentv(
    entry: dict[str, Any], file: str, lines: LineMap, loc: tuple[str, ...]
) -> ModelTarget | None:
    """An AgentV provider/target entry as a model target; None for agents (cli, codex...)."""
    config = agentv_config(entry)
    kind = agentv_kind(entry)
    if kind not in _AGENTV_KINDS:
        return None
    wire, default_key, default_url = _AGENTV_KINDS[kind]
    name = agentv_label(entry)
    key = config.get("api_key")
    env_name = _env_name(key)
    if key is not None and env_name is None:
        at = (
            (*loc, "config", "api_key")
            if "api_key" in (entry.get("config") or {})
            else (*loc, "api_key")
        )
        raise ConfigError(
            "write the key as a reference to the environment (${{ VAR }} or {{ env.VAR }}), "
            "never the key itself",
            file=file,
            line=lines.get(at),
            field=".".join(at),
        )
    spec_model = str(entry.get("id", "")).removeprefix("agentv:").partition(":")[2]
    raw_model = config.get("deployment") if kind == "azure" else None
    raw_model = raw_model or config.get("model") or spec_model
    raw_url = config.get("base_url") or config.get("endpoint") or config.get("resource")
    raw_version = config.get("version") or config.get("api_version")
    params = {k: config[k] for k in ("temperature", "max_tokens") if k in config}
    if "max_output_tokens" in config:
        params["max_tokens"] = config["max_output_tokens"]
    params = {k: v for k, v in params.items() if isinstance(v, int | float)}
    default_model = "gemini-2.5-flash" if kind in ("gemini", "google") else None
    needed = [*_empty_refs(raw_url)] + ([] if default_model else _empty_refs(raw_model))
    data = {
        "name": str(name),
        "provider": wire,
        "model": _fill(raw_model) or default_model or "default",
        "base_url": _fill(raw_url) or default_url,
        "api_key_env": env_name or default_key,
        "api_version": (_fill(raw_version) or "v1") if wire == "azure" else None,
        # AgentV always wants a key; a local server of your own (ollama, vllm, an
        # OpenAI-compatible base_url without api_key) does not.
        "key_optional": env_name is None
        and (default_key is None or (kind == "openai" and bool(raw_url))),
        "params": params,
        "requires_env": sorted(set(needed)),
    }
    return validate(ModelTarget, data, file=file, lines=lines, prefix=loc)


def _entries(data: Any) -> tuple[list[Any], str]:
    if isinstance(data, list):
        return data, ""
    if isinstance(data, dict):
        for key in ("providers", "targets"):
            if isinstance(data.get(key), list):
                return data[key], key
    return [], ""


AgentvEntry = tuple[dict[str, Any], str, LineMap, tuple[str, ...]]


def _included(value: Any, base: Path) -> tuple[Any, Path, LineMap] | None:
    """A ``file://...`` value of an AgentV config (``providers: file://providers.yaml``), read."""
    if not isinstance(value, str) or not value.strip().startswith("file://"):
        return None
    path = (base / value.strip().removeprefix("file://")).resolve()
    if not is_file(path):
        return None
    data, lines = load_yaml_file(path)
    return data, path, lines


@dataclass(frozen=True)
class TargetSources:
    """Where model targets may be read, with who wrote each (``gradebox.core.provenance``), in the
    order a name's first definition wins: the operator's files (``--targets FILE``, else
    ``$GRADEBOX_TARGETS``), the suite's folder and every folder above it, the user's own
    (``~/.gradebox/``, ``~/.agentv/``). A grader's folder is none of these: ``grade`` and
    ``exec`` have no suite, so they read only the operator's files and the user's own."""

    operator: tuple[Path, ...] = ()
    project: Path | None = None

    @classmethod
    def of(cls, where: TargetSources | Path | None) -> TargetSources:
        return where if isinstance(where, TargetSources) else cls(project=where)

    def folders(self) -> Iterator[tuple[Path, Source]]:
        home = _home()
        folders = [
            *(
                [self.project.resolve(), *self.project.resolve().parents]
                if self.project is not None
                else []
            )
        ]
        if home is not None and home not in folders:
            folders.append(home)
        for directory in folders:
            yield directory, Source.OPERATOR if directory == home else Source.PROJECT


def operator_files(flag: Path | None) -> tuple[Path, ...]:
    """The operator's targets file: the flag's, else ``$GRADEBOX_TARGETS``'s (none: ())."""
    if flag is not None:
        return (flag,)
    env = settings.current().targets or ""
    if env and not Path(env).is_absolute():
        # Relative, it would name a file of whatever folder a command runs from: exec's is
        # often a grader pack's, which would then define the operator's targets.
        raise ConfigError("must be an absolute path", field="GRADEBOX_TARGETS")
    return (Path(env),) if env else ()


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):
        return None


def _operator_file(path: Path) -> tuple[Any, LineMap, bool]:
    """An operator's targets file, read; and whether it is ours (else AgentV's): ours lives
    in a ``.gradebox/``, or reads as ours (AgentV's ``api_key``, ``endpoint``, ``use_target``,
    ``grader_target`` or providers such as ``gemini`` do not)."""
    if not path.is_file():
        raise ConfigError("targets file not found", file=str(path), field="--targets")
    data, lines = load_yaml_file(path)
    if path.parent.name == ".gradebox":
        return data, lines, True
    try:
        _TargetsFile.model_validate(data or {})
    except ValidationError:
        return data, lines, False
    return data, lines, True


def agentv_files(directory: Path) -> Iterator[tuple[Any, Path, LineMap]]:
    """The provider files of one folder's ``.agentv/``: ``targets.yaml``, ``config.yaml`` (and
    the files its ``providers:`` and ``defaults:`` name), ``providers.yaml``."""
    for name in ("targets.yaml", "config.yaml", "providers.yaml"):
        path = directory / ".agentv" / name
        if not owned(path):  # (also: not there) another local user's is not the project's
            continue
        data, lines = load_yaml_file(path)
        yield from _with_includes(data, path, lines)


def _with_includes(data: Any, path: Path, lines: LineMap) -> Iterator[tuple[Any, Path, LineMap]]:
    yield data, path, lines
    if isinstance(data, dict):
        for key in ("providers", "defaults"):
            found = _included(data.get(key), path.parent)
            if found is not None:
                yield found


def _file_entries(data: Any, path: Path, lines: LineMap) -> Iterator[AgentvEntry]:
    entries, key = _entries(data)
    for i, entry in enumerate(entries):
        if isinstance(entry, dict):
            yield entry, str(path), lines, ((key, str(i)) if key else (str(i),))


def _dir_entries(directory: Path) -> Iterator[AgentvEntry]:
    for data, path, lines in agentv_files(directory):
        yield from _file_entries(data, path, lines)


def _operator_agentv(sources: TargetSources) -> Iterator[tuple[Any, Path, LineMap]]:
    for path in sources.operator:
        data, lines, ours = _operator_file(path)
        if not ours:
            yield from _with_includes(data, path.resolve(), lines)


def agentv_entries(where: TargetSources | Path) -> Iterator[AgentvEntry]:
    """Every AgentV provider entry the sources hold (the operator's files, then the suite's
    folder up, nearest first, then the user's own), with its file, lines and key path."""
    sources = TargetSources.of(where)
    for data, path, lines in _operator_agentv(sources):
        yield from _file_entries(data, path, lines)
    for directory, _source in sources.folders():
        yield from _dir_entries(directory)


def _defaults_of(data: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    if not isinstance(data, dict):
        return found
    defaults = data.get("defaults")
    if not isinstance(defaults, dict) and ("provider" in data or "grader" in data):
        defaults = data  # a defaults.yaml file itself
    if isinstance(defaults, dict):
        for key in ("provider", "grader"):
            if isinstance(defaults.get(key), str):
                found.setdefault(key, str(_fill(defaults[key])))
    return found


def _dir_defaults(directory: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for data, _path, _lines in agentv_files(directory):
        for key, value in _defaults_of(data).items():
            found.setdefault(key, value)
    return found


def agentv_defaults(where: TargetSources | Path) -> dict[str, str]:
    """``defaults:`` (``provider``, ``grader``) of the first AgentV config that has them."""
    sources = TargetSources.of(where)
    found: dict[str, str] = {}
    for data, _path, _lines in _operator_agentv(sources):
        for key, value in _defaults_of(data).items():
            found.setdefault(key, value)
    for directory, _source in sources.folders():
        for key, value in _dir_defaults(directory).items():
            found.setdefault(key, value)
    return found


def _add_ours(found: TargetSet, data: Any, path: Path, lines: LineMap, origin: Origin) -> None:
    spec = validate(_TargetsFile, data or {}, file=str(path), lines=lines)
    for t in spec.targets:
        # base_url and model may come from the environment; the key only by name.
        t.requires_env = sorted({*_empty_refs(t.base_url), *_empty_refs(t.model)})
        t.base_url = _fill(t.base_url) or None
        t.model = _fill(t.model)
        found.add(t, origin)
    found.default = found.default or spec.default_grader


def _add_agentv(found: TargetSet, entries: Iterator[AgentvEntry], source: Source) -> None:
    for entry, path, lines, loc in entries:
        origin = Origin(source, path)
        use = entry.get("use_target")
        name = agentv_label(entry)
        if isinstance(use, str) and not (entry.get("provider") or entry.get("id")) and name:
            found.alias(name, use, origin)
            continue
        target = _from_agentv(entry, path, lines, loc)
        if target is not None:
            found.add(target, origin)
        grader = entry.get("grader_target")
        if isinstance(grader, str) and found.default is None:
            found.default = grader


def load_targets(where: TargetSources | Path | None = None) -> TargetSet:
    """Every target the sources define (a ``Path``: a suite's folder, and the user's own);
    the first definition of a name wins."""
    sources = TargetSources.of(where)
    found = TargetSet()
    for path in sources.operator:
        data, lines, ours = _operator_file(path)
        origin = Origin(Source.OPERATOR, str(path))
        if ours:
            _add_ours(found, data, path, lines, origin)
        else:
            files = list(_with_includes(data, path.resolve(), lines))
            _add_agentv(found, (e for f in files for e in _file_entries(*f)), Source.OPERATOR)
            for d, _p, _l in files:
                found.default = found.default or _defaults_of(d).get("grader")
    for directory, source in sources.folders():
        ours = directory / ".gradebox" / "targets.yaml"
        if owned(ours):
            data, lines = load_yaml_file(ours)
            _add_ours(found, data, ours, lines, Origin(source, str(ours)))
        _add_agentv(found, _dir_entries(directory), source)
        found.default = found.default or _dir_defaults(directory).get("grader")
    return found
