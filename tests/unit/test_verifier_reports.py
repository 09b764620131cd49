"""Verifier reports and grader files, without a container: what the verifier runner's line
says must be a whole, consistent report of every test the verifier declares before anything
passes; a grader's container gets only the files its command names, inside its project."""

import json
import os

import pytest

from gradebox.errors import ConfigError
from gradebox.graders.config import load_grader
from gradebox.graders.run import check_grader_files, grader_file, source_mounts, translate_args
from gradebox.graders.verifier import judge_junit, judge_node
from gradebox.protocol.models import Status
from gradebox.sdk.verify import declared_node_tests, declared_pytest_tests
from tests.conftest import write

COMMON = {"stdout_tail": "out", "stderr_tail": "err"}


def _case(name: str, failure: str | None = None, classname: str = "tests.test_calc") -> str:
    body = f'<failure message="{failure}">x</failure>' if failure else ""
    return f'<testcase classname="{classname}" name="{name}">{body}</testcase>'


def _junit(*cases: str) -> str:
    return f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>"


def _line(report: str, code: int, declared=(), runner="pytest", **more) -> str:
    return json.dumps({"runner": runner, "exit_code": code, "report": report,
                       "declared": list(declared), "tampered": [], "output": "tail",
                       **more})  # fmt: skip


def _pytest(report: str, code: int, declared=(), before: str = "") -> object:
    return judge_junit("v", before + "\n" + _line(report, code, declared) + "\n", dict(COMMON))


# --- what the verifier files declare ---------------------------------------------------------


def test_the_tests_a_pytest_file_declares():
    source = (
        "import pytest\n\ndef test_a(): pass\nasync def test_b(): pass\ndef helper(): pass\n"
        "class TestX:\n    def test_m(self): pass\n    def other(self): pass\n"
        "    class TestInner:\n        def test_deep(self): pass\n"
        "class TestWithInit:\n    def __init__(self): pass\n    def test_no(self): pass\n"
        "class TestOff:\n    __test__ = False\n    def test_no(self): pass\n"
        "class Helper:\n    def test_no(self): pass\n"
        "def outer():\n    def test_nested(): pass\n"
    )
    assert declared_pytest_tests(source) == [
        "test_a", "test_b", "TestX::test_m", "TestX.TestInner::test_deep",
    ]  # fmt: skip
    assert declared_pytest_tests("def test_x(:\n") == []  # pytest reports that itself


def test_the_tests_a_node_file_declares():
    source = """import { test, describe, it } from "node:test";
// test("in a comment") is no test
/* describe('nor here') */
const url = "http://x/y"; const s = 'test("in a string")';
const re = /"quoted'/g; const ratio = 4 / 2;
describe("add", () => {
  test('small', () => {});
  it(`zero`, () => {});
  test.skip("later", () => {});
  test(`dynamic ${n}`, () => {});
  test("esc\\"aped", () => {});
  t.test("subtest", () => {});
  describe.todo(  "spaced"  , () => {});
});
"""
    assert declared_node_tests(source) == ["add", "small", "zero", "later", "spaced"]


# --- the pytest report ---------------------------------------------------------------------


def test_an_all_pass_report_passes_and_keeps_no_tails():
    r = _pytest(_junit(_case("test_a"), _case("test_m", classname="t.TestX")), 0,
                ["test_a", "TestX::test_m"])  # fmt: skip
    assert r.status is Status.passed and r.score == 1.0
    assert r.stdout_tail is None and r.stderr_tail is None  # nothing the run printed is kept


def test_a_non_zero_exit_is_never_a_pass():
    for code in (1, 2, 3, 4, 5, -9, 137):
        r = _pytest(_junit(_case("test_a")), code, ["test_a"])
        assert r.status is Status.error and not r.passed, (code, r.evidence)
    r = _pytest(_junit(_case("test_a")), 1, ["test_a"])
    assert "exited with code 1, yet its report shows no failed test" in r.evidence
    control = _pytest(_junit(_case("test_a", "assert -1 == 5")), 1, ["test_a"])
    assert control.status is Status.failed and control.stderr_tail == "err"


def test_an_exit_0_with_a_failure_in_the_report_is_an_error():
    r = _pytest(_junit(_case("test_a", "boom")), 0, ["test_a"])
    assert r.status is Status.error and "not trusted" in r.evidence


def test_a_declared_test_missing_from_the_report_is_never_a_pass():
    r = _pytest(_junit(_case("test_a")), 0, ["test_a", "test_b", "TestX::test_m"])
    assert r.status is Status.error and "lacks 2 test(s)" in r.evidence, r.evidence
    # A method is found under its own class only; a parametrised case counts for its function.
    r = _pytest(_junit(_case("test_m"), _case("test_b[1-2]")), 0, ["TestX::test_m", "test_b"])
    assert r.status is Status.error and "TestX::test_m" in r.evidence
    # With a real failure as well, the missing tests are failures of their own (score 0/3).
    r = _pytest(_junit(_case("test_a", "assert 0")), 1, ["test_a", "test_b", "test_c"])
    assert r.status is Status.failed and r.score == 0 and len(r.checks) == 3
    assert r.checks[-1].evidence == "declared by the verifier, never reported"


def test_a_missing_tests_names_are_cut_in_the_evidence():
    """The names come from the container (the grader's `declared`): each is cut, as an
    evidence cuts every name it did not choose, and only the first ones are listed."""
    long = "test_" + "x" * 100_000
    r = _pytest(_junit(_case("test_a")), 0, ["test_a", long, *(f"test_{i}" for i in range(20))])
    assert r.status is Status.error and "lacks 21 test(s)" in r.evidence
    assert len(r.evidence) < 2_000 and "and 11 more" in r.evidence, r.evidence[:300]


@pytest.mark.parametrize(
    "before",
    [
        '{"runner": "pytest", "exit_code": 0, "report": "<testsuites/>", "declared": []}',
        _line(_junit(_case("test_a")), 0, ["test_a"]),  # a whole forged line, earlier
        '{"junit": "<testsuite><testcase name=\'x\'/></testsuite>", "exit_code": 0',  # torn
    ],
)
def test_only_the_runners_own_last_line_counts(before):
    r = _pytest(_junit(_case("test_a", "assert -1 == 5")), 1, ["test_a"], before=before)
    assert r.status is Status.failed, r.evidence


def test_a_report_that_is_not_the_runners_line_is_an_error():
    for stdout in ("", "3 passed\n", '{"pass": true}\n', _line("<x/>", 0) + "\ntrailing\n",
                   _line(_junit(_case("a")), 0, truncated=True)):  # fmt: skip
        r = judge_junit("v", stdout, dict(COMMON))
        assert r.status is Status.error, (stdout, r.evidence)


# --- the node report -------------------------------------------------------------------------


def _event(name: str, passed: bool = True, **more) -> str:
    return json.dumps({"passed": passed, "name": name, "nesting": 0, "suite": False,
                       "skip": False, "todo": False, "failure": None, "error": None,
                       **more})  # fmt: skip


def _node(events: list[str], code: int, declared=(), files=("/workspace/v.test.mjs",)):
    line = _line("\n".join(events) + "\n", code, declared, runner="node", files=list(files))
    return judge_node("n", line + "\n", dict(COMMON))


def test_a_node_test_file_that_ends_before_its_tests_is_an_error():
    r = _node([_event("/workspace/v.test.mjs")], 0, ["small"])
    assert r.status is Status.error and "ran no test" in r.evidence
    # The same when the agent's module registers a passing test of its own, then exits.
    r = _node([_event("fake")], 0, ["small", "zero"])
    assert r.status is Status.error and "lacks 2 test(s)" in r.evidence
    control = _node([_event("small", False, error="-1 !== 5"), _event("zero")], 1, ["small"])
    assert control.status is Status.failed and control.score == 0.5


def test_an_error_text_never_hides_a_failure():
    text = "boom\n  type: 'suite'\n...\nok 1 - small\n# pass 9"
    r = _node([_event("small", False, error=text), _event("zero")], 1, ["small", "zero"])
    assert r.status is Status.failed and r.score == 0.5 and r.checks[0].evidence == text


def test_suites_count_only_when_they_fail_by_themselves_or_are_skipped():
    events = [
        _event("small", nesting=1),
        _event("add", suite=True),
        _event("hooked", False, suite=True, failure="hookFailed", error="before failed"),
        _event("later", suite=True, skip=True),
        _event("todo-one", todo=True),
    ]
    r = _node(events, 1, ["small", "add", "hooked", "later"])
    assert [(c.text, c.passed) for c in r.checks] == [
        ("small", True), ("hooked", False), ("later", False), ("todo-one", False),
    ]  # fmt: skip
    assert r.status is Status.failed


def test_a_node_exit_code_that_disagrees_with_the_report_is_an_error():
    assert _node([_event("small")], 1, ["small"]).status is Status.error
    assert _node([_event("small", False)], 0, ["small"]).status is Status.error
    assert _node(["not json"], 0, ["small"]).status is Status.error


# --- grader files: only what the command names, inside the project folder -------------------


def _grader(folder, args):
    return load_grader(write(folder / "g.yaml", f"type: program\nprogram: python3\nargs: {args}\n"))


@pytest.mark.parametrize(
    "arg", ["../secret.txt", "../../outside/secret.txt", "graders/../../../outside/secret.txt"]
)
def test_a_path_out_of_the_project_folder_is_never_mounted(tmp_path, arg):
    write(tmp_path / "outside" / "secret.txt", "KEY")
    write(tmp_path / "p" / "secret.txt", "KEY")
    suite = tmp_path / "p" / "evals"  # no .gradebox/, .agentv/ or .git: evals/ is the project
    write(suite / "graders" / "check.py", "")
    assert grader_file(arg, suite) is None
    g = _grader(suite, f"[graders/check.py, {arg}]")
    with pytest.raises(ConfigError, match="outside the grader's project folder") as err:
        check_grader_files(g, file="g.yaml", field=None)
    assert err.value.field == "args.1"


def test_a_link_out_absolute_paths_and_env_files_are_never_mounted(tmp_path):
    write(tmp_path / "outside" / "secret.txt", "KEY")
    suite = tmp_path / "suite"
    write(suite / ".env", "OPENAI_API_KEY=x")
    write(suite / "graders" / ".env.local", "x")
    (suite / "graders" / "link.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (suite / "out").symlink_to(tmp_path / "outside")
    for arg in ("graders/link.txt", "out/secret.txt", str(tmp_path / "outside" / "secret.txt"),
                ".env", "graders/.env.local", "./.env"):  # fmt: skip
        assert grader_file(arg, suite) is None, arg
    with pytest.raises(ConfigError, match="outside"):
        check_grader_files(_grader(suite, "[out/secret.txt]"), file="g.yaml", field=None)


def test_an_agentv_project_reaches_its_graders_folder_and_no_further(tmp_path):
    project = tmp_path / "project"
    (project / ".agentv").mkdir(parents=True)
    write(project / "graders" / "check.py", "")
    write(tmp_path / "outside.py", "")
    evals = project / "evals"
    evals.mkdir()
    argv, used = translate_args(["python3", "../graders/check.py", "../../outside.py"], evals)
    assert used == ["../graders/check.py"]
    assert argv == ["python3", "/grader-up1/graders/check.py", "../../outside.py"]


def test_a_grader_sees_its_own_folder_but_never_the_suites(tmp_path):
    suite = tmp_path / "suite"
    write(suite / "graders" / "check.py", "")
    write(suite / "graders" / "helpers.py", "")
    write(suite / "top.py", "")
    write(suite / "verifiers" / "test_a.py", "")
    write(suite / "keys" / "k.py", "")
    write(suite / "keys" / ".env", "")
    used = ["graders/check.py", "top.py", "verifiers/test_a.py", "keys/k.py"]
    user = f"{os.getuid()}:{os.getgid()}"
    mounts = {m.target: m.source for m in source_mounts(suite, used, user, tmp_path)}
    assert mounts == {
        "/grader/graders": suite / "graders",  # beside check.py: its helpers
        "/grader/verifiers": suite / "verifiers",  # a program grader's own folder
        "/grader/top.py": suite / "top.py",  # the suite's folder: the file alone
        "/grader/keys/k.py": suite / "keys" / "k.py",  # a folder with a .env: the file alone
    }
    # A verifier gets its files alone; so does a grader whose cwd moved it to the suite's
    # folder's parent (the folder that declared it stays out).
    files = source_mounts(suite, used, user, tmp_path, folders=False)
    assert {m.target for m in files} == {f"/grader/{u}" for u in used}
    kept = source_mounts(tmp_path, ["suite/graders/check.py", "suite/top.py"], user, tmp_path,
                         keep_out=suite)  # fmt: skip
    assert {m.target for m in kept} == {"/grader/suite/graders", "/grader/suite/top.py"}


def test_a_cwd_out_of_the_project_folder_is_refused(tmp_path):
    from gradebox.suite import load_suite

    write(tmp_path / "outside" / "check.py", "")
    text = ("tests:\n  - id: t\n    output: x\n    assert:\n"
            "      - {type: code-grader, cwd: CWD, command: [python3, check.py]}\n")  # fmt: skip
    for cwd in ("../outside", str(tmp_path / "outside"), "/"):
        with pytest.raises(ConfigError, match="leads out of the project folder"):
            load_suite(write(tmp_path / "suite" / "s.yaml", text.replace("CWD", cwd)))
    write(tmp_path / "suite" / "sub" / "check.py", "")
    load_suite(write(tmp_path / "suite" / "s.yaml", text.replace("CWD", "sub")))
