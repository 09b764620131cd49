"""compare on hand-built result files: known flips, a known McNemar p-value, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.drivers.batch import GradedRecord
from gradebox.protocol.models import GraderResult, Status, TestResult
from gradebox.report.compare import compare_runs, load_run, markdown, mcnemar_exact

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
