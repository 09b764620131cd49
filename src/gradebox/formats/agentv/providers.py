"""Which agent an AgentV eval file tests: its provider (``providers: [LABEL]``, an inline
entry, ``target:``, ``execution.target``, or ``defaults.provider``), found in the file or in
the ``.agentv/`` files above it, as our target.

- ``cli``: a command template run in the sandbox (``steps.run_cli_target``);
- a model (``openai``, ``azure``, ``anthropic``, ``gemini``, ``openrouter``, ``ollama``,
  ``vllm``): called from the host through the run's model hub (``host_targets``); a label
  found nowhere is taken as a model target's name and checked before the run, as AgentV checks
  it when it runs;
- ``mock`` (a canned answer) and ``replay`` (a recorded transcript): answered on the host;
- coding-agent CLIs (``claude-cli``, ``codex-cli``, ``copilot-cli``, ``pi-cli``): their
  program as a ``cli`` target, which needs an image that carries it (``plan`` says so);
- SDK providers that run inside AgentV's own process: refused by name.

The same mapping gives an LLM grader whose judge is a command provider its command
(``command_judge``, registered with ``graders.assertion``).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...core.untrusted import trusted
from ...graders.assertion import infer_image, register_command_judges
from ...graders.custom import NOT_OURS
from ...llm.targets import (
    MODEL_KINDS,
    TargetSources,
    agentv_config,
    agentv_defaults,
    agentv_entries,
    agentv_kind,
    agentv_label,
)
from ...suite import TargetConfig
from ._base import Where, dotenv, interpolate_env, resolve_path

__all__ = [
    "CHOSEN_TARGET",
    "CODING_AGENTS",
    "MatrixTarget",
    "command_judge",
    "resolve_targets",
]

log = logging.getLogger("gradebox.agentv")

CHOSEN_TARGET: ContextVar[str | None] = ContextVar("agentv_chosen_target", default=None)
"""The target the user picked (``--target``), see ``agentv.chosen_target``."""

_USE_ENV = re.compile(r"\$\{\{\s*([A-Za-z_]\w*)\s*\}\}")

DEFAULT_MOCK_RESPONSE = (
    '{"answer":"Mock provider response. Configure targets.yaml to supply a custom value."}'
)


@dataclass(frozen=True)
class CodingAgent:
    program: str
    template: str  # {argv} is the program (and its own args), {model} the model flag
    model_flag: str = "--model"
    answer_format: str = "auto"


# How each coding agent is asked for one answer, non-interactively, its answer in
# {OUTPUT_FILE}. These need their program (and its credentials) on the target's image.
CODING_AGENTS = {
    "claude-cli": CodingAgent(
        "claude", "{argv} -p --output-format json --dangerously-skip-permissions{model} "
        "{PROMPT} > {OUTPUT_FILE}", answer_format="claude-json",
    ),
    "codex-cli": CodingAgent(
        "codex", "{argv} exec --skip-git-repo-check --full-auto{model} "
        "--output-last-message {OUTPUT_FILE} {PROMPT}", model_flag="-m",
    ),
    "copilot-cli": CodingAgent(
        "copilot", "{argv} -s --allow-all-tools --no-color{model} -p {PROMPT} > {OUTPUT_FILE}"
    ),
    "pi-cli": CodingAgent("pi", "{argv} -p{model} {PROMPT} > {OUTPUT_FILE}"),
}  # fmt: skip
CODING_AGENTS["claude"] = CODING_AGENTS["claude-cli"]
CODING_AGENTS["codex"] = CODING_AGENTS["codex-cli"]

IN_PROCESS = {
    "claude-sdk", "copilot-sdk", "codex-sdk", "codex-app-server", "pi-coding-agent", "pi-sdk",
    "pi-rpc", "vscode", "vscode-insiders", "agentv", "function", "sdk-child", "package", "file",
}  # fmt: skip


# v4's log readers: an agent's past session, read from the user's home folder.
LOG_READERS = {"copilot-log", "claude-log", "codex-log"}


@dataclass
class Found:
    entry: dict[str, Any]
    where: Where
    loc: tuple[str, ...]


def _inline(value: Any, where: Where, loc: tuple[str, ...]) -> Found | str | None:
    """A provider entry written in the eval file, or the label it names."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, dict):
        if "id" in value or "provider" in value or "label" in value:
            return Found(value, where, loc)
        # promptfoo's map form: {"openai:gpt-4.1": {label, config}}
        if len(value) == 1:
            key, options = next(iter(value.items()))
            options = options if isinstance(options, dict) else {}
            return Found({"id": key, **options}, where, (*loc, str(key)))
    raise where.error(loc, "a provider is a label or an entry with an id")


def _catalog(label: str, sources: TargetSources, env: dict[str, str]) -> Found | str | None:
    """The provider of that label in the operator's files and the ``.agentv/`` files from the
    suite up, following ``use_target`` (AgentV v4); a label (a model target's name, checked
    before the run) when its ``use_target`` variable is unset: that is an error only if a
    test uses it, and then it names the variable."""
    entries = list(agentv_entries(sources))
    seen = [label]
    for _ in range(10):
        entry = next((e for e in entries if agentv_label(e[0]) == label), None)
        if entry is None:
            return None
        raw, file, lines, loc = entry
        use = raw.get("use_target")
        if not isinstance(use, str) or raw.get("provider") or raw.get("id"):
            return Found(interpolate_env(raw, env), Where(Path(file), lines), loc)
        m = _USE_ENV.fullmatch(use.strip())
        name = (env.get(m.group(1)) or "").strip() if m else use.strip()
        if not name or name in seen:
            return seen[0]  # TargetSet.lookup names the variable (or the loop) before a run
        seen.append(name)
        label = name
    return seen[0]


@dataclass(frozen=True)
class MatrixTarget:
    """One target of the file's run: its name (a matrix's tag on each result), the target in
    our form (None: the tests carry their answers) and its own workspace hooks (v4's
    ``execution.targets[].hooks``), as written."""

    name: str | None
    target: dict[str, Any] | None
    hooks: dict[str, Any] | None = None
    loc: tuple[str, ...] = ()
    batch: bool = False  # v4's provider_batching: one call answers every test (JSONL by id)


def resolve_targets(
    data: dict[str, Any],
    where: Where,
    base: Path,
    env: dict[str, str],
    roots: list[Path],
    sources: TargetSources | None = None,
) -> list[MatrixTarget]:
    """Every target the file runs against: one (the file's, or ``--target``'s), or a matrix
    (v4's ``execution.targets``, 5.x's several ``providers``) that AgentV runs every test
    against, once per target, each result tagged ``ID@NAME``."""
    sources = sources or TargetSources(project=base)
    picks = _picks(data, where, sources)
    names = [p[0] for p in picks]
    for i, name in enumerate(names):
        if name is not None and names.index(name) != i:
            raise where.error(picks[i][3], f"target {name!r} is listed twice")
    out = []
    for name, (found, label), hooks, loc in picks:
        target, batch = _resolve(found, label, base, env, roots, sources, data)
        out.append(MatrixTarget(name, target, hooks, loc, batch))
    return out


def _resolve(
    found: Found | None,
    label: str | None,
    base: Path,
    env: dict[str, str],
    roots: list[Path],
    sources: TargetSources,
    data: dict[str, Any],
) -> tuple[dict[str, Any] | None, bool]:
    """The target, and whether it batches (``provider_batching``)."""
    if found is None and label is None:
        return None, False
    if found is None and label is not None:
        catalog = _catalog(label, sources, env)
        if not isinstance(catalog, Found):
            # AgentV checks a label when it runs; so do we (as a model target's name).
            label = catalog or label
            return {"provider": "model", "model": label, "label": label}, False
        found = catalog
    assert found is not None
    target = _target(found, base, env, roots, data.get("timeout_seconds"), data.get("env"))
    config = agentv_config(found.entry)
    # AgentV batches only a cli provider (its supportsBatch); any other is asked per test.
    batch = agentv_kind(found.entry) == "cli" and (
        config.get("provider_batching") is True or config.get("providerBatching") is True
    )
    return target, batch


_Pick = tuple[str | None, tuple["Found | None", str | None], dict[str, Any] | None, tuple[str, ...]]


def _picks(data: dict[str, Any], where: Where, sources: TargetSources) -> list[_Pick]:
    """The provider(s) written in the file, or the label(s) they (or a default) name, each
    with its matrix name; ``--target`` (``CHOSEN_TARGET``) in place of the file's providers
    and target, as AgentV's does (and it picks one of ``execution.targets``)."""
    execution = data.get("execution") if isinstance(data.get("execution"), dict) else {}
    chosen = CHOSEN_TARGET.get()
    if isinstance(execution.get("targets"), list):
        return _matrix(execution["targets"], chosen, where)
    if chosen:
        return [(None, (None, chosen), None, ())]
    providers = data.get("providers")
    if isinstance(providers, str | dict):
        providers = [providers]
    if isinstance(providers, list) and providers:
        picks: list[_Pick] = []
        for i, entry in enumerate(providers):
            loc = ("providers", str(i))
            picked = _inline(entry, where, loc)
            if isinstance(picked, Found):
                name = agentv_label(picked.entry) or agentv_kind(picked.entry) or f"provider-{i}"
                picks.append((name, (picked, None), None, loc))
            else:
                picks.append((picked, (None, picked), None, loc))
        if len(picks) == 1:
            return [(None, picks[0][1], None, picks[0][3])]
        return picks  # 5.x: every test once per provider, tagged with its label
    for value in (data.get("target"), execution.get("target")):
        if isinstance(value, str) and value.strip():
            return [(None, (None, value.strip()), None, ())]
    return [(None, (None, agentv_defaults(sources).get("provider")), None, ())]


def _matrix(targets: list[Any], chosen: str | None, where: Where) -> list[_Pick]:
    """v4's ``execution.targets``: AgentV runs every test once per target (an inline entry,
    ``{name, use_target, hooks}``, stands for itself; ``use_target`` names the provider), or
    the one ``--target`` picks; one listed is the file's target."""
    loc = ("execution", "targets")
    names = []
    for i, item in enumerate(targets):
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name.strip():
            raise where.error((*loc, str(i)), "a target is a name or {name, use_target?, hooks?}")
        names.append(name.strip())
    if not names:
        raise where.error(loc, "execution.targets lists no target")
    if chosen is not None and chosen not in names:
        raise where.error(
            loc, f"--target {chosen!r} is not one of execution.targets: {', '.join(names)}"
        )
    picks: list[_Pick] = []
    for i, (name, item) in enumerate(zip(names, targets, strict=True)):
        if chosen is not None and name != chosen:
            continue
        redirect = item.get("use_target") if isinstance(item, dict) else None
        label = redirect.strip() if isinstance(redirect, str) and redirect.strip() else name
        hooks = item.get("hooks") if isinstance(item, dict) else None
        if hooks is not None and not isinstance(hooks, dict):
            raise where.error((*loc, str(i), "hooks"), "hooks must be a mapping")
        picks.append((name, (None, label), hooks or None, (*loc, str(i))))
    if len(picks) == 1:
        name, pick, hooks, at = picks[0]
        return [(None, pick, hooks, at)]  # one target: untagged, as AgentV's single mode
    return picks


def _target(
    found: Found,
    base: Path,
    env: dict[str, str],
    roots: list[Path],
    timeout: Any,
    suite_env: Any,
) -> dict[str, Any]:
    entry, where, loc = found.entry, found.where, found.loc
    config = agentv_config(entry)
    kind = agentv_kind(entry)
    label = agentv_label(entry) or kind
    at = (*loc, "provider" if "provider" in entry else "id")
    if kind in MODEL_KINDS:
        return {"provider": "model", "model": label, "label": label}
    if kind == "mock":
        response = config.get("response")
        return {
            "provider": "mock",
            "label": label,
            "response": response if isinstance(response, str) else DEFAULT_MOCK_RESPONSE,
        }
    if kind == "replay":
        return _replay(config, where, loc, label, roots, found)
    if kind in IN_PROCESS:
        raise where.refuse(
            at,
            f"the {kind} provider",
            "it runs inside AgentV's own process (an SDK); use its CLI provider "
            "(claude-cli, codex-cli, copilot-cli, pi-cli) or a cli command",
        )
    if kind in LOG_READERS:
        raise where.refuse(
            at,
            f"the {kind} provider",
            "it answers with a session log it reads from this machine's home folder, where "
            "no agent ran under gradebox; record the session as a replay provider's "
            "transcripts file (agentv import) or run the agent as a target",
        )
    if kind in CODING_AGENTS:
        fields = _coding_agent(CODING_AGENTS[kind], config, where, loc)
    else:
        if kind != "cli":  # v4's provider discovered by its name: a cli command
            discovered = _discovered(kind, config, base)
            if discovered is None:
                raise where.error(
                    at,
                    f"unknown provider {kind!r} (cli, a model provider, mock, replay, or a "
                    "coding-agent CLI)",
                )
            config = {**config, "command": discovered}
        fields = _cli(config, where, loc, base, suite_env)
    # Every command target: the provider's healthcheck and timeout.
    healthcheck = _healthcheck(config, where, loc, base)
    target = {"provider": "cli", "label": label, **fields, "healthcheck": healthcheck}
    t = config.get("timeout_seconds", timeout)
    if isinstance(t, int | float) and not isinstance(t, bool):
        target["timeout"] = f"{float(t)}s"
    return target


def _discovered(kind: str, config: dict[str, Any], base: Path) -> str | None:
    """v4's convention-based provider (``resolveDiscoveredProviderConfig`` in
    ``providers/targets.ts``): an unknown kind is a cli command, its own ``command`` or
    ``bun run .agentv/providers/<kind>.ts {PROMPT}`` when that script exists above the file.

    Only a script that is the project's (``untrusted.trusted``) is run: the walk passes
    shared folders, and one that another local user left in ``/tmp/.agentv/providers/`` is
    skipped with a warning naming it. The command names the very file checked, relative to
    the folder it runs from (the eval file's): one found further up is ``../.agentv/...``,
    never a nearer one of the same name."""
    command = config.get("command")
    if isinstance(command, str | list) and command:
        return command if isinstance(command, str) else " ".join(str(c) for c in command)
    for folder in (base, *base.parents):
        for ext in (".ts", ".js", ".mts", ".mjs"):
            script = folder / ".agentv" / "providers" / f"{kind}{ext}"
            if not script.is_file():
                continue
            if not trusted(script):
                log.warning("%s: skipped: %s", script, NOT_OURS)
                continue
            return f"bun run {shlex.quote(os.path.relpath(script, base))} {{PROMPT}}"
    return None


def _healthcheck(
    config: dict[str, Any], where: Where, loc: tuple[str, ...], base: Path
) -> dict[str, Any] | None:
    check = config.get("healthcheck")
    if check is None:
        return None
    if isinstance(check, dict) and check.get("url"):
        raise where.refuse(
            (*loc, "healthcheck", "url"),
            "an HTTP healthcheck",
            "the target has no network, so a URL says nothing about it; use a command "
            "healthcheck (healthcheck: {command: ...})",
        )
    command = check.get("command") if isinstance(check, dict) else check
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    if not isinstance(command, str) or not command.strip():
        raise where.error((*loc, "healthcheck"), "a healthcheck needs a command (or a url)")
    cwd = check.get("cwd") if isinstance(check, dict) else None
    return {
        "command": command,
        "cwd": str((base / cwd).resolve()) if isinstance(cwd, str) else None,
    }


def _cli(
    config: dict[str, Any], where: Where, loc: tuple[str, ...], base: Path, suite_env: Any
) -> dict[str, Any]:
    """A ``cli`` provider's own fields of its target."""
    command = next(
        (config[k] for k in ("command", "command_template", "commandTemplate") if k in config),
        None,
    )
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    if not isinstance(command, str) or not command.strip():
        raise where.error((*loc, "command"), "a cli provider needs a command template")
    cwd = config.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise where.error((*loc, "cwd"), "cwd is a path")
    return {
        "command": command,
        # AgentV resolves a provider's cwd from the eval file's folder (its default).
        "cwd": str((base / cwd).resolve()) if isinstance(cwd, str) else None,
        "files_format": config.get("files_format", "{path}"),
        "env": {k: str(v) for k, v in (suite_env or {}).items()},
        **({"image": "node"} if infer_image(command) == "node" else {}),
    }


def _coding_agent(
    agent: CodingAgent, config: dict[str, Any], where: Where, loc: tuple[str, ...]
) -> dict[str, Any]:
    """A coding agent's own fields of its ``cli`` target."""
    argv = config.get("command") or config.get("executable") or [agent.program]
    if isinstance(argv, str):
        argv = shlex.split(argv)
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise where.error((*loc, "command"), "command is the program (and its own arguments)")
    model = config.get("model")
    flag = f" {agent.model_flag} {shlex.quote(model)}" if isinstance(model, str) and model else ""
    command = agent.template.format(
        argv=" ".join(shlex.quote(a) for a in argv),
        model=flag,
        PROMPT="{PROMPT}",
        OUTPUT_FILE="{OUTPUT_FILE}",
    )
    image = config.get("image")
    return {
        "command": command,
        "program": argv[0],
        "answer_format": agent.answer_format,
        **({"image": image.strip()} if isinstance(image, str) and image.strip() else {}),
    }


def _replay(
    config: dict[str, Any],
    where: Where,
    loc: tuple[str, ...],
    label: str,
    roots: list[Path],
    found: Found,
) -> dict[str, Any]:
    sources = [k for k in ("fixtures", "transcripts", "execution_traces") if config.get(k)]
    if len(sources) != 1:
        raise where.error(loc, "a replay provider reads exactly one of fixtures, transcripts")
    key = sources[0]
    if key == "execution_traces":
        raise where.refuse(
            (*loc, key),
            "replay from execution_traces",
            "replay a fixtures or transcripts JSONL file instead (agentv import writes them)",
        )
    rel = str(config[key])
    # A providers file's relative paths start at its own folder; then AgentV's search roots.
    # An absolute one is taken as it is (resolveReplaySourcePath), never looked for below them.
    absolute = os.path.isabs(rel.removeprefix("file://").strip())
    path = resolve_path(rel, [] if absolute else [found.where.path.parent, *roots])
    if path is None or not path.is_file():
        raise where.error((*loc, key), f"replay {key} file {rel!r} not found")
    source = config.get("source_target")
    if not isinstance(source, str) or not source.strip():
        raise where.error((*loc, "source_target"), "a replay provider needs source_target")
    replay = {key: str(path), "source_target": source.strip()}
    for extra in ("suite", "eval_path", "variant"):
        if isinstance(config.get(extra), str):
            replay[extra] = config[extra]
    return {"provider": "replay", "label": label, "replay": replay}


def command_judge(label: str, sources: TargetSources, base: Path) -> tuple[str, Any] | None:
    """The judge ``label`` names when it is a command (a ``cli`` provider, a coding-agent CLI,
    v4's discovered provider), as the cli target it would be as the agent: ``(kind,
    TargetConfig)``; None when it is a model, a mock or a replay, or defined nowhere. A
    provider that cannot run here (an SDK, a log reader) is refused as it is as the agent."""
    env = {**dotenv(base), **os.environ}
    found = _catalog(label, sources, env)
    if not isinstance(found, Found):
        return None
    kind = agentv_kind(found.entry)
    if not kind or kind in MODEL_KINDS or kind in ("mock", "replay"):
        return None
    data = _target(found, base, env, [], None, None)
    if data.get("provider") != "cli":
        return None
    try:
        return kind, TargetConfig.model_validate(data)
    except ValidationError as exc:
        raise found.where.error(found.loc, str(exc).splitlines()[-1].strip()) from None


register_command_judges(command_judge)
