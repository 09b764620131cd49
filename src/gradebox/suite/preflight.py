"""What a run needs from this machine, checked by ``run`` and ``validate`` after the plan and
before the first test, so that a missing key is one line naming the variable, not an error in
every test:

- every model target the run calls (a model target under test, LLM graders, script graders'
  model proxies) is defined, and the variables it reads (its key, endpoint, model) are set;
- a coding-agent target (``claude-cli``, ``codex-cli``, ``copilot-cli``, ``pi-cli``), or an
  LLM grader's judge that is one, has its program on its image: gradebox's own images carry
  none, so it must name an image of yours;
- every repository a workspace names by URL is fetched into the cache and its ref resolved,
  once per run (``run``: ``fetch``), or, offline, is found in the cache (``validate
  --offline`` checks only that).

Keys are only looked up here (set or not), never read into anything that leaves the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError, collect
from ..files.repos import DEFAULT_MAX_BYTES, cached, is_remote, resolve
from ..files.repos import offline as offline_default
from ..graders.assertion import Assertion, GraderAssertion, LlmGraderAssertion, leaves
from ..llm.client import missing_env_message

if TYPE_CHECKING:
    from ..llm.targets import ModelTarget
    from . import RepoConfig, Suite, TargetConfig

__all__ = ["ModelUse", "models_used", "preflight"]

OUR_IMAGES = ("base", "python", "node", "shell")


@dataclass
class ModelUse:
    """One model the run calls: by whom, and the target (None: defined nowhere, ``problem``
    says so)."""

    user: str
    target: ModelTarget | None
    problem: str | None = None
    undefined: str | None = None  # a name defined nowhere (not a broken definition)


def models_used(suite: Suite) -> Iterator[ModelUse]:
    """Every model call the run makes: a model target under test, LLM graders, script
    graders' model proxies (each assertion once)."""
    targets = suite.targets
    spec = suite.spec.target
    if spec is not None and spec.provider == "model":
        undefined = None
        try:  # following use_target: an unset variable is named by missing_env
            found = targets.lookup(spec.model or "") if targets is not None else None
            undefined = spec.model if found is None else None
            problem = None if found else _unresolved(suite, spec.model)
        except ConfigError as exc:
            found, problem = None, exc.message
        yield ModelUse("the target", found, problem, undefined=undefined)
    for a in _assertions(suite):
        if isinstance(a, LlmGraderAssertion):
            if a.llm.command_judge is not None:
                continue  # a command, not a model: see _command_judges
            yield ModelUse(
                a.field or "an LLM grader", a.llm.target, a.llm.unresolved, a.llm.undefined
            )
        elif isinstance(a, GraderAssertion) and getattr(a.grader, "target", None):
            name = a.grader.target.name  # type: ignore[union-attr]
            user = f"{a.field or 'a script grader'} (model proxy)"
            try:
                if targets is None:
                    raise ConfigError("no model targets")
                yield ModelUse(user, targets.get(name, file=None, field=None))
            except ConfigError as exc:
                yield ModelUse(user, None, exc.message)


def _assertions(suite: Suite) -> Iterator[Assertion]:
    """Every assertion of the suite that runs (sets' members), each once."""
    seen: set[int] = set()
    for test in suite.tests:
        for a in leaves(test.every_assertion()):
            if id(a) not in seen:
                seen.add(id(a))
                yield a


def preflight(
    suite: Suite,
    *,
    warn: Callable[[str], None] | None = None,
    fetch: bool = False,
    offline: bool = False,
    lift_cap: bool = False,
) -> None:
    """Raise every problem found (``ConfigErrors``), or return. With ``warn`` (``validate``,
    which needs no secrets), an unset key or variable is a warning passed to it instead.

    ``fetch`` (``run``): every remote repository fetched and resolved now, before any sandbox
    starts, its commit kept on the suite for every test; ``offline`` (``--offline``, else
    ``GRADEBOX_OFFLINE``): nothing fetched, what the cache lacks refused; ``lift_cap``: no
    size cap on a fetch (``--allow limits``)."""
    file = str(suite.path)
    errors: dict[str, ConfigError] = {}  # one line per problem, however many tests share it
    for key, problem in _repos(suite, fetch, offline, lift_cap):
        errors.setdefault(key, ConfigError(problem, file=file))
    warned: set[str] = set()

    def lacking(key: str, why: str, until: str) -> None:
        """What this machine lacks (not a mistake of the file): a warning once for
        ``validate``, else an error."""
        if warn is None:
            errors.setdefault(key, ConfigError(why, file=file))
        elif key not in warned:
            warned.add(key)
            warn(f"{file}: {why} (`run` refuses this until it is {until})")

    for use in models_used(suite):
        if use.target is None and use.undefined is not None:
            # A label `agentv init` (or the operator's --targets) would define.
            why = f"{use.user}: {_unresolved(suite, use.undefined)}"
            lacking(f"label:{use.undefined}", why, "defined")
        elif use.target is None:
            why = f"{use.user}: {use.problem or 'no model target'}"
            errors.setdefault(use.problem or why, ConfigError(why, file=file))
        elif missing := use.target.missing_env():
            why = f"{missing_env_message(use.target, missing)}, for {use.user}"
            lacking(f"env:{use.target.name}", why, "set")
    target = suite.spec.target
    commands = [("the target", target, " unless you allow them")] if target is not None else []
    commands += [(f"the judge of {user}", judge, "") for user, judge in _command_judges(suite)]
    for who, spec, unless in commands:
        if spec.program and "/" not in spec.program:
            image = spec.image or "python"
            if isinstance(image, str) and image in OUR_IMAGES:
                errors.setdefault(
                    f"program:{spec.label}",
                    ConfigError(
                        f"{who} ({spec.label or 'cli'}) runs `{spec.program}`, which "
                        f"gradebox's {image!r} image does not carry: build an image with it "
                        f"(e.g. FROM gradebox/node plus its installer) and name it as the "
                        f"provider's `image:`; it runs without network or keys{unless}",
                        file=file,
                    ),
                )
    collect(list(errors.values()))


def _command_judges(suite: Suite) -> Iterator[tuple[str, TargetConfig]]:
    """The LLM graders whose judge is a command (an AgentV cli provider or coding agent)."""
    for a in _assertions(suite):
        if isinstance(a, LlmGraderAssertion) and a.llm.command_judge:
            yield a.field or "an LLM grader", a.llm.command_judge.target


def remote_repos(suite: Suite) -> Iterator[RepoConfig]:
    """Each remote repository of the suite's workspaces (the suite's and its tests'), once."""
    seen: set[int] = set()
    for cfg in [suite.spec.workspace, *(t.workspace for t in suite.tests)]:
        if cfg is None or id(cfg) in seen:
            continue
        seen.add(id(cfg))
        yield from (repo for repo in cfg.repos if is_remote(repo.source))


def _repos(suite: Suite, fetch: bool, offline: bool, lift_cap: bool) -> Iterator[tuple[str, str]]:
    """``(key, problem)`` of each remote repository that cannot be had."""
    offline = offline_default(offline)  # --offline, else GRADEBOX_OFFLINE
    for repo in remote_repos(suite):
        repo._offline = offline
        key = f"repo:{repo.source}@{repo.ref}"
        if fetch:
            try:
                got = resolve(
                    repo.source,
                    repo.ref,
                    offline_run=offline,
                    max_bytes=None if lift_cap else DEFAULT_MAX_BYTES,
                )
            except ConfigError as exc:
                yield key, exc.message
                continue
            repo._commit = got.commit
        elif offline and not cached(repo.source, repo.ref):
            yield (
                key,
                (
                    f"repository {repo.source}"
                    + (f" at {repo.ref}" if repo.ref else "")
                    + " is not in the cache and the run is offline (--offline or "
                    "GRADEBOX_OFFLINE): run once without it to fetch it"
                ),
            )


def _unresolved(suite: Suite, name: str | None) -> str:
    """One line: the label, the targets files that were read (none of them defines it), and
    where to define it."""
    targets = suite.targets
    known = ", ".join(sorted(targets.targets)) if targets is not None else ""
    read = sorted({f for f in targets.sources.values() if f}) if targets is not None else []
    where = f"the targets files read ({', '.join(read)})" if read else "no targets file found"
    return (
        f"no provider or model target named {name!r}: not in the file nor in {where}; define "
        f"it in a .agentv/targets.yaml at or above the file (as `agentv init` does) or give "
        f"--targets FILE (model targets: {known or 'none'})"
    )
