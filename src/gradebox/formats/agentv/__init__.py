"""AgentV eval files, read as they are written, mapped onto our suite model.

Today's form (5.x: ``prompts``, ``providers``, ``tests[].vars``, ``assert``, ``environment``,
``default_test``, ``scenarios``, datasets) and the stable release's (v4.42.4: ``assertions``,
``type: code-grader``, ``target:`` naming an entry of ``.agentv/targets.yaml``, ``workspace``
with ``template``, ``repos``, ``hooks`` and ``docker``, top-level ``input`` and
``preprocessors``, ``tool-trajectory``, ``skill-trigger``, ``composite``) are both read, each
with its own release's semantics. Which release wrote a file is told by its shape
(``release_of``), so that a message never tells a v4 user that a v4 field was removed. A
field is accepted when AgentV's own validator accepts it (``validation/eval-validator.ts``):
fields that only describe a suite (``governance``, ``tags``, ``author``...) are kept in its
metadata, and only a field AgentV rejects is called a mistake.

What has no equivalent here is refused with one line (``UnsupportedFeature``) naming the file,
line and field and what to do instead, never dropped: lifecycle extensions that are JavaScript
modules, SDK providers, prompts written by code.

Modules: ``_base`` (errors, interpolation, AgentV's file lookup), ``providers`` (the target),
``environment`` (the workspace), ``cases`` (the tests), ``csv_cases`` (CSV datasets).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...core.yamlfile import LineMap, load_yaml_file, to_config_error
from ...errors import ConfigError
from ...graders.assertion import DEFAULT_REQUIRED, GRADER_TARGET
from ...llm.targets import TargetSources
from ...suite import Suite, SuiteFile, TargetConfig, build_suite
from ._base import Where, dotenv, interpolate_env, is_file, render, resolve_path, search_roots
from .cases import Context, build_tests, check_repeat, check_shapes, gather_cases
from .environment import map_environment, map_workspace, workspace_docker
from .providers import CHOSEN_TARGET, MatrixTarget, resolve_targets
from .spellings import our_spellings

__all__ = ["PASS_THRESHOLD", "chosen_target", "load_agentv", "release_of", "render"]


@contextmanager
def chosen_target(name: str | None, grader: str | None = None) -> Iterator[None]:
    """Load AgentV files with ``name`` as their target (AgentV's ``--target NAME``; it picks
    one of a file's ``execution.targets``, which without it are refused by name: a matrix is
    one run per target) and ``grader`` as every LLM grader's judge (``--grader-target``).

    Example::

        with chosen_target("llm", grader="azure"):
            suite = load_suite(Path("evals/benchmark.eval.yaml"))
    """
    token = CHOSEN_TARGET.set(name)
    judge = GRADER_TARGET.set(grader)
    try:
        yield
    finally:
        GRADER_TARGET.reset(judge)
        CHOSEN_TARGET.reset(token)


PASS_THRESHOLD = DEFAULT_REQUIRED
"""AgentV's default: a test passes when its weighted score reaches 0.8."""

# AgentV's KNOWN_TOP_LEVEL_FIELDS, and what the earlier form wrote that we still read.
_TOP_KEYS = {
    "$schema", "name", "description", "category", "version", "author", "tags", "license",
    "requires", "input_files", "prompts", "tests", "providers", "defaults", "environment",
    "execution", "timeout_seconds", "evaluate_options", "threshold", "default_test", "assert",
    "scenarios", "derived_metrics", "output_path", "env", "nunjucks_filters", "extensions",
    "workspace", "metadata", "governance",
    # v4 (KNOWN_TOP_LEVEL_FIELDS of v4.42.4's eval-validator.ts), and earlier
    "target", "evalcases", "assertions", "suite", "dataset", "input", "evaluators",
    "preprocessors",
}  # fmt: skip
_DESCRIPTIVE = ("category", "version", "author", "license", "requires", "governance",
                "derived_metrics", "output_path")  # fmt: skip
# AgentV's validator rejects these, with these hints (REMOVED_TOP_LEVEL_FIELDS).
_REMOVED = {
    "experiment": "use tags.experiment",
    "imports": "use tests: file://... for case files, scenarios: [file://...] for scenarios",
    "expected_output": "put reference answers in default_test.vars.expected_output or "
                       "tests[].vars.expected_output",
    "workers": "use evaluate_options.max_concurrency",
    "model": "put model inside providers[].config",
    "policy": "use evaluate_options.repeat, timeout_seconds and threshold",
    "targets": "use providers",
    "eval_cases": "use tests",
    "repeat": "use evaluate_options.repeat",
    "runs": "use evaluate_options.repeat",
    "early_exit": "use evaluate_options.repeat",
    "budget_usd": "use evaluate_options.budget_usd",
    "on_run_complete": "use extensions with an afterAll hook",
    "graders": "a grader is a provider: list it in providers and name it in defaults.grader",
    "providerPromptMap": "use providers",
    "provider_prompt_map": "use providers",
}  # fmt: skip
_DEFAULT_TEST_KEYS = {"vars", "provider", "providers", "prompts", "assert",
                      "assert_scoring_function", "options", "threshold", "metadata"}  # fmt: skip
_EVALUATE_OPTIONS = {"budget_usd", "max_concurrency", "cache", "delay", "generate_suggestions",
                     "repeat", "timeout_ms", "max_eval_time_ms", "filter_range"}  # fmt: skip


# What only one release writes (v4.42.4's KNOWN_TOP_LEVEL_FIELDS and test fields; 5.x's).
_V5_SHAPE = {"prompts", "providers", "default_test", "scenarios", "evaluate_options",
             "environment", "derived_metrics", "extensions", "nunjucks_filters", "assert",
             "vars"}  # fmt: skip
_V4_SHAPE = {"assertions", "execution", "target", "input", "evaluators", "preprocessors",
             "criteria", "eval_cases", "evalcases", "expected_output"}  # fmt: skip


def release_of(data: dict[str, Any]) -> str:
    """``"5.x"``, ``"v4"`` or ``"either"``: which AgentV release's eval file this is, by its
    shape (its top level, else its first inline test)."""
    tests = data.get("tests")
    first = tests[0] if isinstance(tests, list) and tests and isinstance(tests[0], dict) else {}
    for keys in (set(data), set(first)):
        if keys & _V5_SHAPE and not keys & _V4_SHAPE:
            return "5.x"
        if keys & _V4_SHAPE:
            return "v4"
    return "either"


def _check_top(data: dict[str, Any], where: Where) -> None:
    release = release_of(data)
    for key in data:
        if key in _REMOVED and release == "5.x":
            raise where.error((key,), f"AgentV removed top-level {key!r}: {_REMOVED[key]}")
        if key in _REMOVED and release == "v4":  # v4 never had it either
            raise where.error(
                (key,),
                f"{key!r} is not a top-level field of an AgentV v4 "
                "eval file (v4's validator rejects it too)",
            )
        if key in _REMOVED:
            raise where.error(
                (key,),
                f"{key!r} is not a top-level field of an AgentV eval "
                f"file: v4 never had it, and 5.x removed it ({_REMOVED[key]})",
            )
        if key not in _TOP_KEYS:
            raise where.error(
                (key,),
                "not a top-level field of an AgentV eval file (AgentV "
                "rejects it too; check its spelling)",
            )
    if data.get("evaluators"):
        # v4's validator knows it, and its parser reads suite-level graders from assertions
        # only: these would silently grade nothing.
        raise where.error(
            ("evaluators",),
            "top-level evaluators are never run by AgentV v4 "
            "(it reads suite-level graders from assertions); rename it "
            "assertions",
        )
    options = data.get("evaluate_options")
    if options is not None:
        if not isinstance(options, dict):
            raise where.error(("evaluate_options",), "evaluate_options is a mapping")
        unknown = set(options) - _EVALUATE_OPTIONS
        if unknown:
            raise where.error(
                ("evaluate_options", sorted(unknown, key=str)[0]),
                "not an evaluate_options field AgentV knows",
            )
        check_repeat(options.get("repeat"), where, ("evaluate_options", "repeat"))
    threshold = data.get("threshold")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 <= threshold <= 1
    ):
        raise where.error(("threshold",), "threshold is a number from 0 to 1")
    for key, ok, what in (
        ("providers", (str, dict, list), "a label, an entry, or a list of them"),
        ("defaults", (dict, str), "{provider, grader} or file://..."),
        ("prompts", (str, dict, list), "a prompt or a list of prompts"),
    ):
        if data.get(key) is not None and not isinstance(data[key], ok):
            raise where.error((key,), f"{key} is {what}")
    if data.get("nunjucks_filters"):
        raise where.refuse(
            ("nunjucks_filters",),
            "nunjucks_filters",
            "template filters are JavaScript run inside AgentV's process; render the values "
            "into vars instead",
        )
    if data.get("prompts") is not None and (data.get("input_files") is not None):
        raise where.error(
            ("input_files",), "AgentV does not combine top-level input_files with prompts"
        )
    for i, ext in enumerate(data.get("extensions") or []):
        name = ext.get("id") if isinstance(ext, dict) else ext
        configured = isinstance(ext, dict) and any(
            ext.get(k) or (ext.get("config") or {}).get(k)
            for k in ("skills", "hooks", "agents", "rules")
        )
        if isinstance(name, str) and name.startswith("agentv:agent-rules") and not configured:
            continue  # it only tells a coding agent where the workspace's skills already are
        raise where.refuse(
            ("extensions", str(i)),
            "a lifecycle extension",
            "extensions are JavaScript modules AgentV imports into its own process (with its "
            "state); write the step as a command: environment.setup, or workspace.hooks "
            "(before_all, before_each, after_each, after_all)",
        )


def _default_test(
    data: dict[str, Any], where: Where, roots: list[Path], env: dict[str, str]
) -> dict[str, Any]:
    value = data.get("default_test")
    if value is None:
        return {}
    if isinstance(value, str):
        ref = value.strip()
        if ref.startswith("ref://"):
            raise where.refuse(
                ("default_test",), "ref:// references", "name the file with file://..."
            )
        if not ref.startswith("file://"):
            raise where.error(("default_test",), "default_test is a mapping or file://...")
        path = resolve_path(ref, roots)
        if path is None or not path.is_file():
            raise where.error(("default_test",), f"default_test file {ref!r} not found")
        loaded, lines = load_yaml_file(path)
        if not isinstance(loaded, dict):
            raise ConfigError("a default_test file holds a mapping", file=str(path))
        return interpolate_env(loaded, env)
    if not isinstance(value, dict):
        raise where.error(("default_test",), "default_test is a mapping or file://...")
    unknown = set(value) - _DEFAULT_TEST_KEYS
    if unknown:
        raise where.error(("default_test", sorted(unknown, key=str)[0]), "not a default_test field")
    check_shapes(value, where, ("default_test",))
    return value


def _prompts(data: dict[str, Any]) -> list[Any]:
    raw = data.get("prompts")
    if raw is None:
        return []
    if isinstance(raw, list) and raw and all(isinstance(p, dict) and "role" in p for p in raw):
        return [raw]  # one chat prompt
    return raw if isinstance(raw, list) else [raw]


def _eval_defaults(data: dict[str, Any], base: Path) -> dict[str, Any]:
    value = data.get("defaults")
    if isinstance(value, str) and value.strip().startswith("file://"):
        path = (base / value.strip().removeprefix("file://")).resolve()
        value = load_yaml_file(path)[0] if is_file(path) else {}
    return value if isinstance(value, dict) else {}


def _read(path: Path, data: Any, lines: LineMap) -> tuple[dict[str, Any], Where]:
    """The eval file's mapping (a JSONL file of cases takes its same-named YAML sidecar)."""
    if path.suffix == ".jsonl":
        sidecar = next(
            (p for p in (path.with_suffix(".yaml"), path.with_suffix(".yml")) if p.is_file()), None
        )
        if sidecar is not None:
            data, lines = load_yaml_file(sidecar)
            where = Where(sidecar, lines)
        else:
            data, where = {}, Where(path, lines)
        if not isinstance(data, dict):
            raise where.error((), "the sidecar must be a mapping")
        return {**data, "tests": f"file://{path.name}"}, where
    where = Where(path, lines)
    if not isinstance(data, dict):
        raise where.error((), "an eval file must be a mapping with 'tests'")
    return data, where


def load_agentv(
    path: Path,
    data: Any,
    lines: LineMap,
    *,
    targets: tuple[Path, ...] = (),
    target_name: str | None = None,
) -> Suite:
    """Read an AgentV eval file (YAML, or JSONL with an optional same-named YAML sidecar).

    ``targets``: the operator's providers files (``--providers``), read before ``.agentv/``;
    ``target_name``: ``run --target NAME``, the target of that name in place of the file's
    (one of its ``execution.targets``, where it lists several)."""
    if target_name is not None:
        with chosen_target(target_name, GRADER_TARGET.get()):
            return load_agentv(path, data, lines, targets=targets)
    path = Path(path)
    base = path.parent.resolve()
    sources = TargetSources(operator=targets, project=base)
    env = {**dotenv(base), **os.environ}
    data, where = _read(path, data, lines)
    data = interpolate_env(data, env)
    _check_top(data, where)
    roots = search_roots(path)
    default_test = _default_test(data, where, roots, env)
    defaults = _eval_defaults(data, base)
    if isinstance(defaults.get("provider"), str) and not data.get("providers"):
        data = {**data, "providers": [defaults["provider"]]}
    picked = resolve_targets(data, where, base, env, roots, sources=sources)
    target = _suite_target(picked)

    workspace = map_workspace(data.get("workspace"), where, ("workspace",), base, env)
    docker = workspace_docker(data.get("workspace"), where, ("workspace",), base, env)
    environment, settings = map_environment(
        data.get("environment"), where, ("environment",), base, env, base
    )
    if environment is not None:
        workspace = {**(workspace or {}), **environment}

    key = "tests" if "tests" in data or "evalcases" not in data else "evalcases"
    ctx = Context(data, where, base, roots, env, default_test)
    cases = gather_cases(ctx, key)
    tests, origins, asked = build_tests(cases, _prompts(data), ctx)
    settings = {**asked, **settings}
    for one in picked:
        _conversations_need_a_host_target(tests, one.target, origins, len(picked) > 1)
    _suite_input_files(data, tests, roots, where)
    tests = _filter_range(data, tests, origins, where)

    suite_assert = list(default_test.get("assert") or [])
    suite_assert += list(data.get("assert", data.get("assertions")) or [])
    execution = data.get("execution") if isinstance(data.get("execution"), dict) else {}
    suite_assert += list(execution.get("evaluators") or [])
    options = data.get("evaluate_options") if isinstance(data.get("evaluate_options"), dict) else {}
    for one in picked:
        if one.target is not None:
            _target_settings(one.target, settings, options)
    workspace, tests, origins = _with_targets(picked, workspace, tests, origins, where, base, env)
    metadata = {k: data[k] for k in _DESCRIPTIVE if k in data}
    if isinstance(data.get("tags"), dict | list):
        metadata["tags"] = data["tags"]
    threshold = data.get("threshold")
    spec: dict[str, Any] = {
        "name": str(data.get("name") or data.get("suite") or _stem(path)),
        "description": data.get("description"),
        "metadata": metadata,
        "workspace": workspace,
        "target": target,
        "assert": suite_assert,
        "defaults": {
            # AgentV: the file's threshold is every test's (default 0.8).
            "threshold": threshold if isinstance(threshold, int | float) else PASS_THRESHOLD,
            "workers": options.get("max_concurrency", execution.get("workers")),  # v4: the latter
            "grader": defaults.get("grader"),
            "image": settings.get("image", docker.get("image")),
            "limits": settings.get("limits", docker.get("limits")),
            "timeout": docker.get("timeout"),
        },
        # v4's top-level preprocessors: every LLM grader's (each may give its own)
        "preprocessors": _preprocessors(data, where),
        "tests": tests,
    }
    _spell_assertions(spec)
    try:
        suite_file = SuiteFile.model_validate(spec)
    except ValidationError as exc:
        raise _locate(exc, origins, where) from None
    suite = build_suite(
        path,
        suite_file,
        lines,
        flavor="agentv",
        origins=origins,
        top=(str(where.path), where.lines),
        search_roots=tuple(roots),
        operator_targets=targets,
    )
    _tag_targets(suite, picked, where)
    return suite


def _suite_target(picked: list[MatrixTarget]) -> dict[str, Any] | None:
    """The suite's own target: the one target, or, for a matrix, the one a check before the
    run (model keys, the model hub) must see first: its first model target, else its first.
    Each test of a matrix runs against its own (``_tag_targets``)."""
    if len(picked) == 1:
        return picked[0].target
    models = [p.target for p in picked if p.target and p.target.get("provider") == "model"]
    return models[0] if models else picked[0].target


def _with_targets(
    picked: list[MatrixTarget],
    workspace: dict[str, Any] | None,
    tests: list[dict[str, Any]],
    origins: list[Any],
    where: Where,
    base: Path,
    env: dict[str, str],
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[Any]]:
    """A target's own hooks laid into the workspaces, and, for a matrix, every test once per
    target (target after target, as AgentV runs them), its id ``ID@NAME`` (AgentV's matrix
    id: unique per test and target, and stable for ``--resume``; two that read alike are
    refused as duplicate ids)."""
    if len(picked) == 1:
        hooks = _target_hooks(picked[0], where, base, env)
        if hooks:
            workspace = _hooked(workspace, hooks, picked[0], where)
            for test in tests:
                if test.get("workspace") is not None:
                    test["workspace"] = _hooked(test["workspace"], hooks, picked[0], where)
        return workspace, tests, origins
    out, where_from = [], []
    for one in picked:
        hooks = _target_hooks(one, where, base, env)
        for test, origin in zip(tests, origins, strict=True):
            copy = {**test, "id": f"{test['id']}@{one.name}"}
            if hooks:
                copy["workspace"] = _hooked(test.get("workspace") or workspace, hooks, one, where)
            out.append(copy)
            where_from.append(origin)
    return workspace, out, where_from


def _target_hooks(
    one: MatrixTarget, where: Where, base: Path, env: dict[str, str]
) -> dict[str, Any]:
    if not one.hooks:
        return {}
    mapped = map_workspace({"hooks": one.hooks}, where, one.loc, base, env) or {}
    return {k: v for k, v in mapped.items() if k != "hooks"}


def _hooked(
    workspace: dict[str, Any] | None, hooks: dict[str, Any], one: MatrixTarget, where: Where
) -> dict[str, Any]:
    """``workspace`` with a target's own hooks. AgentV runs a workspace hook and then the
    target's of the same name; one command each here, so both at once is refused."""
    merged = dict(workspace or {})
    for name, command in hooks.items():
        if merged.get(name) is not None:
            raise where.refuse(
                (*one.loc, "hooks", name),
                f"a {name} hook in both the workspace and target {one.name or ''}".rstrip(),
                "write both steps as one command, in the workspace's hook or the target's",
            )
        merged[name] = command
    return merged


def _tag_targets(suite: Suite, picked: list[MatrixTarget], where: Where) -> None:
    """Each test of a matrix bound to its target, and a batching target marked."""
    spec_target = suite.spec.target
    if len(picked) == 1:
        if spec_target is not None and picked[0].batch:
            spec_target._batch = True
        return
    configs = []
    for one in picked:
        try:
            config = TargetConfig.model_validate(one.target) if one.target else None
        except ValidationError as exc:
            raise where.error(one.loc, str(exc).splitlines()[-1].strip()) from None
        if config is not None:
            config._batch = one.batch
        configs.append(config)
    per = len(suite.tests) // len(picked)
    for i, test in enumerate(suite.tests):
        one, config = picked[i // per], configs[i // per]
        test.target, test.target_name = config, one.name
        test.source_id = test.id[: -len(f"@{one.name}")]


def _preprocessors(data: dict[str, Any], where: Where) -> list[dict[str, Any]]:
    value = data.get("preprocessors")
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(p, dict) and isinstance(p.get("type"), str) and p.get("command") for p in value
    ):
        raise where.error(("preprocessors",), "preprocessors are [{type, command}]")
    return value


def _conversations_need_a_host_target(
    tests: list[dict[str, Any]],
    target: dict[str, Any] | None,
    origins: list[Any],
    matrix: bool = False,
) -> None:
    """AgentV holds a conversation with any provider; here a turn is a call from the host,
    so a conversation needs a model, mock or replay target (and one target per run)."""
    for test, (file, lines, loc) in zip(tests, origins, strict=True):
        if test.get("conversation") and matrix:
            raise Where(Path(file), lines).refuse(
                (*loc, "mode"),
                "a conversation in a target matrix",
                "its turns go to the run's one target: pick it with --target NAME",
            )
    if target is not None and target.get("provider") in ("model", "mock", "replay"):
        return
    for test, (file, lines, loc) in zip(tests, origins, strict=True):
        if test.get("conversation"):
            kind = (target or {}).get("provider", "no target")
            raise Where(Path(file), lines).refuse(
                (*loc, "mode"),
                f"a conversation with a {kind} target",
                "turns are sent from the host, one call each: use a model provider (or mock, "
                "replay) as the target, or write the turns as one test's input messages",
            )


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".eval.yaml", ".eval.yml", ".yaml", ".yml", ".jsonl"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or "eval"
    return name


def _target_settings(
    target: dict[str, Any], settings: dict[str, Any], options: dict[str, Any]
) -> None:
    """A Docker environment's image and limits are the target's too; ``timeout_ms`` bounds it."""
    if target.get("provider") in ("cli", "stdio"):
        if settings.get("image") is not None and "image" not in target:
            target["image"] = settings["image"]
        if settings.get("limits") is not None:
            target["limits"] = settings["limits"]
    ms = options.get("timeout_ms")
    if isinstance(ms, int | float) and not isinstance(ms, bool) and "timeout" not in target:
        target["timeout"] = f"{ms / 1000}s"


def _suite_input_files(
    data: dict[str, Any], tests: list[dict[str, Any]], roots: list[Path], where: Where
) -> None:
    """Top-level ``input_files``: every test's (unless it skips the suite's defaults)."""
    files = data.get("input_files")
    if not files:
        return
    if not isinstance(files, list):
        raise where.error(("input_files",), "input_files is a list of paths")
    found = []
    for i, rel in enumerate(files):
        path = resolve_path(str(rel), roots)
        if path is None or not path.is_file():
            raise where.error(("input_files", str(i)), f"input file {rel!r} not found")
        found.append(str(path))
    for test in tests:
        if not test.get("skip_defaults"):
            test["input_files"] = [*found, *test["input_files"]]


def _filter_range(
    data: dict[str, Any], tests: list[dict[str, Any]], origins: list[Any], where: Where
) -> list[dict[str, Any]]:
    """``evaluate_options.filter_range``: ``[start, end)`` of the tests, or ``"start:end"``."""
    options = data.get("evaluate_options") or {}
    span = options.get("filter_range") if isinstance(options, dict) else None
    if span is None:
        return tests
    if isinstance(span, str) and ":" in span:
        start_text, end_text = span.split(":", 1)
        try:
            span = [int(start_text or 0), int(end_text) if end_text else len(tests)]
        except ValueError:
            span = None
    if not (isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span)):
        raise where.error(("evaluate_options", "filter_range"), "filter_range is [start, end]")
    kept = slice(span[0], span[1])
    origins[:] = origins[kept]
    return tests[kept]


def _locate(exc: ValidationError, origins: list[Any], where: Where) -> ConfigError:
    """A validation error of the mapped suite, pointed back at what the user wrote."""
    loc = [str(p) for p in exc.errors(include_url=False)[0]["loc"]]
    if len(loc) >= 2 and loc[0] == "tests" and loc[1].isdigit() and int(loc[1]) < len(origins):
        file, lines, test_loc = origins[int(loc[1])]
        message = to_config_error(exc, file=file, lines=lines).message
        field = ".".join((*test_loc, *loc[2:]))
        return ConfigError(message, file=file, line=lines.get(test_loc), field=field)
    return to_config_error(exc, file=str(where.path), lines=where.lines)


def _spell_assertions(spec: dict[str, Any]) -> None:
    """Every ``assert`` list of the mapped suite, its types spelt as ours (``spellings``)."""
    for holder in [spec, *(t for t in spec.get("tests") or [] if isinstance(t, dict))]:
        if "assert" in holder:
            holder["assert"] = our_spellings(holder["assert"])
        conversation = holder.get("conversation")
        if isinstance(conversation, dict):
            for turn in conversation.get("turns") or []:
                if isinstance(turn, dict) and "assert" in turn:
                    turn["assert"] = our_spellings(turn["assert"])
