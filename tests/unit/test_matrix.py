"""Target matrices: AgentV v4's ``execution.targets`` and 5.x's several ``providers`` run every
test once per target (AgentV's ``run-eval.ts``: matrix mode names each result
``${testId}@${targetName}`` and keeps the target on it), a target's own ``hooks`` its tests'
(``extractTargetRefsFromSuite``); ``--target`` still picks one. The summary and the reports
are split by target. No containers."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from gradebox.drivers.runner import per_target, summarise
from gradebox.errors import ConfigError, UnsupportedFeature
from gradebox.formats.agentv import chosen_target
from gradebox.protocol.models import RunSummary, Status, TestResult
from gradebox.report.html import page, page_data, result_row
from gradebox.report.terminal import print_run
from gradebox.suite import load_suite
from tests.conftest import write

TARGETS = (
    "targets:\n"
    "  - {name: good_mock, provider: mock, response: hello world}\n"
    "  - {name: bad, provider: mock, response: bye}\n"
    "  - {name: runner, provider: cli, command: 'echo {PROMPT} > {OUTPUT_FILE}'}\n"
)
TESTS = (
    "tests:\n"
    "  - id: greet\n    input: hi\n    assertions:\n      - {type: contains, value: hello}\n"
    "  - id: other\n    input: yo\n    assertions:\n      - {type: contains, value: bye}\n"
)
MATRIX = (
    "execution:\n  targets:\n"
    "    - {name: good, use_target: good_mock, hooks: {before_each: {command: [sh, -c, 'true']}}}\n"
    "    - bad\n" + TESTS
)


def _files(tmp_path, body):
    write(tmp_path / ".agentv" / "targets.yaml", TARGETS)
    return write(tmp_path / "evals" / "m.eval.yaml", body)


def test_every_test_runs_once_per_target_tagged_and_named_id_at_target(tmp_path):
    suite = load_suite(_files(tmp_path, MATRIX))
    got = [(t.id, t.target_name, t.source_id, t.target_id) for t in suite.tests]
    # target after target, as AgentV's selections loop runs them
    assert got == [
        ("greet@good", "good", "greet", "greet"),
        ("other@good", "good", "other", "other"),
        ("greet@bad", "bad", "greet", "greet"),
        ("other@bad", "bad", "other", "other"),
    ]
    assert [t.target.response for t in suite.tests] == ["hello world"] * 2 + ["bye"] * 2
    # the target's own before_each is its tests' (AgentV runs it after the workspace's)
    assert suite.tests[0].workspace.before_each == ["sh", "-c", "true"]
    assert suite.tests[2].workspace is None


def test_ids_and_fingerprints_are_stable_and_differ_per_target(tmp_path):
    path = _files(tmp_path, MATRIX)
    a, b = load_suite(path), load_suite(path)
    prints_a = [a.fingerprint(t) for t in a.tests]
    assert prints_a == [b.fingerprint(t) for t in b.tests]  # --resume reuses them
    assert len(set(prints_a)) == 4  # one target's result never stands for another's


def test_target_picks_one_untagged_with_its_hooks(tmp_path):
    path = _files(tmp_path, MATRIX)
    with chosen_target("good"):
        suite = load_suite(path)
    assert [t.id for t in suite.tests] == ["greet", "other"]
    assert all(t.target is None and t.target_name is None for t in suite.tests)
    assert suite.spec.target.response == "hello world"
    assert suite.spec.workspace.before_each == ["sh", "-c", "true"]
    with chosen_target("nope"), pytest.raises(ConfigError, match="not one of execution.targets"):
        load_suite(path)


def test_one_listed_target_is_the_files_target(tmp_path):
    suite = load_suite(_files(tmp_path, "execution:\n  targets: [bad]\n" + TESTS))
    assert [t.id for t in suite.tests] == ["greet", "other"]
    assert suite.spec.target.response == "bye"


def test_five_x_several_providers_are_a_matrix_by_label(tmp_path):
    suite = load_suite(_files(tmp_path, "providers: [good_mock, runner]\n" + TESTS))
    assert [t.id for t in suite.tests][::2] == ["greet@good_mock", "greet@runner"]
    assert [t.target.provider for t in suite.tests] == ["mock", "mock", "cli", "cli"]


def test_a_target_named_twice_or_ids_that_read_alike_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="listed twice"):
        load_suite(_files(tmp_path, "execution:\n  targets: [bad, bad]\n" + TESTS))
    # "a@b" on target "c" and "a" on target "b@c" would share a result id
    alike = (
        "execution:\n  targets: [c, 'b@c']\ntests:\n  - {id: 'a@b', input: x}\n"
        "  - {id: a, input: y}\n"
    )
    with pytest.raises(ConfigError, match="duplicate test id"):
        load_suite(_files(tmp_path, alike))


def test_a_hook_in_both_the_workspace_and_the_target_is_refused(tmp_path):
    body = "workspace:\n  hooks:\n    before_each: {command: [sh, -c, 'true']}\n" + MATRIX
    with pytest.raises(UnsupportedFeature) as info:
        load_suite(_files(tmp_path, body))
    assert info.value.field == "execution.targets.0.hooks.before_each"


def _result(rid, status, score, target):
    return TestResult(
        id=rid, status=status, passed=status is Status.passed, score=score, target_name=target
    )


def test_summary_splits_by_target(tmp_path):
    suite = load_suite(_files(tmp_path, MATRIX))
    finished = {
        "greet@good": (Status.passed, 1.0),
        "other@good": (Status.failed, 0.0),
        "greet@bad": (Status.error, 0.0),
    }
    summary = summarise(suite, "r", finished, 4, 1, False, "2026-01-01T00:00:00Z", 1.0)
    assert summary.total == 4 and summary.not_run == 1
    good, bad = summary.targets["good"], summary.targets["bad"]
    assert (good.total, good.passed, good.failed, good.pass_rate) == (2, 1, 1, 0.5)
    assert (bad.total, bad.errored, bad.not_run, bad.pass_rate) == (2, 1, 1, 0.0)
    again = RunSummary.model_validate(json.loads(summary.model_dump_json()))
    assert again.targets["bad"].errored == 1  # summary.json holds it
    assert per_target(load_suite(_files(tmp_path, TESTS)).tests, {}) is None  # no matrix


def test_terminal_prints_each_target_as_text(tmp_path):
    hostile = "[bold red]x[/]\x1b[2J"
    summary = RunSummary(
        suite="s", run_id="r", total=1, passed=1, failed=0, errored=0, pass_rate=1.0,
        mean_score=1.0, duration_s=0.1, workers=1, started_at="t", finished_at="t",
        targets={hostile: {"total": 1, "passed": 1, "failed": 0, "errored": 0, "pass_rate": 1.0,
                           "mean_score": 1.0}},
    )  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    print_run([_result("t@x", Status.passed, 1.0, hostile)], summary, console)
    text = out.getvalue()
    assert "per target" in text and "[bold red]x[/]" in text  # markup shown, not applied
    assert "\x1b[2J" not in text


def test_report_rows_carry_the_target_as_data(tmp_path):
    hostile = "</script><img src=x onerror=alert(1)>"
    r = _result(f"t@{hostile}", Status.failed, 0.0, hostile)
    assert result_row(r)["target"] == hostile

    class Run:
        name, summary, results, plan = "run", None, [r], None

    html = page(page_data([Run()]), [Run()])
    assert hostile not in html  # only as escaped JSON data, drawn as text by the script
