"""Named model endpoints: ``.gradebox/targets.yaml``, and AgentV's ``.agentv/targets.yaml``,
``.agentv/config.yaml`` and ``.agentv/providers.yaml``, found walking up from the suite.

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

from pydantic import BaseModel, ConfigDict, Field

from .._pathnames import is_file
from .._yaml import LineMap, load_yaml_file, validate
from ..errors import ConfigError

__all__ = [
    "MODEL_KINDS",
    "ModelTarget",
    "Price",
    "TargetSet",
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

    def api_key(self) -> str | None:
        """Read at call time, never stored."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def identity(self) -> dict[str, Any]:
        """What determines an answer besides the prompt (the cache key's part)."""
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url,
                "api_version": self.api_version, "params": self.params}  # fmt: skip

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

    def get(self, name: str | None, *, file: str | None, field: str | None) -> ModelTarget:
        wanted = name or self.default
        if wanted is None:
            raise ConfigError(
                "an LLM grader needs a model target: name one with `target:`, or set "
                "default_grader in .gradebox/targets.yaml (or defaults.grader in "
                ".agentv/config.yaml)",
                file=file, field=field,
            )  # fmt: skip
        if wanted not in self.targets:
            known = ", ".join(sorted(self.targets)) or "none found"
            raise ConfigError(
                f"no model target named {wanted!r} (targets: {known})", file=file, field=field
            )
        return self.targets[wanted]


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
    return [name for m in _ANY_REF.finditer(value)
            if not os.environ.get(name := (m.group(1) or m.group(2)))]  # fmt: skip


def _from_agentv(entry: dict[str, Any], file: str, lines: LineMap,
                 loc: tuple[str, ...]) -> ModelTarget | None:  # fmt: skip
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
        at = (*loc, "config", "api_key") if "api_key" in (entry.get("config") or {}) else (
            *loc, "api_key")  # fmt: skip
        raise ConfigError(
            "write the key as a reference to the environment (${{ VAR }} or {{ env.VAR }}), "
            "never the key itself",
            file=file, line=lines.get(at), field=".".join(at),
        )  # fmt: skip
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
        and (default_key is None or (kind == "openai" and bool(raw_url))),  # fmt: skip
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


def agentv_files(directory: Path) -> Iterator[tuple[Any, Path, LineMap]]:
    """The provider files of one folder's ``.agentv/``: ``targets.yaml``, ``config.yaml`` (and
    the files its ``providers:`` and ``defaults:`` name), ``providers.yaml``."""
    for name in ("targets.yaml", "config.yaml", "providers.yaml"):
        path = directory / ".agentv" / name
        if not path.is_file():
            continue
        data, lines = load_yaml_file(path)
        yield data, path, lines
        if isinstance(data, dict):
            for key in ("providers", "defaults"):
                found = _included(data.get(key), path.parent)
                if found is not None:
                    yield found


def _dir_entries(directory: Path) -> Iterator[AgentvEntry]:
    for data, path, lines in agentv_files(directory):
        entries, key = _entries(data)
        for i, entry in enumerate(entries):
            if isinstance(entry, dict):
                yield entry, str(path), lines, ((key, str(i)) if key else (str(i),))


def agentv_entries(start: Path) -> Iterator[AgentvEntry]:
    """Every AgentV provider entry from ``start`` up (nearest folder first), with its file,
    lines and key path."""
    for directory in (start.resolve(), *start.resolve().parents):
        yield from _dir_entries(directory)


def _dir_defaults(directory: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for data, _path, _lines in agentv_files(directory):
        if not isinstance(data, dict):
            continue
        defaults = data.get("defaults")
        if not isinstance(defaults, dict) and ("provider" in data or "grader" in data):
            defaults = data  # a defaults.yaml file itself
        if isinstance(defaults, dict):
            for key in ("provider", "grader"):
                if isinstance(defaults.get(key), str):
                    found.setdefault(key, str(_fill(defaults[key])))
    return found


def agentv_defaults(start: Path) -> dict[str, str]:
    """``defaults:`` (``provider``, ``grader``) of the nearest AgentV config that has them."""
    found: dict[str, str] = {}
    for directory in (start.resolve(), *start.resolve().parents):
        for key, value in _dir_defaults(directory).items():
            found.setdefault(key, value)
    return found


def load_targets(start: Path) -> TargetSet:
    """Every target from ``start`` up; the nearest definition of a name wins."""
    found = TargetSet()
    for directory in (start.resolve(), *start.resolve().parents):
        ours = directory / ".gradebox" / "targets.yaml"
        if ours.is_file():
            data, lines = load_yaml_file(ours)
            spec = validate(_TargetsFile, data or {}, file=str(ours), lines=lines)
            for t in spec.targets:
                # base_url and model may come from the environment; the key only by name.
                t.requires_env = sorted({*_empty_refs(t.base_url), *_empty_refs(t.model)})
                t.base_url = _fill(t.base_url) or None
                t.model = _fill(t.model)
                found.targets.setdefault(t.name, t)
                found.sources.setdefault(t.name, str(ours))
            found.default = found.default or spec.default_grader
        for entry, path, lines, loc in _dir_entries(directory):
            target = _from_agentv(entry, path, lines, loc)
            if target is not None:
                found.targets.setdefault(target.name, target)
                found.sources.setdefault(target.name, path)
            grader = entry.get("grader_target")
            if isinstance(grader, str) and found.default is None:
                found.default = grader
        found.default = found.default or _dir_defaults(directory).get("grader")
    return found
