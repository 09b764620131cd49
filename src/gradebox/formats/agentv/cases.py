"""An AgentV eval file's tests, gathered and expanded as AgentV does (``yaml-parser.ts``),
each mapped onto our ``TestCase`` form.

Gathered: inline tests; ``tests: ./cases.jsonl`` (YAML, JSON, JSONL, CSV, a glob, a folder of
``NAME/case.yaml``); ``include`` entries (``type: tests``, with ``select`` and ``run``);
``scenarios`` (inline or ``file://`` globs; each config row crossed with the scenario's tests).
Expanded: ``default_test`` vars and options merged in; string-list vars crossed into one test
per combination; one test per prompt when there are several (``ID__prompt_P``). Mapped:
``prompts`` rendered with the test's vars become its input; criteria, expected answers,
assertions, thresholds, repeats, conversations, workspaces and metadata.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core import untrusted
from ...core.yamlfile import MAX_DEPTH, load_yaml_file, nesting_exceeds
from ...errors import ConfigError
from ...graders.assertion import TEST_TRANSFORM, parse_transform
from ...graders.trace import decided_on_host
from ._base import (
    _VAR,
    Case,
    Lines1,
    Where,
    _lookup,
    exists,
    interpolate_env,
    is_dir,
    is_file,
    render,
    resolve_path,
)
from .csv_cases import csv_cases
from .environment import map_environment, map_workspace

__all__ = ["Context", "build_tests", "gather_cases"]

TEST_KEYS = {
    "id", "description", "vars", "criteria", "provider", "providers", "prompts", "input",
    "input_files", "assert", "assert_scoring_function", "options", "threshold", "execution",
    "run", "environment", "workspace", "metadata", "conversation_id", "suite", "depends_on",
    "on_dependency_failure", "mode", "turns", "aggregation", "on_turn_failure", "window_size",
    # read from the earlier form too
    "input_messages", "expected_output", "expected_messages", "expected_outcome", "assertions",
    "rubrics", "note", "evaluators",
}  # fmt: skip
_INCLUDE_FIELDS = {"include", "type", "select", "run"}
_SCENARIO_FIELDS = {"description", "config", "tests"}
_RUN_FIELDS = {"threshold", "repeat", "timeout_seconds", "budget_usd"}
_REPEAT_FIELDS = {"count", "strategy", "early_exit", "cost_limit_usd"}
_TURN_FIELDS = {"input", "expected_output", "assert", "assertions"}
_GLOB = re.compile(r"[*?{\[]")


class Context:
    """What mapping each test of one file needs to know."""

    def __init__(
        self,
        data: dict[str, Any],
        where: Where,
        base: Path,
        roots: list[Path],
        env: dict[str, str],
        default_test: dict[str, Any],
    ) -> None:
        self.data, self.where, self.base, self.roots, self.env = data, where, base, roots, env
        self.default_test = default_test
        self.suite_metadata = _suite_metadata(data)


# --------------------------------------------------------------------------------------------
# Gathering.


def _paths(ref: str, base: Path) -> list[Path]:
    text = ref.strip().removeprefix("file://")
    if _GLOB.search(text):
        try:
            return sorted(p.resolve() for p in base.glob(text) if is_file(p))
        except (ValueError, OSError):  # a pattern glob refuses ('a**'): it matches nothing
            return []
    return [(base / text).resolve()]


def _case_folder(path: Path) -> list[Case]:
    out: list[Case] = []
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        case = next((sub / n for n in ("case.yaml", "case.yml") if (sub / n).is_file()), None)
        if case is None:
            continue
        data, lines = load_yaml_file(case)
        if isinstance(data, dict):
            data.setdefault("id", sub.name)
        out.append((data, Where(case, lines), ()))
    return out


def _file_cases(ref: str, base: Path, where: Where, loc: tuple[str, ...]) -> list[Case]:
    paths = _paths(ref, base)
    if not paths or not any(exists(p) for p in paths):
        raise where.error(loc, f"test file {ref!r} not found")
    out: list[Case] = []
    for path in paths:
        if is_dir(path):
            out += _case_folder(path)
        elif re.search(r"\.eval\.ya?ml$", path.name, re.I):
            raise where.error(
                loc,
                f"{ref!r} is an eval file: include it with "
                "{include: ..., type: suite} or name its case file",
            )
        else:
            out += read_cases_file(path)
    return out


def gather_cases(ctx: Context, key: str) -> list[Case]:
    """Every raw case of the file, with where it was written (scenarios lowered last)."""
    data, where, base = ctx.data, ctx.where, ctx.base
    raw = data.get(key)
    cases: list[Case] = []
    if isinstance(raw, str):
        cases = _file_cases(raw, base, where, (key,))
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            loc = (key, str(i))
            if isinstance(item, str):
                cases += _file_cases(item, base, where, loc)
            elif isinstance(item, dict) and "include" in item:
                cases += _include(item, where, loc, base)
            else:
                cases.append((item, where, loc))
    elif raw is not None:
        raise where.error((key,), "tests is a list, or a file reference")
    elif data.get("scenarios") is None:
        raise where.error((), "required field is missing: tests (or scenarios)")
    cases += _scenario_cases(data.get("scenarios"), where, base, ctx.env)
    if not cases:
        raise where.error((key,), "no tests")
    return cases


def _include(item: dict[str, Any], where: Where, loc: tuple[str, ...], base: Path) -> list[Case]:
    where.unknown(item, _INCLUDE_FIELDS, loc, "unknown field of an include entry")
    kind = item.get("type", "tests")
    if kind == "suite":
        raise where.refuse(
            (*loc, "type"),
            "including a suite (type: suite)",
            "a suite brings its own target and settings: run that eval file on its own, or "
            "include its cases with type: tests",
        )
    if kind != "tests":
        raise where.error((*loc, "type"), "type is tests or suite")
    cases: list[Case] = []
    for path in _paths(str(item["include"]), base):
        if not exists(path):
            raise where.error((*loc, "include"), f"{item['include']!r} not found")
        if re.search(r"\.eval\.ya?ml$", path.name, re.I):
            data, lines = load_yaml_file(path)
            tests = data.get("tests") if isinstance(data, dict) else None
            if isinstance(tests, str):
                cases += _file_cases(tests, path.parent, Where(path, lines), ("tests",))
            elif isinstance(tests, list):
                cases += [
                    (t, Where(path, lines), ("tests", str(i)))
                    for i, t in enumerate(tests)
                    if isinstance(t, dict)
                ]
        elif is_dir(path):
            cases += _case_folder(path)
        else:
            cases += read_cases_file(path)
    select, run = item.get("select"), item.get("run")
    picked = [c for c in cases if _selected(c[0], select)]
    if isinstance(run, dict):
        picked = [
            ({**c[0], "run": {**(c[0].get("run") or {}), **run}}, c[1], c[2])
            for c in picked
            if isinstance(c[0], dict)
        ]
    return picked


def _globs(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value or []]


def _selected(case: Any, select: Any) -> bool:
    if select is None or not isinstance(case, dict):
        return True
    if isinstance(select, str | list):
        select = {"test_ids": select}
    ids = _globs(select.get("test_ids"))
    if ids and not any(fnmatch.fnmatchcase(str(case.get("id", "")), p) for p in ids):
        return False
    meta = case.get("metadata") if isinstance(case.get("metadata"), dict) else {}
    tags = _globs(select.get("tags"))
    have = _globs(meta.get("tags"))
    if tags and not any(fnmatch.fnmatchcase(t, p) for t in have for p in tags):
        return False
    for key, want in (select.get("metadata") or {}).items():
        got = meta.get(key)
        wanted = want if isinstance(want, list) else [want]
        if got not in wanted and not (isinstance(got, list) and set(got) & set(wanted)):
            return False
    return True


def _scenario_cases(raw: Any, where: Where, base: Path, env: dict[str, str]) -> list[Case]:
    """AgentV's ``lowerScenariosIntoTests``: each config row crossed with each test."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise where.error(("scenarios",), "scenarios is a list")
    scenarios: list[tuple[Any, Where, tuple[str, ...]]] = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            if not item.startswith("file://"):
                raise where.error(("scenarios", str(i)), "a scenario reference is file://...")
            paths = _paths(item, base)
            if not any(is_file(p) for p in paths):
                raise where.error(("scenarios", str(i)), f"no scenario file matches {item!r}")
            for path in paths:
                data, lines = load_yaml_file(path)
                data = interpolate_env(data, env)
                items = data.get("scenarios") if isinstance(data, dict) else data
                if not isinstance(items, list):
                    raise ConfigError("a scenario file holds a list of scenarios", file=str(path))
                key = ("scenarios",) if isinstance(data, dict) else ()
                scenarios += [(s, Where(path, lines), (*key, str(j))) for j, s in enumerate(items)]
        else:
            scenarios.append((item, where, ("scenarios", str(i))))
    out: list[Case] = []
    for s, (scenario, swhere, sloc) in enumerate(scenarios):
        if (
            not isinstance(scenario, dict)
            or not isinstance(scenario.get("config"), list)
            or not isinstance(scenario.get("tests"), list)
        ):
            raise swhere.error(sloc, "a scenario is {config: [...], tests: [...]}")
        swhere.unknown(scenario, _SCENARIO_FIELDS, sloc, "unknown scenario field")
        tests = scenario["tests"]
        for c, config in enumerate(scenario["config"]):
            for t, test in enumerate(tests):
                if not isinstance(config, dict) or not isinstance(test, dict):
                    raise swhere.error(sloc, "scenario config rows and tests are mappings")
                out.append(
                    (
                        _merge_row(config, test, s, c, t, len(tests)),
                        swhere,
                        (*sloc, "tests", str(t)),
                    )
                )
    return out


def _merge_row(
    config: dict[str, Any], test: dict[str, Any], s: int, c: int, t: int, count: int
) -> dict[str, Any]:
    merged: dict[str, Any] = {**config, **test}
    for key in ("vars", "metadata", "options", "run"):
        both = {**(config.get(key) or {}), **(test.get(key) or {})}
        if both:
            merged[key] = both
    asserts = [*(config.get("assert") or []), *(test.get("assert") or [])]
    if asserts:
        merged["assert"] = asserts
    if isinstance(test.get("id"), str) and test["id"].strip():
        merged["id"] = test["id"]
    elif isinstance(config.get("id"), str) and config["id"].strip():
        merged["id"] = f"{config['id']}__scenario_test_{t + 1}" if count > 1 else config["id"]
    else:
        merged["id"] = f"scenario-{s + 1}-{c + 1}-{t + 1}"
    return merged


# --------------------------------------------------------------------------------------------
# Expansion: default_test, string-list vars, prompts.


def _with_defaults(case: dict[str, Any], default_test: dict[str, Any]) -> dict[str, Any]:
    out = dict(case)
    for key in ("vars", "options"):
        base = default_test.get(key)
        if isinstance(base, dict) and base and (out.get(key) is None or isinstance(out[key], dict)):
            out[key] = {**base, **(out.get(key) or {})}
    return out


def _var_combinations(case: dict[str, Any]) -> list[dict[str, Any]]:
    """AgentV's ``expandArrayVarCases``: a var whose value is a list of strings makes one test
    per value (every combination); the ids get ``__vars_N``, as ours must be unique."""
    variables = case.get("vars")
    if not isinstance(variables, dict):
        return [case]
    axes = [
        [(k, x) for x in v]
        if isinstance(v, list) and (not v or isinstance(v[0], str))
        else [(k, v)]
        for k, v in variables.items()
    ]
    if all(len(a) == 1 and not isinstance(variables[a[0][0]], list) for a in axes):
        return [case]
    combos = [dict(c) for c in itertools.product(*axes)]
    if len(combos) == 1:
        return [{**case, "vars": combos[0]}]
    return [
        {**case, "vars": v, "id": f"{case.get('id', '')}__vars_{i + 1}"}
        for i, v in enumerate(combos)
    ]


def _prompt_id(prompt: Any) -> str:
    """AgentV's ``safePromptId`` of a prompt's identity."""
    if isinstance(prompt, str) and prompt.startswith("file://"):
        ident = prompt.removeprefix("file://").lstrip("/")
    elif isinstance(prompt, dict) and isinstance(prompt.get("id"), str):
        ident = prompt["id"]
    else:
        kind = "chat" if isinstance(prompt, list) else "string"
        body = json.dumps(prompt, separators=(",", ":"), ensure_ascii=False)
        ident = f"{kind}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", ident.strip()).strip("-")
    return safe[:48] or hashlib.sha256(ident.encode()).hexdigest()[:12]


def prompt_input(prompt: Any, ctx: Context, loc: tuple[str, ...]) -> Any:
    """A ``prompts`` entry as the input it renders: text, or chat messages."""
    if isinstance(prompt, str):
        if prompt.startswith("file://"):
            path = resolve_path(prompt, ctx.roots)
            if path is None or not path.is_file():
                raise ctx.where.error(loc, f"prompt file {prompt!r} not found")
            try:
                return untrusted.read_text(path).replace("\r\n", "\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise ctx.where.error(loc, f"cannot read prompt file {prompt!r}: {exc}") from None
        return prompt
    if isinstance(prompt, list):
        return prompt
    if isinstance(prompt, dict):
        for key in ("function", "function_file", "command"):
            if key in prompt:
                raise ctx.where.refuse(
                    (*loc, key),
                    f"a prompt {key}",
                    "it runs code to write the prompt when the file loads; write the prompt "
                    "(or a file:// prompt file) instead",
                )
        if "file" in prompt:
            return prompt_input(f"file://{prompt['file']}", ctx, (*loc, "file"))
        for key in ("messages", "prompt", "raw"):
            if key in prompt:
                return prompt[key]
        if "role" in prompt:
            return [prompt]
    raise ctx.where.error(loc, "a prompt is text, chat messages, file://..., or {raw|prompt}")


def expand(case: dict[str, Any], prompts: list[Any]) -> list[tuple[dict[str, Any], Any]]:
    """``(case, prompt)`` pairs: one per var combination and prompt."""
    out = []
    for combo in _var_combinations(case):
        if not prompts:
            out.append((combo, None))
            continue
        if "input" in combo:  # with prompts, a test's input is a var of the prompt
            combo = {
                **{k: v for k, v in combo.items() if k not in ("input", "input_files")},
                "vars": {**(combo.get("vars") or {}), "input": combo["input"]},
            }
        for prompt in prompts:
            one = combo
            if len(prompts) > 1 and combo.get("id"):
                one = {**combo, "id": f"{combo['id']}__prompt_{_prompt_id(prompt)}"}
            out.append((one, prompt))
    return out


# --------------------------------------------------------------------------------------------
# Mapping one test.


def _suite_metadata(data: dict[str, Any]) -> dict[str, Any]:
    """What every test inherits (AgentV's ``extractSuiteMetadataPayload``): ``metadata``, list
    ``tags``, ``governance``."""
    meta = dict(data.get("metadata") or {}) if isinstance(data.get("metadata"), dict) else {}
    tags = meta.pop("tags", None)
    merged = [
        t
        for t in (_globs(data.get("tags")) if not isinstance(data.get("tags"), dict) else [])
        + _globs(tags)
        if t
    ]
    if merged:
        meta["tags"] = list(dict.fromkeys(merged))
    if isinstance(data.get("governance"), dict):
        meta["governance"] = data["governance"]
    return meta


def _merge_metadata(case: dict[str, Any], suite: dict[str, Any]) -> dict[str, Any]:
    out = dict(case)
    for key, value in suite.items():
        mine = out.get(key)
        if isinstance(value, list) and isinstance(mine, list):
            out[key] = (
                list(dict.fromkeys([*value, *mine], None))
                if all(isinstance(v, str) for v in [*value, *mine])
                else [*value, *mine]
            )
        elif isinstance(value, dict) and isinstance(mine, dict):
            out[key] = _merge_metadata(mine, value)
        elif mine is None:
            out[key] = value
    return out


def _messages(
    value: Any, role: str, where: Where, roots: list[Path], files: list[str], loc: tuple[str, ...]
) -> Any:
    """Text, or chat messages. In their content, text parts stay and ``{type: file, value:
    path}`` parts become input files (found where AgentV looks, added to ``files``) and stay in
    the message as a reference."""

    def parts(content: Any, loc: tuple[str, ...]) -> Any:
        if not isinstance(content, list):
            return content
        out = []
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("file", "image"):
                rel = str(part.get("value") or part.get("path") or "")
                path = resolve_path(rel, roots) if rel else None
                if path is None or not path.is_file():
                    raise where.error(
                        (*loc, str(i), "value"),
                        f"input file {rel!r} not found "
                        f"(looked from {roots[0]} up, then in {roots[-1]})",
                    )
                files.append(str(path))
                out.append({"type": "file", "value": rel})
            elif isinstance(part, dict) and part.get("type") == "text":
                out.append({"type": "text", "text": part.get("value", part.get("text", ""))})
            else:
                out.append(part)
        return out

    if isinstance(value, dict) and "role" in value:
        value = [value]
    if not isinstance(value, list) or not value:
        return [{"role": role, "content": value}] if isinstance(value, dict | list) else value
    if all(isinstance(m, dict) and "role" in m for m in value):
        return [
            {**m, "content": parts(m.get("content"), (*loc, str(i), "content"))}
            for i, m in enumerate(value)
        ]
    if all(isinstance(p, dict) and "type" in p for p in value):
        return [{"role": role, "content": parts(value, loc)}]
    return [{"role": role, "content": value}]


def _as_expected(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return value
    return [{"role": "assistant", "content": value}]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


_SHAPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "id": (str, "text"), "vars": (dict, "a mapping"), "run": (dict, "a mapping"),
    "options": (dict, "a mapping"), "input_files": (list, "a list of paths"),
    "metadata": (dict, "a mapping"), "execution": (dict, "a mapping"),
    "threshold": ((int, float), "a number from 0 to 1"),
}  # fmt: skip


def check_shapes(item: dict[str, Any], where: Where, loc: tuple[str, ...]) -> None:
    """The shapes AgentV's schema gives a test's (or ``default_test``'s) fields."""
    for key, (kind, what) in _SHAPES.items():
        value = item.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise where.error((*loc, key), f"{key} is {what}")
    run = item.get("run") or {}
    where.unknown(run, _RUN_FIELDS, (*loc, "run"), "not a run field AgentV knows")
    for at, value in (
        (("run", "threshold"), run.get("threshold")),
        (("threshold",), item.get("threshold")),
    ):
        if value is not None and (_number(value) is None or not 0 <= value <= 1):
            raise where.error((*loc, *at), "threshold is a number from 0 to 1")
    options = item.get("options") or {}
    for at, value in (
        (("run", "repeat"), run.get("repeat")),
        (("options", "repeat"), options.get("repeat")),
    ):
        check_repeat(value, where, (*loc, *at))


_STRATEGIES = ("pass_any", "pass_all", "mean", "confidence_interval")


def check_repeat(value: Any, where: Where, loc: tuple[str, ...]) -> None:
    """A count from 1 to 100, or the earlier ``{count, strategy}`` (AgentV's strategies)."""
    if isinstance(value, dict):
        where.unknown(value, _REPEAT_FIELDS, loc, "not a repeat field")
        if value.get("strategy", "pass_any") not in _STRATEGIES:
            raise where.error((*loc, "strategy"), f"strategy is one of {', '.join(_STRATEGIES)}")
        value, loc = value.get("count"), (*loc, "count")
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100
    ):
        raise where.error(loc, "repeat is a whole number from 1 to 100")


def _threshold(item: dict[str, Any], execution: dict[str, Any], ctx: Context) -> float | None:
    run = item.get("run") if isinstance(item.get("run"), dict) else {}
    for value in (
        run.get("threshold"),
        execution.get("threshold"),
        item.get("threshold"),
        ctx.default_test.get("threshold"),
    ):
        if _number(value) is not None:
            return _number(value)
    return None


def _repeat(item: dict[str, Any], ctx: Context) -> tuple[int, str]:
    """How many runs, and how they add up (the earlier ``{count, strategy}`` form too)."""
    run = item.get("run") if isinstance(item.get("run"), dict) else {}
    options = item.get("options") if isinstance(item.get("options"), dict) else {}
    evaluate = ctx.data.get("evaluate_options")
    evaluate = evaluate if isinstance(evaluate, dict) else {}
    for value in (run.get("repeat"), options.get("repeat"), evaluate.get("repeat")):
        if isinstance(value, dict):
            return int(value["count"]), str(value.get("strategy") or "pass_any")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value, "pass_any"
    return _v4_trials(ctx)


# v4's trial strategies (trials.ts aggregateTrials): pass_at_k scores the best trial.
_V4_TRIALS = {"pass_at_k": "pass_any", "mean": "mean", "confidence_interval": "confidence_interval"}


def _v4_trials(ctx: Context) -> tuple[int, str]:
    """v4's ``execution.trials: {count, strategy, cost_limit_usd}`` (``extractTrialsConfig``):
    every test runs ``count`` times (``cost_limit_usd`` is not enforced, as ``budget_usd``)."""
    execution = ctx.data.get("execution")
    trials = execution.get("trials") if isinstance(execution, dict) else None
    if trials is None:
        return 1, "pass_any"
    loc = ("execution", "trials")
    count = trials.get("count") if isinstance(trials, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
        raise ctx.where.error((*loc, "count"), "trials.count is a whole number from 1 to 100")
    strategy = trials.get("strategy") or "pass_at_k"
    if strategy not in _V4_TRIALS:
        raise ctx.where.error(
            (*loc, "strategy"), "trials.strategy is pass_at_k, mean or confidence_interval"
        )
    return count, _V4_TRIALS[strategy]


def _test_transform(
    options: dict[str, Any], cwhere: Where, loc: tuple[str, ...], ctx: Context
) -> str | None:
    """A test's (or default_test's) ``options.transform``, its module found from the eval
    file's folder up (AgentV's searchRoots); run over the answer before every grader."""
    if options.get("transform") is None:
        return None
    roots = [cwhere.path.parent.resolve(), *ctx.roots]
    try:
        return parse_transform(options["transform"], roots)
    except ValueError as exc:
        raise cwhere.error((*loc, "options", "transform"), str(exc)) from None


_ONE_TARGET = (
    "a test-level provider: gradebox runs one target per run; move it to the file's providers"
)
_REFUSED_TEST_FIELDS = {
    "depends_on": "tests run independently here; put the dependency's steps in a before_each hook "
    "or the workspace template",
    "provider": _ONE_TARGET,
    "providers": _ONE_TARGET,
}


def build_test(
    item: Any,
    cwhere: Where,
    loc: tuple[str, ...],
    prompt: Any,
    ctx: Context,
    index: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One test in our ``TestCase`` form, and the step settings its environment asks for."""
    if not isinstance(item, dict):
        raise cwhere.error(loc, "a test must be a mapping")
    cwhere.unknown(item, TEST_KEYS, loc, "not a test field AgentV knows (check its spelling)")
    check_shapes(item, cwhere, loc)
    for key, why in _REFUSED_TEST_FIELDS.items():
        if item.get(key):
            raise cwhere.refuse((*loc, key), f"tests[].{key}", why)
    options = item.get("options") if isinstance(item.get("options"), dict) else {}
    transform = _test_transform(options, cwhere, loc, ctx)
    rubrics = item.get("rubrics")
    if rubrics is not None and not isinstance(rubrics, list):
        raise cwhere.error((*loc, "rubrics"), "rubrics is a list of rubric items")
    variables = dict(item.get("vars") or {}) if isinstance(item.get("vars"), dict) else {}
    test_id = render(item.get("id"), variables)
    if not isinstance(test_id, str) or not test_id.strip():
        test_id = f"test-{index + 1}"  # AgentV derives an id for rows that omit theirs
    case_dir = cwhere.path.parent.resolve()
    roots = [case_dir, *[r for r in ctx.roots if r != case_dir]]
    files: list[str] = []
    if prompt is not None:
        raw_input = render(prompt_input(prompt, ctx, ("prompts",)), variables)
        ikey = "vars"
    else:
        raw_input = item.get("input_messages", item.get("input", variables.get("input")))
        raw_input = render(raw_input, variables)
        ikey = "input_messages" if "input_messages" in item else "input"
    message_input = _messages(raw_input, "user", cwhere, roots, files, (*loc, ikey))
    execution = item.get("execution") if isinstance(item.get("execution"), dict) else {}
    # v4 skips the suite's defaults only for `true` (`=== true`); anything else but a boolean
    # is named, as its schema does: truth would take the text "no" for true.
    skip_defaults = execution.get("skip_defaults", False)
    if not isinstance(skip_defaults, bool):
        raise cwhere.error((*loc, "execution", "skip_defaults"), "skip_defaults is true or false")
    if ctx.data.get("input") is not None and prompt is None and not skip_defaults:
        message_input = _suite_input(message_input, variables, ctx, roots, files)
    expected = item.get(
        "expected_messages", item.get("expected_output", variables.get("expected_output"))
    )
    expected = _messages(
        render(expected, variables), "assistant", cwhere, roots, [], (*loc, "expected_output")
    )
    for i, rel in enumerate(render(item.get("input_files") or [], variables)):
        path = resolve_path(str(rel), roots)
        if path is None or not path.is_file():
            raise cwhere.error((*loc, "input_files", str(i)), f"input file {rel!r} not found")
        files.append(str(path))
    criteria = render(item.get("criteria", item.get("expected_outcome")), variables)
    asserts = list(item.get("assert", item.get("assertions")) or [])
    asserts += list(execution.get("evaluators") or execution.get("assert") or [])
    if not asserts:  # v4's deprecated spelling, read last (parseGraders)
        asserts = list(item.get("evaluators") or [])
    if rubrics:  # AgentV v4 (parseInlineRubrics): one rubric grader, before the others
        asserts = [{"type": "llm-rubric", "value": rubrics}, *asserts]
    suite_asserts = ctx.data.get("assert", ctx.data.get("assertions"))
    if (
        isinstance(criteria, str)
        and criteria.strip()
        and not asserts
        and not (suite_asserts and not skip_defaults)
    ):
        asserts = [criteria]  # AgentV: a test's bare criteria is its one rubric
    workspace, settings = None, {}
    if item.get("workspace") is not None:
        workspace = map_workspace(item["workspace"], cwhere, (*loc, "workspace"), case_dir, ctx.env)
    if item.get("environment") is not None:
        workspace, settings = map_environment(
            item["environment"], cwhere, (*loc, "environment"), case_dir, ctx.env, ctx.base
        )
    metadata = _merge_metadata(dict(item.get("metadata") or {}), ctx.suite_metadata)
    metadata = {**(ctx.default_test.get("metadata") or {}), **metadata}
    for key in ("description", "conversation_id"):
        if isinstance(item.get(key), str):
            metadata.setdefault(key, render(item[key], variables))
    if variables:
        metadata["vars"] = variables
    metadata.pop(TEST_TRANSFORM, None)  # only the test's options.transform runs
    if transform is not None:
        metadata[TEST_TRANSFORM] = transform
    checks = _render_checks(asserts, variables, cwhere, (*loc, "assert"))
    repeat, strategy = _repeat(item, ctx)  # the checks' mistakes are named first
    test: dict[str, Any] = {
        "id": test_id.strip(),
        "input": message_input,
        "expected_output": _as_expected(expected),
        "criteria": criteria if isinstance(criteria, str) else None,
        "metadata": metadata,
        "input_files": files,
        "assert": checks,
        "skip_defaults": skip_defaults,
        "threshold": _threshold(item, execution, ctx),
        "repeat": repeat,
        "repeat_strategy": strategy,
        "workspace": workspace,
    }
    if item.get("mode") == "conversation" or item.get("turns"):
        test["conversation"] = _conversation(item, variables, ctx, cwhere, roots, loc)
    return test, settings


def _blank_refs(value: Any, variables: dict[str, Any]) -> Iterator[str]:
    """The ``{{ name }}`` placeholders in ``value`` that render to nothing (missing, or an
    empty or blank value: ``\\b{{ answer }}\\b`` with ``answer: " "`` is ``\\b \\b``)."""
    if isinstance(value, str):
        for m in _VAR.finditer(value):
            found = None if m.group(1).startswith("env.") else _lookup(variables, m.group(1))
            blank = found is None or isinstance(found, str) and not found.strip()
            if not m.group(1).startswith("env.") and blank:
                yield m.group(1)
    elif isinstance(value, list | dict):
        for v in value.values() if isinstance(value, dict) else value:
            yield from _blank_refs(v, variables)


def _render_checks(
    asserts: list[Any], variables: dict[str, Any], where: Where, loc: tuple[str, ...]
) -> Any:
    """``render`` over a test's assertions, refusing a built-in check whose value names a
    variable that renders to nothing: ``regex: "\\b{{ answer }}\\b"`` would become ``\\b\\b``
    and ``contains: "Answer: {{ answer }}"`` ``Answer: ``, checks a wrong answer holds that
    the vacuity rules cannot tell from real ones."""
    for i, entry in enumerate(asserts):
        found = _blank_check(entry, variables, (*loc, str(i)))
        if found is not None:
            raise where.error(
                found[0],
                f"{{{{ {found[1]} }}}} renders to nothing (the test has "
                "no such var, or it is empty): the check would hold for answers "
                "it was written to fail",
            )
    return render(asserts, variables)


def _blank_check(
    entry: Any, variables: dict[str, Any], loc: tuple[str, ...]
) -> tuple[tuple[str, ...], str] | None:
    """Where (and which) var renders to nothing in a check decided on the host (a built-in,
    a trace check, v4's; see ``graders.trace.decided_on_host``), or in one inside a group."""
    if not isinstance(entry, dict):
        return None
    kind = str(entry.get("type", ""))
    if kind in ("composite", "assert-set"):
        for key in ("assertions", "assert", "evaluators"):
            children = entry.get(key)
            for j, child in enumerate(children if isinstance(children, list) else []):
                found = _blank_check(child, variables, (*loc, key, str(j)))
                if found is not None:
                    return found
        return None
    if not decided_on_host(kind):
        return None
    for key, value in entry.items():
        name = (
            None if key in ("name", "metric", "id") else next(_blank_refs(value, variables), None)
        )
        if name is not None:
            return (*loc, str(key)), name
    return None


def _suite_input(
    own: Any, variables: dict[str, Any], ctx: Context, roots: list[Path], files: list[str]
) -> Any:
    """AgentV v4's top-level ``input``: its messages before every test's own (``yaml-parser.ts``
    prepends them, rendered with the test's vars), unless the test skips the suite's defaults.
    Its files are found from the eval file's folder."""
    suite_roots = [ctx.base, *[r for r in roots if r != ctx.base]]
    first = _messages(
        render(ctx.data["input"], variables), "user", ctx.where, suite_roots, files, ("input",)
    )
    if isinstance(first, str):
        first = [{"role": "user", "content": first}]
    if own is None or own == "":
        return first
    if isinstance(own, str):
        own = [{"role": "user", "content": own}]
    return [*first, *own]


def _conversation(
    item: dict[str, Any],
    variables: dict[str, Any],
    ctx: Context,
    cwhere: Where,
    roots: list[Path],
    loc: tuple[str, ...],
) -> dict[str, Any]:
    turns = item.get("turns")
    if not isinstance(turns, list) or not turns:
        raise cwhere.error((*loc, "turns"), "mode: conversation needs turns")
    out = []
    for i, turn in enumerate(turns):
        tloc = (*loc, "turns", str(i))
        if not isinstance(turn, dict) or "input" not in turn:
            raise cwhere.error(tloc, "a turn is {input, expected_output?, assert?}")
        cwhere.unknown(turn, _TURN_FIELDS, tloc, "unknown field of a turn")
        text = render(turn["input"], variables)
        out.append(
            {
                "input": text
                if isinstance(text, str)
                else _messages(text, "user", cwhere, roots, [], (*tloc, "input")),
                "expected_output": _as_expected(render(turn.get("expected_output"), variables)),
                "assert": _render_checks(
                    list(turn.get("assert", turn.get("assertions")) or []),
                    variables,
                    cwhere,
                    (*loc, "turns", str(i), "assert"),
                ),
            }
        )
    settings = ("aggregation", "on_turn_failure", "window_size")
    return {"turns": out, **{k: item[k] for k in settings if item.get(k) is not None}}


def build_tests(
    cases: list[Case], prompts: list[Any], ctx: Context
) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any]]:
    """Every test, where each was written (for errors), and step settings (a Docker
    environment's image and limits) any of them asked for."""
    tests, origins, settings = [], [], {}
    index = 0
    for item, cwhere, loc in cases:
        item = _with_defaults(item, ctx.default_test) if isinstance(item, dict) else item
        if not isinstance(item, dict):
            raise cwhere.error(loc, "a test must be a mapping")
        for one, prompt in expand(item, prompts):
            test, asked = build_test(one, cwhere, loc, prompt, ctx, index)
            index += 1
            tests.append(test)
            origins.append((str(cwhere.path), cwhere.lines, loc))
            settings.update(asked)
    return tests, origins, settings


def read_cases_file(path: Path) -> list[Case]:
    """The raw cases a file holds, each with where it was written."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _jsonl_cases(path)
    if suffix == ".csv":
        return csv_cases(path)
    data, lines = load_yaml_file(path)
    items = data.get("tests") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ConfigError("a case file holds a list of tests", file=str(path))
    key = ("tests",) if isinstance(data, dict) else ()
    return [(item, Where(path, lines), (*key, str(i))) for i, item in enumerate(items)]


def _jsonl_cases(path: Path) -> list[Case]:
    cases: list[Case] = []
    try:
        text = untrusted.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path)) from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            deep = nesting_exceeds(item)  # the limit YAML files have
        except ValueError as exc:
            raise ConfigError(f"invalid JSON: {exc}", file=str(path), line=n) from None
        except RecursionError:  # deeper than json's own recursion goes
            deep = True
        if "\x00" in line or "\\u0000" in line:  # as YAML files: see _yaml
            raise ConfigError("refused: a value holds a NUL character", file=str(path), line=n)
        if deep:
            raise ConfigError(
                f"refused: nested more than {MAX_DEPTH} levels deep", file=str(path), line=n
            )
        cases.append((item, Where(path, Lines1(n)), ()))
    return cases
