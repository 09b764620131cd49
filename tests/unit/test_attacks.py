"""Attacks on the host-side logic that need no container: each was a way to game a verdict, to
reach the host, or to crash a run with what an agent or a grader wrote."""

import json
import os
import stat
import time
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from gradebox.core.jsonl import read_jsonl
from gradebox.core.scratch import new_scratch
from gradebox.errors import ConfigError, ImageError
from gradebox.graders.builtin import BuiltinAssertion
from gradebox.graders.config import load_grader
from gradebox.graders.run import check_grader_files
from gradebox.images import ImageBuild, ImageResolver
from gradebox.protocol.models import GraderResult, RunSummary, Status, TestResult
from gradebox.report import junit_xml, print_result, print_run
from gradebox.suite.plan import check_grader
from tests.conftest import write

# --- configuration mistakes are exit 2 before anything runs, not failures of the agent -------


def test_a_missing_grader_script_is_a_configuration_error(tmp_path):
    g = load_grader(
        write(tmp_path / "g.yaml", "type: program\nprogram: python3\nargs: [graders/chek.py]\n")
    )
    with pytest.raises(ConfigError, match=r"graders/chek.py.*does not exist") as err:
        check_grader_files(g, file="g.yaml", field=None)
    assert err.value.field == "args.0"
    write(tmp_path / "graders" / "check.py", "")
    g = load_grader(
        write(tmp_path / "g.yaml", "type: program\nprogram: python3\nargs: [graders/check.py]\n")
    )
    check_grader_files(g, file="g.yaml", field=None)
    s = load_grader(write(tmp_path / "s.yaml", "type: script\ncommand: [./validators/x.sh]\n"))
    with pytest.raises(ConfigError, match="validators/x.sh"):
        check_grader_files(s, file="s.yaml", field=None)


def test_a_script_in_the_workspace_is_not_a_missing_grader_file(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "tests" / "run.py", "")
    g = load_grader(
        write(tmp_path / "g.yaml", "type: program\nprogram: python3\nargs: [tests/run.py]\n")
    )
    check_grader_files(g, file="g.yaml", field=None, also_in=(ws,))
    # Modules and one-liners name no file.
    for args in ("[-m, pytest, tests/x.py]", "[-c, 'print(1)']"):
        g = load_grader(
            write(tmp_path / "g.yaml", f"type: program\nprogram: python3\nargs: {args}\n")
        )
        check_grader_files(g, file="g.yaml", field=None)


def test_a_long_one_liner_is_no_file_name(tmp_path):
    from gradebox.graders.run import translate_args

    code = "print(" + "1 + " * 200 + "1)"
    argv, used = translate_args(["python3", "-c", code], tmp_path)
    assert argv[2] == code and used == []
    argv, used = translate_args(["x" * 300 + "/y.py"], tmp_path)
    assert used == []


@pytest.mark.parametrize(
    ("yaml", "privilege"),
    [
        ("security: {user: '0:0'}", "root"),
        ("security: {capabilities: [DAC_READ_SEARCH]}", "capabilities"),
        ("network: bridge", "network"),
        ("security: {read_only_root: false}", "writable-root"),
        ("security: {no_new_privileges: false}", "privilege-escalation"),
        ("limits: {memory: 8GiB}", "limits"),
    ],
)
def test_a_grader_cannot_grant_itself_privileges(tmp_path, yaml, privilege):
    g = load_grader(write(tmp_path / "g.yaml", f"type: script\ncommand: 'true'\n{yaml}\n"))
    with pytest.raises(ConfigError, match=f"--allow {privilege}"):
        check_grader(g, set(), file="g.yaml")
    check_grader(g, {privilege}, file="g.yaml")  # whoever runs gradebox may allow it


class _NoImages:
    """A resolver that must never be asked: refusals come before anything runs."""

    asked: list[object] = []

    def resolve(self, ref, source=None):
        self.asked.append(ref)
        return "sha256:" + "0" * 64


BUILD_SUITES = {
    "inline-grader": "tests:\n  - id: t\n    output: x\n    assert:\n"
    "      - {type: script, command: 'true', image: {build: ./Dockerfile}}\n",
    "inline-with-context": "tests:\n  - id: t\n    output: x\n    assert:\n"
    "      - {type: script, command: 'true', image: {build: ./Dockerfile, context: .}}\n",
    "suite-defaults": "defaults: {image: {build: ./Dockerfile}}\n"
    "tests:\n  - id: t\n    output: x\n    assert:\n      - {type: script, command: 'true'}\n",
    "target": "target: {command: 'true', image: {build: ./Dockerfile}}\n"
    "tests:\n  - id: t\n    input: q\n    assert: [{type: contains, value: x}]\n",
}
BUILD_FIELDS = {
    "inline-grader": "tests.0.assert.0.image.build",
    "inline-with-context": "tests.0.assert.0.image.build",
    "suite-defaults": "defaults.image.build",
    "target": "target.image.build",
}


@pytest.mark.parametrize("case", list(BUILD_SUITES))
def test_a_dockerfile_build_needs_the_operators_allow(tmp_path, case):
    """Its RUN steps run as root with capabilities on the engine: refused, naming the file,
    the field and the flag, before any image is resolved or built; allowed, it plans."""
    from gradebox.suite import load_suite
    from gradebox.suite.plan import plan_suite

    write(tmp_path / "Dockerfile", "FROM scratch\nRUN id\n")
    suite = load_suite(write(tmp_path / "suite.yaml", BUILD_SUITES[case]))
    images = _NoImages()
    images.asked = []
    with pytest.raises(ConfigError) as err:
        plan_suite(suite, images)
    said = str(err.value)
    assert "\n" not in said and said.startswith(f"{tmp_path / 'suite.yaml'}:")
    assert BUILD_FIELDS[case] in said and "--allow build" in said, said
    assert not any(not isinstance(r, str) for r in images.asked)  # no build was asked for
    plan_suite(suite, images, allowed={"build"})  # the control: the operator allows it
    allowing = write(tmp_path / "allowing.yaml", "allow: [build]\n" + BUILD_SUITES[case])
    plan_suite(load_suite(allowing), _NoImages())


def test_a_grader_file_with_its_own_dockerfile_is_refused_by_grade(tmp_path):
    write(tmp_path / "Dockerfile", "FROM scratch\nRUN id\n")
    g = load_grader(
        write(tmp_path / "g.yaml", "type: script\ncommand: 'true'\nimage:\n  build: ./Dockerfile\n")
    )
    with pytest.raises(ConfigError, match=r"--allow build") as err:
        check_grader(g, set(), file="g.yaml")
    assert str(err.value).startswith("g.yaml:") and "image.build" in str(err.value)
    check_grader(g, {"build"}, file="g.yaml")


def test_the_resolver_itself_builds_nothing_it_was_not_allowed_to(tmp_path):
    """Every path that resolves images (a library caller too) meets the same refusal."""
    write(tmp_path / "Dockerfile", "FROM scratch\nRUN id\n")
    with pytest.raises(ImageError, match=r"Dockerfile.*--allow build"):
        ImageResolver(engine=None).resolve(ImageBuild(build="./Dockerfile"), tmp_path)


def test_lower_limits_and_the_defaults_need_no_privilege(tmp_path):
    g = load_grader(
        write(
            tmp_path / "g.yaml",
            "type: script\ncommand: 'true'\nlimits: {memory: 256MiB, pids: 32}\n",
        )
    )
    check_grader(g, set(), file="g.yaml")


def test_a_suite_allows_what_its_graders_need(tmp_path, monkeypatch):
    from gradebox.suite import load_suite
    from gradebox.suite.plan import plan_suite

    class NoImages:
        def resolve(self, ref, source=None):
            return "sha256:" + "0" * 64

    body = (
        "tests:\n  - id: t\n    output: x\n    assert:\n"
        "      - {type: script, command: 'true', network: bridge}\n"
    )
    suite = load_suite(write(tmp_path / "suite.yaml", body))
    with pytest.raises(ConfigError) as err:
        plan_suite(suite, NoImages())
    assert "suite.yaml:5" in str(err.value) and "tests.0.assert.0" in str(err.value)
    suite = load_suite(write(tmp_path / "suite.yaml", "allow: [network]\n" + body))
    assert plan_suite(suite, NoImages()).graders == 1


def test_a_build_context_stays_inside_the_grader_folder(tmp_path):
    write(tmp_path / "elsewhere" / "secret", "host file\n")
    write(tmp_path / "grader" / "Dockerfile", "FROM scratch\nCOPY secret /\n")
    resolver = ImageResolver(engine=None)  # refused before the engine is asked anything
    for spec in (
        ImageBuild(build="./Dockerfile", context="../elsewhere"),
        ImageBuild(build="../elsewhere/Dockerfile"),
    ):
        with pytest.raises(ImageError, match="outside the grader's folder"):
            resolver.resolve(spec, tmp_path / "grader")


def test_a_user_regex_is_time_bounded():
    a = BuiltinAssertion(type="regex", value="(a|aa)+$")
    started = time.monotonic()
    r = a.evaluate("a" * 80 + "b")
    # Unbounded, this match takes longer than the universe's age; 30 s leaves room for a
    # loaded CI machine without letting an unbounded match pass.
    assert time.monotonic() - started < 30
    assert r.status is Status.error and "regex took over" in r.evidence
    assert BuiltinAssertion(type="contains-json").evaluate("[" * 100_000).status is Status.failed


def test_an_answer_of_broken_json_starts_is_searched_in_linear_time():
    # Each `{"` used to be parsed to its failure, with an error that counts every line before
    # it; a search that gives up is an error, so `not-contains-json` never passes on it.
    for answer in ('{"' * 500_000, '{"a":[\n' * 150_000):
        for kind in ("contains-json", "not-contains-json"):
            r = BuiltinAssertion(type=kind).evaluate(answer)
            assert r.status is Status.error and "broken JSON" in r.evidence, (kind, answer[:9])
    found = BuiltinAssertion(type="contains-json").evaluate("{\n" * 500_000 + '[{"a": 1}]')
    assert found.status is Status.passed


# --- what an agent or a grader writes cannot corrupt a report --------------------------------

EVIL = "ok\x1b]0;pwned\x07\x1b[2J\x1b]52;c;Y3VybCBldmlsLnNo\x07 \x01\x0b done [bold]markup[/]"


def _result(evidence: str) -> TestResult:
    grader = GraderResult(
        name="g\x1b[31m", status=Status.failed, passed=False, score=0.0, evidence=evidence
    )
    return TestResult(
        id="t\x00\x1b", status=Status.failed, passed=False, score=0.0, graders=[grader]
    )


def _summary() -> RunSummary:
    return RunSummary(
        suite="s", run_id="r", total=1, passed=0, failed=1, errored=0, pass_rate=0.0,
        mean_score=0.0, duration_s=0.1, workers=1, started_at="x", finished_at="y",
    )  # fmt: skip


def test_junit_is_well_formed_whatever_the_evidence_says():
    text = junit_xml([_result(EVIL)], _summary())
    root = ET.fromstring(text.split("\n", 1)[1])
    assert root.find(".//failure") is not None


def test_terminal_output_carries_no_escape_sequences():
    console = Console(record=True, force_terminal=True, width=200)
    print_run([_result(EVIL)], _summary(), console)
    print_result(_result(EVIL).graders[0], console)
    text = console.export_text(styles=False)
    assert "\x1b" not in text and "\x07" not in text and "\x01" not in text
    assert "[bold]markup[/]" in text  # shown as written, not interpreted


# --- files the runner keeps ------------------------------------------------------------------


def test_scratch_is_private(tmp_path):
    import shutil

    path = new_scratch()
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        assert path.name.startswith(f"gradebox-{os.getpid()}-")
    finally:
        shutil.rmtree(path)


def test_only_a_torn_last_line_is_tolerated(tmp_path):
    good = TestResult(id="a", status=Status.passed, passed=True, score=1.0).model_dump_json()
    f = tmp_path / "r.jsonl"
    f.write_text(good + "\n" + '{"id": "b", "sta')
    assert [r.id for r in read_jsonl(f, TestResult)] == ["a"]
    f.write_text(good + "\n" + "garbage\n" + good + "\n")
    with pytest.raises(ConfigError, match="line 2 is not a valid result"):
        list(read_jsonl(f, TestResult))
    assert json.loads(good)["id"] == "a"


# --- A score that is no number from 0 to 1 ------------------------------------------------------


@pytest.mark.parametrize("dialect", ["script", "program", "inline", "assertion"])
def test_a_non_finite_score_is_an_error_never_a_clamped_pass(dialect):
    from gradebox.graders.verdict import judge
    from gradebox.sandbox.base import Limits, RunOutcome

    def judged(stdout: bytes):
        outcome = RunOutcome(exit_code=0, stdout=stdout)
        return judge(dialect, "g", outcome, timeout=10, limits=Limits())

    for bad in (b'{"score": Infinity}', b'{"score": 1e999}', b'{"pass": true, "score": NaN}',
                b'{"score": -Infinity}', b'{"checks": [{"text": "a", "score": 1e400}]}',
                b'{"details": [{"name": "a", "score": Infinity}], "score": 1}'):  # fmt: skip
        r = judged(bad)
        assert r.status is Status.error and not r.passed, (bad, r.evidence)
    # Controls: a finite score is the verdict; one past 1 is clamped, as documented.
    assert judged(b'{"score": 0.9}').status is Status.passed
    assert judged(b'{"score": 0.1}').status is Status.failed
    assert judged(b'{"score": 5}').score == 1.0


# --- A copy of the agent's files that the quota stops only afterwards ---------------------------


@pytest.mark.parametrize("trick", ["sparse", "hardlinks"])
def test_an_unmounted_copy_stops_at_the_quota_not_after(tmp_path, monkeypatch, trick):
    # Without root (no tmpfs of the quota's size), a copy writes every byte of a file with
    # holes and every hard link once more: a 1 TB sparse file costs the agent nothing.
    from gradebox.errors import WorkspaceError
    from gradebox.files import workspace as wsmod

    monkeypatch.setattr(wsmod, "_mount_tmpfs", lambda *a, **k: False)
    agent = tmp_path / "agent"
    agent.mkdir()
    if trick == "sparse":
        with open(agent / "big", "wb") as f:
            f.truncate(64 << 20)  # 64 MiB of holes, nothing allocated
    else:
        (agent / "one").write_bytes(b"x" * (1 << 20))
        for i in range(64):
            os.link(agent / "one", agent / f"link{i}")
    quota = wsmod.Quota(size=8 << 20)
    with pytest.raises(WorkspaceError, match="quota"):
        wsmod.Workspace.create(tmp_path / "copy", agent, quota=quota)
    written = sum(p.stat().st_blocks * 512 for p in (tmp_path / "copy").rglob("*"))
    assert written <= 8 << 20
    # Control: what fits is copied.
    small = tmp_path / "small"
    small.mkdir()
    (small / "answer.txt").write_bytes(b"x" * (1 << 20))
    ok = wsmod.Workspace.create(tmp_path / "fits", small, quota=quota)
    assert (ok.path / "answer.txt").stat().st_size == 1 << 20
    ok.close()


def test_junit_names_each_result_by_its_own_suite():
    # A run of several files: labelled ids of two suites may read alike ("a" + "b: c" and
    # "a: b" + "c" are both "a: b: c"); their classnames keep them apart.
    first = _result("x").model_copy(update={"id": "a: b: c", "suite": "a"})
    second = _result("x").model_copy(update={"id": "a: b: c", "suite": "a: b"})
    root = ET.fromstring(junit_xml([first, second], _summary()).split("\n", 1)[1])
    cases = {(c.get("classname"), c.get("name")) for c in root.iter("testcase")}
    assert cases == {("a", "a: b: c"), ("a: b", "a: b: c")}
