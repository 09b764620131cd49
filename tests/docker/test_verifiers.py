"""Test-file verifiers on real containers: pytest and node --test, verdicts per test case, and
every trick an agent can plant to make a naive pytest run pass a failing solution."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.graders.config import ScriptGrader, grader_from_data
from gradebox.graders.run import run_grader
from gradebox.graders.verifier import node_test_grader_data, pytest_grader_data
from gradebox.protocol.models import Payload
from tests.conftest import write

pytestmark = pytest.mark.docker
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verifiers"
FIXED = "def add(a, b):\n    return a + b\n"

EVIL_HOOK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
PLUGIN_ENV = 'import os; os.environ["PYTEST_PLUGINS"] = "evil_plugin"\n'
TRICKS = {
    "conftest": {"conftest.py": EVIL_HOOK},
    "pytest-ini-addopts": {
        "pytest.ini": "[pytest]\naddopts = -p evil_plugin\n",
        "evil_plugin.py": EVIL_HOOK,
    },
    "pyproject-addopts": {
        "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p evil_plugin"\n',
        "evil_plugin.py": EVIL_HOOK,
    },
    "ini-pythonpath-shadow": {
        "pytest.ini": "[pytest]\npythonpath = shadow\n",
        "shadow/calc.py": FIXED,
    },
    "pytest-module-shadow": {"pytest.py": "import sys\nprint('3 passed')\nsys.exit(0)\n"},
    "sitecustomize": {"sitecustomize.py": PLUGIN_ENV, "evil_plugin.py": EVIL_HOOK},
    "pth-in-user-site": {
        ".local/lib/python3.11/site-packages/evil.pth": PLUGIN_ENV,
        "evil_plugin.py": EVIL_HOOK,
    },
}
# How an unguarded harness often runs a hidden test: in the workspace, with it on the path.
NAIVE = (
    'mkdir -p tests && cp "$1" tests/ && '
    "PYTHONPATH=. HOME=/workspace python3 -m pytest -q -p no:cacheprovider tests/test_calc.py"
)


def _workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(FIXTURE / "project", ws)
    for rel, body in files.items():
        write(ws / rel, body)
    return ws


def _verifier(body: dict, template: Path | None = None):
    data = pytest_grader_data(body, FIXTURE, template)
    return grader_from_data(data, file="t", source_dir=FIXTURE)


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_a_naive_run_is_fooled_and_ours_is_not(tmp_path, box, trick):
    ws = _workspace(tmp_path, TRICKS[trick])
    naive = ScriptGrader(
        command=["sh", "-c", NAIVE, "sh", "verifiers/test_calc.py"], workspace="rw"
    ).with_source(FIXTURE)
    fooled = run_grader(naive, Payload(), ws, box)
    assert fooled.passed, (trick, fooled.stdout_tail, fooled.stderr_tail)
    ours = run_grader(
        _verifier({"files": ["verifiers/test_calc.py"], "dest": "tests"}), Payload(), ws, box
    )
    # add(0, 0) == 0 holds even with the bug: 1 of 3, as without any trick.
    assert ours.status.value == "failed" and ours.score == pytest.approx(1 / 3), ours.evidence
    assert ours.warnings, trick  # every planted file is reported
    assert "assert -1 == 5" in ours.checks[0].evidence or "assert" in ours.checks[0].evidence


def test_pass_fail_names_the_assertion_and_the_verifier_is_invisible_to_the_host_copy(
    tmp_path, box
):
    ws = _workspace(tmp_path, {})
    grader = _verifier({"files": ["verifiers/test_calc.py"]})
    failed = run_grader(grader, Payload(), ws, box)
    assert failed.status.value == "failed" and failed.score == pytest.approx(1 / 3)
    small = next(c for c in failed.checks if c.text.endswith("test_small"))
    assert not small.passed and "assert -1 == 5" in small.evidence
    assert not (ws / "verifiers").exists()  # a private copy: the workspace is untouched
    write(ws / "calc.py", FIXED)
    passed = run_grader(grader, Payload(), ws, box)
    assert passed.passed and passed.score == 1.0 and len(passed.checks) == 3
    assert not passed.warnings


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ("def test_nothing_here(): pass\n", "passed", "1/1"),
        (
            "import pytest\n\n@pytest.mark.skip(reason='later')\ndef test_x():\n    assert 0\n",
            "failed",
            "skipped",
        ),
        ("X = 1\n", "error", "collected no tests"),
        ("from calc import nope\n\ndef test_x():\n    pass\n", "error", "collection error"),
        (
            "import pytest\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError('boom')\n\n"
            "def test_x(broken):\n    pass\n",
            "failed",
            "boom",
        ),
    ],
)
def test_skip_error_and_empty_collections(tmp_path, box, body, status, words):
    suite_dir = tmp_path / "suite"
    write(suite_dir / "v" / "test_v.py", body)
    ws = _workspace(tmp_path, {})
    data = pytest_grader_data({"files": ["v/test_v.py"]}, suite_dir, None)
    result = run_grader(grader_from_data(data, file="t", source_dir=suite_dir), Payload(), ws, box)
    assert result.status.value == status, (result.evidence, result.stderr_tail)
    assert words in result.evidence + " ".join(c.evidence or "" for c in result.checks)


def test_node_test_verifier(tmp_path, box):
    ws = _workspace(tmp_path, {})
    data = node_test_grader_data({"files": ["verifiers/calc.test.mjs"]}, FIXTURE)
    grader = grader_from_data(data, file="t", source_dir=FIXTURE)
    failed = run_grader(grader, Payload(), ws, box)
    assert failed.status.value == "failed" and failed.score == 0.5, failed.stdout_tail
    small = next(c for c in failed.checks if c.text == "small")
    assert not small.passed and "5" in (small.evidence or ""), small
    write(ws / "calc.mjs", "export const add = (a, b) => a + b;\n")
    assert run_grader(grader, Payload(), ws, box).passed


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    import subprocess

    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
    )


def test_the_verifier_is_invisible_to_the_target(tmp_path):
    import json

    p = _cli("run", FIXTURE / "suite.yaml", "--out", tmp_path / "o", "--json", "-k", "hidden")
    assert json.loads(p.stdout)["summary"]["passed"] == 1, p.stdout + p.stderr


def test_validate_refs_catches_a_grader_that_fails_its_reference(tmp_path):
    import json

    p = _cli("validate-refs", FIXTURE / "suite.yaml", "--json")
    report = json.loads(p.stdout)
    assert p.returncode == 1, p.stderr
    assert report["checked"] == 3 and report["without_reference"] == 1
    assert [b["id"] for b in report["failing"]] == ["grader-bug"]
    assert "Fixed subtract" in report["failing"][0]["graders"][0]


def test_every_declared_test_is_found_however_the_report_names_it(tmp_path, box):
    """Parametrised cases, classes (nested), skips: each test the file declares is in the
    report, so nothing is missing and a skip is a plain failure, never an error."""
    suite_dir = tmp_path / "suite"
    write(
        suite_dir / "v" / "test_v.py",
        "import pytest\nfrom calc import add\n\n\n@pytest.mark.parametrize('a', [1, 2])\n"
        "def test_p(a):\n    assert add(a, 0) == a\n\n\nclass TestCalc:\n"
        "    def test_m(self):\n        assert add(0, 0) == 0\n\n    class TestInner:\n"
        "        def test_deep(self):\n            assert True\n\n\n"
        "@pytest.mark.skip(reason='later')\ndef test_later():\n    pass\n",
    )
    ws = _workspace(tmp_path, {})
    data = pytest_grader_data({"files": ["v/test_v.py"], "dest": "tests/unit"}, suite_dir, None)
    r = run_grader(grader_from_data(data, file="t", source_dir=suite_dir), Payload(), ws, box)
    assert r.status.value == "failed" and r.score == pytest.approx(4 / 5), r.evidence
    assert not [c for c in r.checks if "never reported" in (c.evidence or "")], r.checks


def test_a_node_verifier_with_skips_todos_and_built_names_is_judged_not_refused(tmp_path, box):
    suite_dir = tmp_path / "suite"
    write(
        suite_dir / "v" / "calc.test.mjs",
        'import { test, describe } from "node:test";\nimport assert from "node:assert/strict";\n'
        'import { add } from "../calc.mjs";\n\n'
        "for (const n of [1, 2]) test(`adds ${n}`, () => assert.equal(add(n, 0), n));\n"
        'test.todo("later");\ndescribe.skip("not yet", () => { test("inner", () => {}); });\n',
    )
    ws = _workspace(tmp_path, {})
    data = node_test_grader_data({"files": ["v/calc.test.mjs"]}, suite_dir)
    r = run_grader(grader_from_data(data, file="t", source_dir=suite_dir), Payload(), ws, box)
    # adds 1, adds 2 pass; the todo, the skipped suite and its unreported test do not.
    assert r.status.value == "failed", (r.evidence, r.stdout_tail)
    assert [(c.text, c.passed) for c in r.checks] == [
        ("adds 1", True), ("adds 2", True), ("later", False), ("not yet", False),
        ("inner", False),
    ]  # fmt: skip
