"""Several runs on one page (issue 42, items 5 and 6), in a real headless browser: an opened
test shows each run in a labelled column (verdict, answer, evidence, each grader by name),
and runs that share few tests or ran different suites are warned about at the top. Run
folders written here (no container needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gradebox.protocol.models import GraderResult, RunSummary, Status, TestResult
from tests.browser.conftest import DOCS_IMG

MARKUP = "<b id=bold>43</b><img src=x onerror=alert(1)>"


def _grader(name: str, passed: bool, evidence: str) -> GraderResult:
    status = Status.passed if passed else Status.failed
    return GraderResult(
        name=name, status=status, passed=passed, score=float(passed), evidence=evidence
    )


def _test(key: str, answer: str, graders: list[GraderResult]) -> TestResult:
    passed = all(g.passed for g in graders)
    status = Status.passed if passed else Status.failed
    return TestResult(
        id=key, status=status, passed=passed, score=sum(g.score for g in graders) / len(graders),
        output=answer, graders=graders,
    )  # fmt: skip


def _run(folder: Path, suite: str, results: list[TestResult]) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    passed = sum(r.passed for r in results)
    (folder / "summary.json").write_text(
        RunSummary(
            suite=suite, run_id=folder.name, total=len(results), passed=passed,
            failed=len(results) - passed, errored=0, pass_rate=passed / len(results),
            mean_score=0.5, duration_s=1.0, workers=1, started_at="2026-01-01T00:00:00Z",
            finished_at="2026-01-01T00:00:01Z",
        ).model_dump_json()
    )  # fmt: skip
    return folder


def _others(n: int, prefix: str = "t") -> list[TestResult]:
    return [_test(f"{prefix}{i}", "ok", [_grader("contains-42", True, "found")]) for i in range(n)]


def _main(tmp: Path) -> Path:
    meaning = _test(
        "meaning-of-life",
        "The answer is 42.",
        [_grader("contains-42", True, "found '42'"), _grader("polite", True, "says please")],
    )
    return _run(tmp / "main", "quickstart", [meaning, *_others(3)])


def _pr(tmp: Path) -> Path:
    meaning = _test(
        "meaning-of-life",
        f"The answer is {MARKUP}.",
        [
            _grader("contains-42", False, "no '42' in the answer"),
            _grader("polite", True, "says please"),
            _grader("length", True, "short enough"),
        ],
    )
    new = _test("new-test", "x" * 3000, [_grader("contains-42", False, "no " + "y" * 3000)])
    return _run(tmp / "pr-42", "quickstart", [meaning, *_others(3), new])


def report(dirs: list[Path], out: Path) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "gradebox", "report", *map(str, dirs), "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return out.as_uri()


def _cells(page: object, label: str) -> list[str]:
    """The cells (one per run) of the side-by-side row labelled ``label``."""
    return page.eval_on_selector_all(
        "table.side tr.label",
        "(trs, label) => trs.filter(tr => tr.textContent.startsWith(label))"
        ".map(tr => [...tr.nextElementSibling.cells].map(c => c.textContent))[0] || null",
        label,
    )


def test_an_opened_test_shows_each_run_side_by_side(tmp_path, open_page):
    url = report([_main(tmp_path), _pr(tmp_path)], tmp_path / "r.html")
    w = open_page(url, ("file://",))
    page = w.page
    page.click("button.toggle >> text=meaning-of-life")
    heads = page.locator("table.side thead th").all_text_contents()
    assert heads == ["1: main (baseline)", "2: pr-42"]
    verdicts = _cells(page, "verdict")
    assert verdicts[0].startswith("✔ PASS · main") and verdicts[1].startswith("✘ FAIL · pr-42")
    answers = _cells(page, "answer")
    assert answers == ["The answer is 42.", f"The answer is {MARKUP}."]  # text, not markup
    assert page.query_selector("#bold, td.detail img") is None
    labels = page.locator("table.side tr.label").all_text_contents()
    graders = [x for x in labels if x.startswith("grader")]
    # aligned by name, the baseline's order first; a changed verdict says so
    assert graders == [
        "grader contains-42 · differs between runs",
        "grader polite",
        "grader length · differs between runs",
    ]
    contains = _cells(page, "grader contains-42")
    assert "found '42'" in contains[0] and "no '42' in the answer" in contains[1]
    assert contains[0].startswith("✔ PASS") and contains[1].startswith("✘ FAIL")
    assert _cells(page, "grader length")[0] == "no grader of this name in this run"
    # the table's own badges say whose verdict each is
    titles = page.eval_on_selector_all(
        "tr.open td:nth-child(2) .badge", "bs => bs.map(b => b.title)"
    )
    assert titles == ["1: main (baseline): passed", "2: pr-42: failed"]
    page.evaluate("window.scrollTo(0, 0)")
    top = page.locator("tr.open").bounding_box()
    bottom = page.locator("table.side").bounding_box()
    page.screenshot(
        path=str(DOCS_IMG / "report-side-by-side.png"),
        full_page=True,
        clip={"x": 0, "y": top["y"] - 8, "width": 1280,
              "height": bottom["y"] + bottom["height"] - top["y"] + 16},
    )  # fmt: skip
    # A phone-narrow screen stacks the columns, each cell labelled with its run.
    page.set_viewport_size({"width": 420, "height": 860})
    assert page.locator("table.side thead").is_hidden()  # each cell says its run instead
    cell = page.locator("table.side tr.cells td").first
    assert cell.evaluate("td => getComputedStyle(td).display") == "block"
    assert cell.evaluate("td => getComputedStyle(td, '::before').content") == '"1: main (baseline)"'
    first, second = page.locator("table.side tr.cells").first.locator("td").all()
    assert second.bounding_box()["y"] > first.bounding_box()["y"]  # one under the other
    # A test one run did not run: said once, the other run's column whole (and its long
    # unbroken lines wrapped inside it).
    page.set_viewport_size({"width": 1280, "height": 860})
    page.click("button.toggle >> text=meaning-of-life")
    page.click("button.toggle >> text=new-test")
    assert _cells(page, "verdict")[0] == "not run in this run"
    assert _cells(page, "answer") == ["", "x" * 3000]
    assert _cells(page, "grader contains-42")[0] == ""
    cells = page.locator("table.side tr.cells").first.locator("td").all()
    left, right = (c.bounding_box() for c in cells)
    why = page.locator("table.side tr.cells").nth(1).locator("td").last
    assert why.evaluate("td => td.scrollWidth <= td.clientWidth")  # wrapped, not spilling
    assert left["x"] + left["width"] <= right["x"] + 1
    w.assert_clean()


def test_one_run_opened_shows_no_columns(tmp_path, open_page):
    w = open_page(report([_main(tmp_path)], tmp_path / "r.html"), ("file://",))
    page = w.page
    page.click("button.toggle >> text=meaning-of-life")
    assert page.query_selector("table.side") is None  # a single run: its detail as before
    assert "found '42'" in page.text_content("td.detail")
    w.assert_clean()


def test_unrelated_runs_are_warned_about_at_the_top(tmp_path, open_page):
    main = _main(tmp_path)
    # Another suite that happens to have a test of the same id, and five of its own.
    other = _run(tmp_path / "translation", "translation", [*_others(1), *_others(5, "fr-")])
    w = open_page(report([main, other], tmp_path / "r.html"), ("file://",))
    page = w.page
    shown = page.query_selector("header .warning.unrelated")
    assert shown is not None, "no warning that the runs look unrelated"
    note = shown.text_content()
    assert note == (
        "These runs may not be comparable. main and translation look unrelated: they ran "
        "different suites ('quickstart' and 'translation') and share only 1 of their 9 tests; "
        "the comparison covers only the 1 test both ran."
    )
    # named for both suites, not the last run's alone
    assert page.text_content("header h1") == "quickstart vs translation"
    assert page.title() == "gradebox: quickstart vs translation"
    # at the top: above the figures that compare them
    assert (
        page.locator("header .warning.unrelated").bounding_box()["y"]
        < page.locator("header .cards").bounding_box()["y"]
    )
    page.locator("header").screenshot(path=str(DOCS_IMG / "report-unrelated.png"))
    w.assert_clean()
    related = open_page(report([main, _pr(tmp_path)], tmp_path / "r2.html"), ("file://",)).page
    assert related.query_selector(".warning.unrelated") is None  # the same suite, every test
    assert related.text_content("header h1") == "quickstart"
