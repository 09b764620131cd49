"""The report on a phone (390 px: the table first, stacked, no sideways scroll) and the small
things issue 42 listed: pytest's output shown once, "1 test", a run with no results yet, a
test not run, a filter that matches nothing. The runs are written by hand through the
results model (no engine needed), shaped as a run of the quickstart's graders is."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gradebox.drivers.runner import PLAN
from gradebox.protocol.models import Check, GraderResult, Status, TestResult
from gradebox.report.html import write_report
from tests.browser.conftest import DOCS_IMG, Watched

PHONE = {"width": 390, "height": 844}
PYTEST = (
    "F.                                                                       [100%]\n"
    "=================================== FAILURES ===================================\n"
    "___________________________________ test_add ___________________________________\n"
    "    def test_add():\n>       assert add(2, 3) == 5\nE       assert None == 5\n"
    "test_calc.py:4: AssertionError\n"
    "=========================== short test summary info ============================\n"
    "FAILED test_calc.py::test_add - assert None == 5\n1 failed, 1 passed in 0.03s"
)
LONG_ID = "agentv-corpus-evals-coding-refactor.eval.yaml: rename-the-module-and-update-every-import"
DIFF = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n-    pass\n+    return a + b  # " + "a very long comment " * 20 + "\n"
)


def _grader(name: str, passed: bool, evidence: str, **kw: object) -> GraderResult:
    status = Status.passed if passed else Status.failed
    return GraderResult(name=name, status=status, passed=passed, score=float(passed),
                        evidence=evidence, **kw)  # fmt: skip


def _test(key: str, passed: bool, ms: int, *graders: GraderResult) -> TestResult:
    status = Status.passed if passed else Status.failed
    return TestResult(id=key, status=status, passed=passed, score=float(passed),
                      graders=list(graders), timings_ms={"total": ms})  # fmt: skip


def _results(flip: bool = False) -> list[TestResult]:
    pytest_failed = _grader(
        "pytest", False, PYTEST, type="script", checks=[Check(text=PYTEST, passed=False)],
        stdout_tail=PYTEST, exit_code=1,
    )  # fmt: skip
    out = [
        _test("fix-add", False, 2400, pytest_failed, _grader("contains 'fixed'", True, "found")),
        _test(LONG_ID, False, 61_000, _grader("llm-rubric", False, "the answer " * 60)),
    ]
    out[0].file_changes = DIFF
    for i in range(8):
        ok = i % 3 != 0 if not (flip and i == 1) else False
        out.append(_test(f"case-{i:02d}", ok, 300 + 90 * i, _grader("equals", ok, "compared")))
    return out


def _write(folder: Path, results: list[TestResult], plan: list[str] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    if plan is not None:
        (folder / PLAN).write_text(json.dumps({"gradebox_plan": 1, "tests": plan}) + "\n")
    return folder


@pytest.fixture
def phone(open_page) -> Callable[[str], Watched]:  # type: ignore[no-untyped-def]
    """``phone(url)`` -> a ``Watched`` page in a 390 px wide phone (``open_page``'s)."""

    def opener(url: str) -> Watched:
        return open_page(url, ("file://",), viewport=PHONE, is_mobile=True, has_touch=True,
                         device_scale_factor=2)  # fmt: skip

    return opener


def _sideways(page: object) -> int:
    """How far the page scrolls sideways past the phone's 390 px (0: not at all). A phone's
    layout viewport grows to a page wider than it (innerWidth 795 for a page 795 px wide),
    so scrollWidth <= innerWidth alone would hold for any page: both are checked."""
    inner, scroll = page.evaluate("[window.innerWidth, document.scrollingElement.scrollWidth]")
    assert inner == PHONE["width"], f"the layout viewport grew to {inner} px: the page is wider"
    return scroll - inner


def _top(page: object, selector: str) -> float:
    return page.locator(selector).first.bounding_box()["y"]


def test_a_phone_gets_the_table_first_stacked_and_no_sideways_scroll(tmp_path, phone):
    a = _write(tmp_path / "main", _results(), plan=[r.id for r in _results()] + ["never-ran"])
    b = _write(tmp_path / "candidate", _results(flip=True))
    one = write_report([a], tmp_path / "one.html").as_uri()
    two = write_report([a, b], tmp_path / "two.html").as_uri()

    w = phone(one)
    page = w.page
    assert page.evaluate("window.innerWidth") == 390
    assert _sideways(page) == 0
    # The tests come right under the header: before the charts.
    assert _top(page, "#h-tests") < _top(page, "#h-charts")
    assert page.evaluate(
        "document.querySelector('header').nextElementSibling.contains("
        "document.getElementById('h-tests'))"
    )
    # Each row stacked: the id spans the row (whole, not cut to a third of 390 px) and the
    # figures under it are labelled.
    toggle = page.locator("button.toggle", has_text="rename-the-module").first
    assert toggle.bounding_box()["width"] > 300
    assert toggle.text_content() == LONG_ID  # whole, wrapped: not cut with an ellipsis
    assert page.evaluate("(e) => e.scrollWidth <= e.clientWidth", toggle.element_handle())
    row = page.locator("tbody tr", has=toggle)
    cells = row.locator("td")
    assert cells.nth(2).evaluate("(e) => getComputedStyle(e, '::before').content") == '"score "'
    why = row.locator("td.why")
    line = float(why.evaluate("(e) => parseFloat(getComputedStyle(e).lineHeight)"))
    assert why.bounding_box()["height"] <= 3 * line + 4  # the reason: three lines at most
    assert why.bounding_box()["y"] > toggle.bounding_box()["y"]  # under the id
    page.screenshot(path=str(DOCS_IMG / "report-phone.png"))
    page.click("button.toggle >> text=fix-add")  # an opened test, its diff's long line too
    assert page.locator("td.detail .diffbody .add").count() == 1
    assert _sideways(page) == 0
    w.assert_clean()

    w2 = phone(two)  # a comparison of two runs: its tables scroll inside themselves
    page = w2.page
    assert page.locator("section[aria-labelledby=h-cmp] table").count() >= 2
    assert _sideways(page) == 0
    assert _top(page, "#h-tests") < _top(page, "#h-cmp")
    page.locator("section[aria-labelledby=h-cmp]").scroll_into_view_if_needed()
    assert _sideways(page) == 0
    # Wide again (a phone turned, a window widened): the desktop's order comes back.
    page.set_viewport_size({"width": 1280, "height": 860})
    assert _top(page, "#h-charts") < _top(page, "#h-tests")
    assert page.evaluate("getComputedStyle(document.querySelector('table.tests')).display") == (
        "table"
    )
    w2.assert_clean()


def test_pytest_output_is_shown_once(tmp_path, open_page):
    run = _write(tmp_path / "run", _results())
    w = open_page(write_report([run], tmp_path / "r.html").as_uri(), ("file://",))
    page = w.page
    page.click("button.toggle >> text=fix-add")
    grader = page.locator(".grader", has=page.locator(".name", has_text="pytest"))
    text = grader.text_content()
    assert text.count("1 failed, 1 passed in 0.03s") == 1, text  # evidence, check, tail: once
    assert grader.locator("h4", has_text="evidence").count() == 1
    assert grader.locator("h4", has_text="stdout").count() == 0
    w.assert_clean()


def test_a_tail_the_evidence_does_not_hold_is_still_shown(tmp_path, open_page):
    # A program grader's JSON evidence and what it printed differ: both stay.
    g = _grader("judge", False, "wrong total", type="program", stdout_tail="debug: total=7",
                checks=[Check(text="the total is 12", passed=False)])  # fmt: skip
    run = _write(tmp_path / "run", [_test("t", False, 5, g)])
    w = open_page(write_report([run], tmp_path / "r.html").as_uri(), ("file://",))
    w.page.click("button.toggle")
    text = w.page.text_content(".grader")
    assert "debug: total=7" in text and "the total is 12" in text
    w.assert_clean()


def test_one_test_a_run_not_started_and_a_test_not_run(tmp_path, open_page):
    one = _write(tmp_path / "one", [_test("only", True, 5, _grader("g", True, "ok"))])
    w = open_page(write_report([one], tmp_path / "one.html").as_uri(), ("file://",))
    page = w.page
    assert page.text_content("#count") == "1 of 1 test"
    charts = page.text_content("section[aria-labelledby=h-charts]")
    assert "Status (1 test)" in charts and "Durations (1 test)" in charts
    assert "1 tests" not in page.text_content("#app")
    w.assert_clean()

    # A run stopped before its first result: its plan lists the tests; nothing was measured.
    empty = _write(tmp_path / "empty", [], plan=["a", "b"])
    (empty / "results.jsonl").unlink()
    w = open_page(write_report([empty], tmp_path / "empty.html").as_uri(), ("file://",))
    page = w.page
    assert page.locator("section[aria-labelledby=h-charts] svg").count() == 0
    assert "No results yet" in page.text_content("section[aria-labelledby=h-charts]")
    cards = page.locator("header .card").all_text_contents()
    assert "–mean score" in cards and "0.000mean score" not in cards, cards
    graders = page.eval_on_selector_all(
        "table.tests tbody tr", "rs => rs.map(r => r.cells[3].textContent)"
    )
    assert graders == ["–", "–"]  # not run: no graders, not "0/0 passed"
    w.assert_clean()


def test_a_filter_that_matches_nothing_says_so(tmp_path, open_page):
    run = _write(tmp_path / "run", _results())
    w = open_page(write_report([run], tmp_path / "r.html").as_uri(), ("file://",))
    page = w.page
    page.fill("#q", "no test holds this")
    assert page.locator("tbody button.toggle").count() == 0
    said = page.text_content("table.tests tbody")
    assert "No test matches these filters (10 tests in all)" in said
    page.uncheck("#f-failed")
    page.click("tbody button.clear")  # the way back: every test, every filter cleared
    assert page.text_content("#count") == "10 of 10 tests"
    assert page.input_value("#q") == "" and page.is_checked("#f-failed")
    w.assert_clean()
