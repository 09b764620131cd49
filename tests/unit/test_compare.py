"""compare on hand-built result files: known flips, a known McNemar p-value, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.drivers.batch import GradedRecord
from gradebox.protocol.models import GraderResult, Status, TestResult
from gradebox.report.compare import compare_runs, load_run, markdown, mcnemar_exact, unrelated

ROOT = Path(__file__).resolve().parents[2]


def _suite_rows(path: Path, verdicts: dict[str, bool], grader: str = "g") -> Path:
    rows = [_result(k, v, grader) for k, v in verdicts.items()]
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    return path


def _result(key: str, passed: bool, grader: str = "g") -> TestResult:
    status = Status.passed if passed else Status.failed
    score = 1.0 if passed else 0.0
    g = GraderResult(name=grader, status=status, passed=passed, score=score)
    return TestResult(id=key, status=status, passed=passed, score=score, graders=[g])


def test_mcnemar_exact_known_values():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(1, 5) == pytest.approx(2 * 7 / 64)  # 0.21875
    assert mcnemar_exact(6, 0) == pytest.approx(2 / 64)  # 0.03125
    assert mcnemar_exact(3, 3) == 1.0


def test_flips_deltas_and_intervals(tmp_path):
    a = {f"t{i}": True for i in range(10)} | {"x": False, "only-a": True}
    b = {f"t{i}": i >= 6 for i in range(10)} | {"x": True, "only-b": False}
    report = compare_runs(
        load_run(_suite_rows(tmp_path / "a.jsonl", a)),
        load_run(_suite_rows(tmp_path / "b.jsonl", b)),
        seed=7,
    )
    assert report.tests == 11 and report.regressions == [f"t{i}" for i in range(6)]
    assert report.fixes == ["x"] and report.only_in_a == ["only-a"]
    assert report.p_value == pytest.approx(mcnemar_exact(6, 1))  # 0.125
    assert report.pass_rate_delta == pytest.approx(-5 / 11)
    low, high = report.pass_rate_ci
    assert low <= report.pass_rate_delta <= high <= 0
    again = compare_runs(load_run(tmp_path / "a.jsonl"), load_run(tmp_path / "b.jsonl"), seed=7)
    assert again.pass_rate_ci == report.pass_rate_ci  # seeded: reproducible
    assert report.graders[0].name == "g" and report.graders[0].delta == pytest.approx(-5 / 11)
    md = markdown(report)
    assert "pass → fail:" in md and "`t0`" in md and "No significant regression" in md


def test_batch_outputs_and_the_cli_gate(tmp_path):
    def batch(path: Path, verdicts: dict[str, bool]) -> Path:
        rows = [
            GradedRecord.model_validate(
                {
                    "id": k,
                    "line": n,
                    "pass": v,
                    "score": float(v),
                    "status": "passed" if v else "failed",
                    "result": GraderResult(
                        name="hint", status="passed" if v else "failed", passed=v, score=float(v)
                    ).model_dump(),
                }
            )
            for n, (k, v) in enumerate(verdicts.items(), 1)
        ]
        path.write_text("".join(r.model_dump_json(by_alias=True) + "\n" for r in rows))
        return path

    a = batch(tmp_path / "a.jsonl", {f"r{i}": True for i in range(8)})
    b = batch(tmp_path / "b.jsonl", {f"r{i}": i >= 7 for i in range(8)})  # 7 regressions
    run = [sys.executable, "-m", "gradebox", "compare", str(a), str(b)]
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env)
    data = json.loads(p.stdout)
    assert p.returncode == 0 and data["significantly_worse"] is True
    assert data["p_value"] == pytest.approx(2 / 128)
    md = tmp_path / "report.md"
    p = subprocess.run(
        [*run, "--fail-on-regression", "--markdown", str(md)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 1 and "significantly worse" in md.read_text()
    p = subprocess.run(
        [*run[:-1], str(a), "--fail-on-regression"], capture_output=True, text=True, env=env
    )
    assert p.returncode == 0  # a run compared with itself


def test_unreadable_input_names_the_file_and_line(tmp_path):
    from gradebox.errors import ConfigError

    bad = tmp_path / "bad.jsonl"
    good = _result("a", True).model_dump_json()
    bad.write_text(f"{good}\nnot json\n{good}\n")
    with pytest.raises(ConfigError) as info:
        load_run(bad)
    assert info.value.line == 2 and info.value.file == str(bad)


def test_compare_reads_results_through_the_one_reader(tmp_path, monkeypatch):
    """compare, the terminal table, JUnit and the HTML report read results.jsonl through
    gradebox.protocol.results: a change there is seen by all (here: compare)."""
    import gradebox.protocol.results
    import gradebox.report.compare

    path = _suite_rows(tmp_path / "a.jsonl", {"x": True})
    seen = []
    real = gradebox.protocol.results.read_results

    def spy(p):
        seen.append(p)
        return real(p)

    monkeypatch.setattr(gradebox.report.compare, "read_results", spy)
    assert load_run(path)["x"].passed and seen == [path]


def test_unrelated_runs_rule():
    """Fewer than half of the ids either ran shared, or different suites: one sentence
    naming both runs; half shared and the same (or an unknown) suite: nothing."""
    ids = [f"t{i}" for i in range(4)]
    assert unrelated("a", ids, "s", "b", ids, "s") is None
    # 4 shared of 8: exactly half, no warning; 3 of 9: fewer, warned
    assert unrelated("a", ids + ["x1", "x2"], "s", "b", ids + ["y1", "y2"], "s") is None
    few = unrelated(
        "main", ids[:3] + ["x1", "x2", "x3"], "s", "pr", ids[:3] + ["y1", "y2", "y3"], "s"
    )
    assert few == (
        "main and pr look unrelated: they share only 3 of their 9 tests; "
        "the comparison covers only the 3 tests both ran."
    )
    suites = unrelated("main", ids, "quickstart", "pr", ids, "translation")
    assert suites == (
        "main and pr look unrelated: they ran different suites ('quickstart' and "
        "'translation'); the comparison covers only the 4 tests both ran."
    )
    assert unrelated("a", ids, None, "b", ids, "translation") is None  # unknown: ids decide
    none = unrelated("a", ["x"], None, "b", ["y"], None)
    assert (
        none
        == "a and b look unrelated: they share none of their 2 tests; there is nothing to compare."
    )
    assert unrelated("a", [], None, "b", [], None) is None  # two empty runs: nothing to say


def _folder(path: Path, suite: str, verdicts: dict[str, bool]) -> Path:
    from gradebox.protocol.models import RunSummary

    path.mkdir()
    _suite_rows(path / "results.jsonl", verdicts)
    (path / "summary.json").write_text(
        RunSummary(suite=suite, run_id="r", total=len(verdicts), passed=0, failed=0, errored=0,
                   pass_rate=0, mean_score=0, duration_s=1, workers=1,
                   started_at="2026-01-01T00:00:00Z",
                   finished_at="2026-01-01T00:00:01Z").model_dump_json()
    )  # fmt: skip
    return path


def test_the_cli_warns_in_one_line_when_the_runs_look_unrelated(tmp_path):
    main = _folder(tmp_path / "main", "quickstart", {f"t{i}": True for i in range(4)})
    pr = _folder(tmp_path / "pr-42", "quickstart", {f"t{i}": i > 0 for i in range(4)})
    # a long name: the line must not wrap whatever the terminal's width
    other = _folder(tmp_path / ("translation-" * 8), "translation", {"t0": True, "fr-1": True})
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "60"}

    def compare(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gradebox", "compare", *map(str, args)],
            capture_output=True, text=True, env=env,
        )  # fmt: skip

    p = compare(main, pr)
    assert p.returncode == 0 and "unrelated" not in p.stderr + p.stdout
    p = compare(main, other, "--json", "--markdown", tmp_path / "c.md")
    assert p.returncode == 0, p.stderr
    expected = unrelated(str(main), [f"t{i}" for i in range(4)], "quickstart",
                         str(other), ["t0", "fr-1"], "translation")  # fmt: skip
    assert expected and "different suites" in expected and "only 1 of their 5" in expected
    assert p.stderr.splitlines() == [f"warning: {expected}"]  # the page's words, one line
    assert json.loads(p.stdout)["unrelated"] == expected
    assert expected in (tmp_path / "c.md").read_text()
