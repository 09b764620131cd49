"""Graders with helper packages: a grader names the extra files or folders it reads (`files`,
or a folder its `env: PYTHONPATH` names under /grader), and they are mounted read-only where
its command sees them, on both isolated backends; AgentV's sdk-python example runs unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.images import ImageResolver
from gradebox.suite import load_suite
from tests.conftest import write
from tests.docker.test_agentv_run import _agentv_example, gradebox

pytestmark = pytest.mark.docker

CHECK = """import json, sys
from helperpkg.verdict import judge
payload = json.load(sys.stdin)
print(json.dumps(judge(payload["output"])))
"""
HELPER = """def judge(answer):
    ok = answer.strip() == "hi"
    return {"pass": ok, "score": 1.0 if ok else 0.0, "reason": "said hi" if ok else "did not"}
"""


def project(tmp_path: Path, assertion: str) -> Path:
    """proj/{src/helperpkg, scripts/check.py, evals/suite.yaml}: the suite's grader imports
    the helper package beside its scripts folder."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)  # the project folder's mark
    write(root / "src" / "helperpkg" / "__init__.py", "")
    write(root / "src" / "helperpkg" / "verdict.py", HELPER)
    write(root / "scripts" / "check.py", CHECK)
    return write(
        root / "evals" / "suite.yaml",
        "tests:\n"
        f"  - {{id: good, output: hi, assert: [{assertion}]}}\n"
        f"  - {{id: bad, output: bye, assert: [{assertion}]}}\n",
    )


@pytest.mark.parametrize(
    "assertion",
    [
        "{type: script, command: [python3, ../scripts/check.py], files: [../src], "
        "env: {PYTHONPATH: /grader-up1/src}}",
        # the path the grader imports from names the folder by itself
        "{type: script, command: [python3, ../scripts/check.py], "
        "env: {PYTHONPATH: /grader-up1/src}}",
    ],
    ids=["files", "pythonpath"],
)
def test_a_helper_package_is_imported_in_the_sandbox(tmp_path, sandbox, engine, assertion):
    suite = load_suite(project(tmp_path, assertion))
    run_suite(suite, sandbox, ImageResolver(engine), RunOptions(tmp_path / "out", workers=2))
    results = read_results(tmp_path / "out" / "results.jsonl")
    good, bad = results["good"], results["bad"]
    assert good.status.value == "passed", good.graders[0].evidence
    # the control: the same grader, a wrong answer: failed (a verdict), not an error
    assert bad.status.value == "failed", bad.graders[0].evidence
    assert "did not" in bad.graders[0].evidence


def test_a_helper_folder_is_read_only_and_alone(tmp_path, sandbox, engine):
    probe = """import json, os, sys
json.load(sys.stdin)
try:
    open("/grader-up1/src/helperpkg/new.py", "w")
    wrote = True
except OSError:
    wrote = False
seen = sorted(os.listdir("/grader-up1"))
read = os.path.isfile("/grader-up1/src/helperpkg/verdict.py")
ok = read and not wrote and "secret.txt" not in seen and ".git" not in seen
print(json.dumps({"pass": ok, "reason": f"{seen} read={read} wrote={wrote}"}))
"""
    path = project(tmp_path, "{type: script, command: [python3, ../scripts/check.py], "
                   "files: [../src]}")  # fmt: skip
    write(path.parent.parent / "scripts" / "check.py", probe)
    write(path.parent.parent / "secret.txt", "not for graders")
    suite = load_suite(path)
    run_suite(suite, sandbox, ImageResolver(engine), RunOptions(tmp_path / "out", workers=2))
    result = read_results(tmp_path / "out" / "results.jsonl")["good"]
    assert result.status.value == "passed", result.graders[0].evidence


def test_agentv_sdk_python_example_runs_unchanged(tmp_path, agentv_checkout):
    # `uv run python ../scripts/check_expected_output.py` in a project with src/agentv_py:
    # AgentV's uv makes the package importable; here PYTHONPATH does, and src/ is mounted.
    example = _agentv_example(agentv_checkout, tmp_path, "sdk-python")
    p = gradebox("run", "evals/suite.yaml", "--out", tmp_path / "o", "--json", cwd=example)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["summary"]["passed"] == 1
    # the control: an answer that differs from the expected one fails, it is no error
    cases = example / "evals" / "cases.jsonl"
    cases.write_text(cases.read_text().replace('"content":"AgentV Python helper says hi."}]}',
                                               '"content":"Something else."}]}'))  # fmt: skip
    p = gradebox("run", "evals/suite.yaml", "--out", tmp_path / "o2", "--json", cwd=example)
    assert p.returncode == 1, p.stdout + p.stderr
    assert json.loads(p.stdout)["summary"]["failed"] == 1
    shutil.rmtree(example / "src")  # without its package it is an error, never a pass
    p = gradebox("run", "evals/suite.yaml", "--out", tmp_path / "o3", "--json", cwd=example)
    assert p.returncode == 3, p.stdout + p.stderr
