"""CSV datasets (``tests: [file://cases.csv]``), read as AgentV reads them (its
``case-file-loader.ts``, promptfoo's shape): one test per row; ``id``, ``input``; ``vars.a.b`` or
any other column is a var; ``__expected`` (``__expected2``...) is an assertion written as
``type(threshold):value`` (``contains:x``, ``not-icontains:y``, ``llm-rubric:...``,
``grade:...``, ``python:file.py``, ``file://check.py``; anything else is an ``equals``);
``__prefix``/``__suffix`` wrap the input, ``__description`` is the criteria, ``__metric`` names
the assertions, ``__threshold`` is the test's threshold, ``__metadata:key`` (``key[]`` splits on
commas) and ``__config:__expectedN:threshold`` set the rest.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from ...core.yamlfile import MAX_DEPTH
from ...errors import ConfigError
from ...graders.builtin import BUILTINS, LIST_VALUED
from ._base import Case, Lines1, Where, csv_rows

__all__ = ["csv_cases", "expected_assertion"]

# Every built-in check, and the others a cell may name.
_SUPPORTED = {*BUILTINS, "latency", "cost", "llm-rubric", "skill-used"}
# Columns that are a test's own field.
_COLUMNS = {"id": "id", "input": "input", "__description": "criteria"}
_SHAPE = re.compile(r"^((?:not-)?[a-z][a-z0-9-]*)(?:\((\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$")


def expected_assertion(text: str, source: Path, where: Where) -> dict[str, Any]:
    """One ``__expected`` cell as an assertion entry."""
    for prefix in ("grade:", "llm-rubric:"):
        if text.startswith(prefix):
            return {"type": "llm-rubric", "value": text.removeprefix(prefix).strip()}
    if text.startswith(("javascript:", "fn:", "eval:")):
        raise where.refuse(
            (),
            "inline JavaScript assertions",
            "gradebox runs no code inside its own process; write it as a script grader "
            "(__expected: python:check.py)",
        )
    if text.startswith(("python:", "file://")):
        script = text.split(":", 1)[1].removeprefix("//").strip()
        if not script.endswith(".py"):
            raise where.error((), f"only python scripts are __expected files: {text!r}")
        path = (source.parent / script).resolve()
        return {"type": "script", "command": ["python3", str(path)]}
    m = _SHAPE.match(text)
    if not m:
        return {"type": "equals", "value": text}
    raw_type, threshold, value = m.group(1), m.group(2), m.group(3)
    kind = raw_type.removeprefix("not-")
    if kind not in _SUPPORTED:
        if value is not None or threshold is not None:
            raise where.error((), f"unknown __expected assertion {kind!r}")
        return {"type": "equals", "value": text}
    entry: dict[str, Any] = {"type": kind}
    if raw_type.startswith("not-"):
        entry["negate"] = True
    value = value.strip() if value is not None else None
    if kind in LIST_VALUED:
        entry["value"] = [v.strip() for v in value.split(",")] if value else []
    elif value is not None:
        entry["value"] = value
    if threshold is not None:
        limit = float(threshold)
        if kind == "latency":
            entry["threshold"] = limit
        elif kind == "cost":
            entry["budget"] = limit
        else:
            entry["min_score"] = limit
    return entry


def _set_var(variables: dict[str, Any], key: str, value: str) -> None:
    if not key.startswith("vars."):
        variables[key] = value
        return
    path = [p.strip() for p in key.removeprefix("vars.").split(".") if p.strip()]
    if not path:
        variables[key] = value
        return
    here = variables
    for part in path[:-1]:
        if not isinstance(here.get(part), dict):
            here[part] = {}
        here = here[part]
    here[path[-1]] = value


def csv_cases(path: Path) -> list[Case]:
    out: list[Case] = []
    for index, (line, row) in enumerate(csv_rows(path)):
        where = Where(path, Lines1(line))
        case: dict[str, Any] = {}
        variables: dict[str, Any] = {}
        metadata: dict[str, Any] = {}
        asserts: list[dict[str, Any]] = []
        configs: dict[int, float] = {}
        for key, value in row.items():
            if key in _COLUMNS:
                case[_COLUMNS[key]] = value
            elif key.startswith("__expected"):
                if value.strip():
                    asserts.append(expected_assertion(value.strip(), path, where))
            elif key in ("__prefix", "__suffix", "__metric"):
                continue  # read below
            elif key == "__threshold":
                with contextlib.suppress(ValueError):
                    case["threshold"] = float(value)
            elif key.startswith("__metadata:"):
                name = key.removeprefix("__metadata:")
                if value.strip():
                    if name.endswith("[]"):
                        items = re.split(r"(?<!\\),", value)
                        metadata[name[:-2]] = [
                            i.strip().replace("\\,", ",") for i in items if i.strip()
                        ]
                    else:
                        metadata[name] = value
            elif key.startswith("__config:"):
                configs.update(_config_column(key, value, path))
            elif key.startswith("__provider_output") or key == "__providerOutput":
                raise where.error(
                    (),
                    f"{key} was removed from AgentV's CSV imports; use a "
                    "mock or replay provider for fixed answers",
                )
            elif key:
                if key.count(".") > MAX_DEPTH:  # the limit YAML files have
                    raise where.error(
                        (),
                        f"refused: the column {key[:40]}... nests more than "
                        f"{MAX_DEPTH} levels deep",
                    )
                _set_var(variables, key, value)
        if "input" in case:
            case["input"] = f"{row.get('__prefix', '')}{case['input']}{row.get('__suffix', '')}"
        metric = row.get("__metric")
        for i, entry in enumerate(asserts):
            if metric:
                entry["metric"] = metric if len(asserts) == 1 else f"{metric}-{i + 1}"
            if i in configs:
                entry["min_score"] = configs[i]
        if not case.setdefault("id", "").strip():
            case["id"] = f"row-{index + 1}"
        for key, found in (("assert", asserts), ("vars", variables), ("metadata", metadata)):
            if found:
                case[key] = found
        out.append((case, where, ()))
    return out


def _config_column(key: str, value: str, path: Path) -> dict[int, float]:
    expected, _, name = key.removeprefix("__config:").partition(":")
    if name != "threshold":
        raise ConfigError(f"invalid config key {name!r} in a __config column", file=str(path))
    if expected == "__expected":
        index = 0
    elif re.fullmatch(r"__expected\d+", expected):
        index = int(expected.removeprefix("__expected")) - 1
    else:
        raise ConfigError(f"invalid __config column {key!r}", file=str(path))
    try:
        return {index: float(value)}
    except ValueError:
        raise ConfigError(f"{key}: {value!r} is not a number", file=str(path)) from None
