"""Test-file verifiers: hidden test files (next to the suite, never visible to the target) run
against the agent's workspace after it has finished, each test case one check.

Both types run through the verifier runner ``gradebox.verify`` (see that module for what it
keeps the agent's files from doing): ``type: pytest`` in the python image, ``type: node-test``
(``node --test`` with our reporter) in the node image, on a private writable copy of the
workspace, with only the verifier's own files mounted. The runner's report is its last line of
stdout, parsed here, on the host: JUnit XML for pytest, JSON lines for node. Score = passed /
total; a skipped (or todo) test counts as not passed. An ``error``, never a pass: collection
errors, zero tests, an exit code other than 0 or 1 or one that disagrees with the report, a
test file that ends before its tests, a report that lacks a test the verifier declares while
everything it holds passed (with a failure, each missing test is one failed check more).

Example::

    assert:
      - type: pytest
        files: [verifiers/test_calc.py]     # relative to the suite; copied to the same path
      - type: node-test
        files: [verifiers/calc.test.mjs]
"""

from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from ..core import untrusted
from ..core.pathnames import is_dir, is_file
from ..protocol.models import Check, GraderResult, Status
from .transcript import listed

__all__ = ["judge_junit", "judge_node", "node_test_grader_data", "pytest_grader_data"]

# The verifier runner in the python and node images, isolated from the workspace it starts in.
RUNNER = ["python3", "-I", "-m", "gradebox.verify"]

# Template files whose bytes the verifier runner compares (planted or changed ones are reported).
_WATCHED = {"pytest.py", "py.py", "sitecustomize.py", "usercustomize.py", "pytest.ini",
                 "pyproject.toml", "tox.ini", "setup.cfg"}  # fmt: skip


def _hash(path: Path) -> str:
    return hashlib.sha256(untrusted.read_file(path, 1 << 30)).hexdigest()


def _files(body: dict[str, Any], suite_dir: Path) -> list[str]:
    files = body.get("files")
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise ValueError("files: a list of test files, relative to the suite")
    for f in files:
        if not is_file(suite_dir / f):
            raise ValueError(f"verifier file {f!r} not found next to the suite")
    return files


def pytest_grader_data(
    body: dict[str, Any], suite_dir: Path, template: Path | None
) -> dict[str, Any]:
    """The script grader that runs a pytest verifier (validated by the caller)."""
    files = _files(body, suite_dir)
    dest = body.get("dest")
    allowed, template_files = [], {}
    if template is not None and is_dir(template):
        for path in template.rglob("*"):
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(template).as_posix()
            if path.name == "conftest.py":
                allowed.append(_hash(path))
            if path.name in _WATCHED or path.suffix == ".pth":
                template_files[rel] = _hash(path)
    sources: list[str] = []
    dests: list[str] = []
    for f in files:
        rel = Path(f)
        base = Path(dest) if dest else rel.parent
        sources.append(f)
        dests.append((base / rel.name).as_posix())
        conftest = (rel.parent / "conftest.py").as_posix()
        if is_file(suite_dir / conftest) and conftest not in sources:
            allowed.append(_hash(suite_dir / conftest))  # the verifier folder's own conftest
            sources.append(conftest)
            dests.append((base / "conftest.py").as_posix())
    spec = {
        "dests": dests,
        "allowed": sorted(set(allowed)),
        "template": template_files,
        "args": [str(a) for a in body.get("args", [])],
    }
    return {
        "type": "script",
        "dialect": "pytest",
        "workspace": "rw",
        "command": [*RUNNER, json.dumps(spec), *sources],
        "timeout": body.get("timeout", "300s"),
        "name": body.get("name", "pytest"),
        **{k: body[k] for k in ("image", "limits", "env") if k in body},
    }


def node_test_grader_data(body: dict[str, Any], suite_dir: Path) -> dict[str, Any]:
    """The script grader that runs a node-test verifier through the same runner, in the node
    image, with our own reporter in place of TAP (validated by the caller)."""
    files = _files(body, suite_dir)
    dest = body.get("dest")
    dests = [((Path(dest) / Path(f).name) if dest else Path(f)).as_posix() for f in files]
    spec = {"runner": "node", "dests": dests}
    return {
        "type": "script",
        "dialect": "node-test",
        "workspace": "rw",
        "image": body.get("image", "node"),
        "command": [*RUNNER, json.dumps(spec), *files],
        "env": body.get("env", {}),
        "timeout": body.get("timeout", "300s"),
        "name": body.get("name", "node-test"),
        **{k: body[k] for k in ("limits",) if k in body},
    }


_TOOLS = {"pytest": "pytest", "node-test": "node --test"}


class _NoVerdict(Exception):
    """Why the runner's report gives no verdict: the result is an ``error`` saying so."""


def judge_junit(name: str, stdout: str, common: dict[str, Any]) -> GraderResult:
    """The runner's line for pytest: JUnit XML parsed here (``_junit``)."""
    return _judged(name, "pytest", stdout, common, _junit)


def judge_node(name: str, stdout: str, common: dict[str, Any]) -> GraderResult:
    """The runner's line for ``node --test`` (``_node``)."""
    return _judged(name, "node-test", stdout, common, _node)


def _judged(
    name: str,
    kind: Literal["pytest", "node-test"],
    stdout: str,
    common: dict[str, Any],
    read: Callable[[dict[str, Any]], tuple[list[Check], int, list[str]]],
) -> GraderResult:
    """The runner's report read (``read``: its checks, failures and the declared tests it
    lacks) into the verdict; an ``error`` that says why when it gives none."""
    try:
        data = _runner_line(stdout, kind)
        return _finish(name, kind, *read(data), data, common)
    except _NoVerdict as exc:
        return GraderResult.errored(name, kind, str(exc), **common)


def _runner_line(stdout: str, kind: str) -> dict[str, Any]:
    """The runner's report: the last line of stdout (it prints it last, after a newline of its
    own, once every other process in the container is dead), whole and not empty."""
    last = stdout.rstrip().rpartition("\n")[2].strip()
    try:
        data = json.loads(last) if last else None
    except (ValueError, RecursionError) as exc:
        raise _NoVerdict(f"the verifier runner's last line is not its report ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("report"), str):
        raise _NoVerdict("the verifier runner gave no report (its last line is not its report)")
    code = data.get("exit_code")
    if not isinstance(code, int) or isinstance(code, bool):
        raise _NoVerdict("the verifier runner's report has no exit code")
    if data.get("truncated"):
        raise _NoVerdict("the test report exceeded its size cap")
    if not data["report"].strip():
        raise _NoVerdict(f"{_TOOLS[kind]} wrote no report (exit {code}): {_tail(data)}")
    return data


def _strings(data: dict[str, Any], key: str) -> list[str]:
    value = data.get(key)
    return [str(v) for v in value][:10_000] if isinstance(value, list) else []


def _tail(data: dict[str, Any]) -> str:
    lines = str(data.get("output") or "").strip().splitlines()
    return lines[-1][:500] if lines else "no output"


def _finish(
    name: str,
    kind: str,
    checks: list[Check],
    failures: int,
    missing: list[str],
    data: dict[str, Any],
    common: dict[str, Any],
) -> GraderResult:
    """The verdict over the reported tests, held against the runner's exit code and against
    the tests the verifier declares: an inconsistent or incomplete report is never a pass."""
    code, tool = data["exit_code"], _TOOLS[kind]
    warnings = _strings(data, "tampered")[:100]
    if code not in (0, 1):
        if kind == "pytest" and code == 5 and not checks:
            raise _NoVerdict("the verifier collected no tests")
        raise _NoVerdict(f"{tool} ended with exit code {code}: {_tail(data)}")
    if (code == 1) != bool(failures):
        shows = f"{failures} failed test(s)" if failures else "no failed test"
        raise _NoVerdict(
            f"{tool} exited with code {code}, yet its report shows {shows}: the report is not "
            "trusted"
        )
    if missing and all(c.passed for c in checks):
        why = f"the report lacks {len(missing)} test(s) the verifier declares ({listed(missing)})"
        raise _NoVerdict(f"{why}: the run ended early or was changed")
    checks = checks + [
        Check(text=m[:500], passed=False, evidence="declared by the verifier, never reported")
        for m in missing
    ]
    total = len(checks)
    if total == 0:
        raise _NoVerdict("the verifier collected no tests")
    passed_n = sum(c.passed for c in checks)
    ok = passed_n == total
    failed = [c for c in checks if not c.passed]
    evidence = f"{passed_n}/{total} tests passed"
    if failed:
        evidence += f"; first failure: {failed[0].text}: {failed[0].evidence or ''}".rstrip(": ")
    if warnings:
        evidence += f"; agent tampering neutralised: {len(warnings)} file(s)"
    if ok:  # what the test run printed explains failures; on a pass it is only noise
        common = {**common, "stdout_tail": None, "stderr_tail": None}
    return GraderResult(
        name=name,
        type=kind,
        status=Status.passed if ok else Status.failed,
        passed=ok,
        score=passed_n / total,
        evidence=evidence[:4000],
        checks=checks,
        warnings=warnings,
        **common,
    )


def _junit(data: dict[str, Any]) -> tuple[list[Check], int, list[str]]:
    """pytest's JUnit XML report. Untrusted: no DTD accepted."""
    xml = data["report"]
    if re.search(r"<!DOCTYPE|<!ENTITY", xml, re.I):
        raise _NoVerdict("the JUnit report declares a DTD: refused")
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise _NoVerdict(f"the JUnit report does not parse: {exc}") from None
    checks, cases, failures = [], [], 0
    for case in root.iter("testcase"):
        classname, test = case.get("classname", ""), case.get("name", "")
        label = f"{classname}::{test}".strip(":")
        cases.append((classname, test.partition("[")[0]))
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skipped = case.find("skipped")
        if bad is not None:
            message = (bad.get("message") or "").strip() or (bad.text or "").strip()
            if "collection failure" in message or test == "":
                raise _NoVerdict(f"collection error: {label}: {message[:500]}")
            failures += 1
            checks.append(Check(text=label[:500], passed=False, evidence=message[:2000]))
        elif skipped is not None:
            reason = (skipped.get("message") or "").strip()
            checks.append(Check(text=label[:500], passed=False, evidence=f"skipped: {reason}"))
        else:
            checks.append(Check(text=label[:500], passed=True))
    return checks, failures, _missing_pytest(_strings(data, "declared"), cases)


def _missing_pytest(declared: list[str], cases: list[tuple[str, str]]) -> list[str]:
    """Declared tests (``test_x``, ``TestA.TestB::test_y``) no test case of the report is."""
    owners: dict[str, list[str]] = {}
    for classname, base in cases:
        owners.setdefault(base, []).append(classname)
    missing = []
    for name in dict.fromkeys(declared):
        owner, _, function = name.rpartition("::")
        found = owners.get(function, [])
        if not any(not owner or c == owner or c.endswith(f".{owner}") for c in found):
            missing.append(name)
    return missing


def _node(data: dict[str, Any]) -> tuple[list[Check], int, list[str]]:
    """Our ``node --test`` reporter's report: one JSON object per finished test or suite. A
    suite is a check only when it failed by itself (a hook, its body) or was skipped; a test
    file that reports itself as passing ran no test at all."""
    files = set(_strings(data, "files"))
    checks, seen, failures = [], set(), 0
    for line in data["report"].splitlines()[:100_000]:
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict):
            raise _NoVerdict("the test report does not parse")
        label = str(event.get("name") or "")[:500]
        seen.add(label)
        passed, skipped = event.get("passed") is True, bool(event.get("skip") or event.get("todo"))
        error = str(event.get("error") or "")[:2000] or None
        if label in files and not event.get("suite") and event.get("nesting") == 0:
            if passed:
                raise _NoVerdict(
                    f"the test file {label} ran no test (it ended before its tests ran)"
                )
            failures += 1
            checks.append(Check(text=label, passed=False, evidence=error))
            continue
        by_itself = not passed and event.get("failure") != "subtestsFailed"
        if event.get("suite") and not skipped and not by_itself:
            continue  # its tests are the checks
        if skipped:
            checks.append(Check(text=label, passed=False, evidence="skipped"))
        else:
            failures += 0 if passed else 1
            checks.append(Check(text=label, passed=passed, evidence=None if passed else error))
    missing = [n for n in dict.fromkeys(_strings(data, "declared")) if n not in seen]
    return checks, failures, missing
