"""The HTML report's Python side, without a browser: the JSON that sits in a <script>, the
Content-Security-Policy, the one reader of results, and following a file being written.
(The page itself is tested in a real browser: tests/browser/test_report.py.)"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest

import gradebox.protocol.results
from gradebox.core.jsonl import read_jsonl_from
from gradebox.errors import ConfigError
from gradebox.protocol.models import GraderResult, RunSummary, Status, TestResult, TrialRecord
from gradebox.protocol.results import load_results
from gradebox.report.compare import load_run
from gradebox.report.html import csp, page, page_data, script_json, write_report
from gradebox.report.view import ViewServer

EVIL = "</script><!--<script>alert(1)</script>\u2028\u2029&amp;<img src=x onerror=alert(2)>"


def _result(key: str, passed: bool = True, **extra: object) -> TestResult:
    status = Status.passed if passed else Status.failed
    g = GraderResult(name="g", status=status, passed=passed, score=float(passed), evidence=EVIL)
    return TestResult(
        id=key, status=status, passed=passed, score=float(passed), graders=[g], **extra
    )


def _run(path: Path, results: list[TestResult], summary: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    if summary:
        s = RunSummary(suite=EVIL, run_id="r", total=len(results), passed=0, failed=0,
                       errored=0, pass_rate=0, mean_score=0, duration_s=1, workers=1,
                       started_at="2026-01-01T00:00:00Z",
                       finished_at="2026-01-01T00:00:01Z")  # fmt: skip
        (path / "summary.json").write_text(s.model_dump_json())
    return path


def test_the_data_cannot_end_its_script_element():
    data = {"a": EVIL, "lone": "\udc80", "nested": [{"k": EVIL}]}
    text = script_json(data)
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(text) == {**data, "lone": "\ufffd"}  # the same strings, read back


def test_each_test_whole_in_its_own_data_block(tmp_path):
    results = [_result(EVIL, False, output=EVIL), _result("b", file_changes=EVIL)]
    run = load_results(_run(tmp_path / "r", results))
    html = page(page_data([run]), [run])
    blocks = dict(re.findall(r'<script type="application/json" id="gbx-0-(\d+)">(.*?)</script>',
                             html, flags=re.S))  # fmt: skip
    assert len(blocks) == 2 and not set("".join(blocks.values())) & {"<", ">", "&"}
    for i, r in enumerate(results):
        assert TestResult.model_validate_json(blocks[str(i)]) == r.model_copy(
            update={"fingerprint": None}
        )
    data = json.loads(re.search(r'id="gradebox-data">(.*?)</script>', html, flags=re.S)[1])
    row = data["runs"][0]["rows"][0]
    assert row["id"] == EVIL and row["why"] == "g: &amp;<img src=x onerror=alert(2)>"  # as the
    # terminal table says it (the last line of the evidence)
    assert "output" not in row  # the small row: the whole result is read when opened


def _inline(html: str, tag: str) -> list[str]:
    return re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.S)


def test_the_policy_allows_our_two_blocks_and_nothing_else(tmp_path):
    html = page(page_data([load_results(_run(tmp_path / "r", [_result("a")]))]))
    (style,) = _inline(html, "style")  # (no run given: no per-test data blocks)
    (script,) = _inline(html, "script")  # the data block has a type: not matched here

    def sha(text: str) -> str:
        return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)[1]
    assert policy == csp()
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'" and directives["img-src"] == "'none'"
    assert directives["script-src"] == f"'{sha(script)}'"
    assert directives["style-src"] == f"'{sha(style)}'"
    assert directives["connect-src"] == "'none'"  # a file report fetches nothing
    assert "connect-src 'self'" in csp(live=True)
    assert html.count("<script") == 2 and "holds the run's outputs" in html


def test_trials_carry_pass_at_k_and_pass_hat_k(tmp_path):
    trials = [TrialRecord(sample=i, status=Status.passed if i < 2 else Status.failed, score=1)
              for i in range(5)]  # fmt: skip
    run = load_results(_run(tmp_path / "r", [_result("t", trials=trials)]))
    row = page_data([run])["runs"][0]["rows"][0]
    assert row["_trials"]["n"] == 5 and row["_trials"]["c"] == 2
    assert row["_trials"]["at"][1] == pytest.approx(0.7)  # pass@2 = 1 - C(3,2)/C(5,2)
    assert row["_trials"]["hat"][1] == pytest.approx(0.1)  # pass^2 = C(2,2)/C(5,2)


def test_two_runs_carry_compares_figures(tmp_path):
    a = _run(tmp_path / "a", [_result(f"t{i}", True) for i in range(8)])
    b = _run(tmp_path / "b", [_result(f"t{i}", i >= 7) for i in range(8)])
    data = page_data([load_results(a), load_results(b)])
    (cmp,) = data["comparisons"]
    assert cmp["regressions"] == [f"t{i}" for i in range(7)]
    assert cmp["p_value"] == pytest.approx(2 / 128) and cmp["significantly_worse"]
    assert cmp["grader_flips"] == [{"name": "g", "regressions": 7, "fixes": 0}]
    assert len(cmp["pass_rate_ci"]) == 2


def test_every_output_reads_results_through_one_reader(tmp_path, monkeypatch):
    """compare, the run's table and JUnit (cli/run reads through runner.read_results) and the
    HTML report: each reads results.jsonl through gradebox.protocol.results, none on its own."""
    from gradebox.drivers import runner

    run = _run(tmp_path / "r", [_result("a"), _result("b", False)])
    calls: list[str] = []
    real = gradebox.protocol.results.read_jsonl

    def spy(path: Path, model: type) -> object:
        calls.append(model.__name__)
        return real(path, model)

    monkeypatch.setattr(gradebox.protocol.results, "read_jsonl", spy)
    assert set(load_run(run)) == {"a", "b"}
    assert calls == ["TestResult"]
    write_report([run], tmp_path / "r.html")
    assert runner.read_results is gradebox.protocol.results.read_results
    assert set(runner.read_results(run / "results.jsonl")) == {"a", "b"}
    assert calls == ["TestResult"] * 3


def test_a_reader_following_a_file_reads_what_is_new_and_waits_for_a_torn_line(tmp_path):
    path = tmp_path / "results.jsonl"
    first, second = _result("a").model_dump_json(), _result("b").model_dump_json()
    path.write_text(first + "\n" + second[:30])
    rows, offset = read_jsonl_from(path, TestResult, 0)
    assert [r.id for r in rows] == ["a"] and offset == len(first.encode()) + 1
    with path.open("a") as f:
        f.write(second[30:] + "\n")
    rows, end = read_jsonl_from(path, TestResult, offset)
    assert [r.id for r in rows] == ["b"] and end == path.stat().st_size
    assert read_jsonl_from(path, TestResult, end) == ([], end)
    with path.open("a") as f:
        f.write("not json\n")
    with pytest.raises(ConfigError) as info:
        read_jsonl_from(path, TestResult, end)
    assert info.value.file == str(path) and "after byte" in str(info.value)


def test_the_view_reads_a_replaced_file_again(tmp_path):
    run = _run(tmp_path / "r", [_result("a"), _result("b")], summary=False)
    view = ViewServer(run)
    try:
        first = view.since(0, "")
        assert [r["id"] for r in first["rows"]] == ["a", "b"] and first["summary"] is None
        assert view.since(first["offset"], first["file"])["rows"] == []
        # --resume rewrites the file (a new file under the same name): read from the start.
        (run / "results.jsonl").unlink()
        _run(run, [_result("c"), _result("d"), _result("e")])  # longer than the old one
        again = view.since(first["offset"], first["file"])
        assert again["reset"] and [r["id"] for r in again["rows"]] == ["c", "d", "e"]
        assert again["summary"]["suite"] == EVIL
    finally:
        view.httpd.server_close()


def test_a_folder_without_results_is_one_line_naming_it(tmp_path):
    with pytest.raises(ConfigError) as info:
        write_report([tmp_path], tmp_path / "r.html")
    assert info.value.file == str(tmp_path) and "results.jsonl" in str(info.value)


def test_a_trials_output_is_one_test_per_prompt_with_its_trials(tmp_path):
    from gradebox.drivers.batch import GradedRecord
    from gradebox.report.html import load_run

    def graded(key: str, line: int, passed: bool) -> GradedRecord:
        status = "passed" if passed else "failed"
        result = GraderResult(name="hint", status=status, passed=passed, score=float(passed))
        return GradedRecord.model_validate({
            "id": key, "line": line, "input": "Find the CEO", "output": EVIL, "pass": passed,
            "score": float(passed), "status": status, "result": result.model_dump(),
        })  # fmt: skip

    rows = [graded("p1", 1, True), graded("p1", 2, False), graded("p1", 3, True),
            graded("p2", 4, False)]  # fmt: skip
    out = tmp_path / "trials.jsonl"
    out.write_text("".join(r.model_dump_json(by_alias=True) + "\n" for r in rows))
    run = load_run(out)
    assert [(t.id, t.status.value) for t in run.results] == [("p1", "passed"), ("p2", "failed")]
    row = page_data([run])["runs"][0]["rows"][0]
    assert row["_trials"]["n"] == 3 and row["_trials"]["c"] == 2  # as `gradebox trials` counts
    assert [t["status"] for t in row["trials"]] == ["passed", "failed", "passed"]
    assert write_report([out], tmp_path / "r.html").is_file()


def test_a_results_file_holding_nan_still_makes_a_report(tmp_path):
    """A results file from elsewhere may hold NaN (the model reads it as a float): the
    report ended in a traceback (ValueError from json.dumps). It is shown as no score."""
    run = tmp_path / "run"
    run.mkdir()
    good = _result("good")
    (run / "results.jsonl").write_text(
        '{"id":"odd","status":"failed","passed":false,"score":NaN}\n'
        + good.model_dump_json()
        + "\n"
    )
    html = write_report([run], tmp_path / "r.html").read_text()
    block = re.search(r'<script type="application/json" id="gradebox-data">(.*?)</script>', html)

    def strict(token: str) -> None:
        raise ValueError(f"{token} is no JSON")

    rows = json.loads(block.group(1), parse_constant=strict)["runs"][0]["rows"]
    assert [(r["id"], r.get("score")) for r in rows] == [("odd", None), ("good", 1.0)]
    assert script_json({"x": float("inf"), "y": [float("nan"), 0.5]}) == '{"x":null,"y":[null,0.5]}'


def test_a_port_in_use_is_one_line_not_a_traceback(tmp_path):
    import socket

    (tmp_path / "results.jsonl").write_text(_result("a").model_dump_json() + "\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"cannot listen on 127.0.0.1:{port}"):
            ViewServer(tmp_path, port=port)
    server = ViewServer(tmp_path)  # control: a free port
    server.httpd.server_close()


def test_a_runs_summary_or_plan_named_stands_for_its_folder(tmp_path):
    """`gradebox report run/summary.json` was read as a results file ("not a valid result;
    refusing to resume over it"): a run folder's summary or plan, named, is its run."""
    from gradebox.report.html import load_run as load_page_run

    run = _run(tmp_path / "run", [_result("a"), _result("b", False)])
    (run / "plan.json").write_text(json.dumps({"gradebox_plan": 1, "tests": ["a", "b", "c"]}))
    for named in (run / "summary.json", run / "plan.json"):
        loaded = load_page_run(named)
        assert loaded.name == "run" and [r.id for r in loaded.results] == ["a", "b"]
        assert loaded.plan == ["a", "b", "c"] and loaded.summary is not None
        assert '"id":"b"' in write_report([named], tmp_path / "r.html").read_text()
    assert len(load_page_run(run / "results.jsonl").results) == 2  # a results file: itself
