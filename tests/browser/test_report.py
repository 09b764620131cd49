"""The HTML report and the live view, in a real headless browser, over runs of our own
fixtures: the quickstart (and a copy of it with one test made to fail, for a comparison) and
a run whose agent and grader write markup, scripts, links, SVG, right-to-left overrides and
a 1 MB line. The screenshots in docs/img/ are taken here."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from gradebox.drivers.runner import read_results
from gradebox.files.baseline import Baseline
from gradebox.protocol.models import Check, FileChangesNotes, GraderResult, Status, TestResult
from gradebox.report.compare import compare_runs, load_run
from gradebox.report.html import write_report
from gradebox.report.view import ViewServer
from tests.browser.conftest import DOCS_IMG
from tests.unit.test_live_view import Held

pytestmark = pytest.mark.docker  # the runs are real, on the default sandbox
ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests/fixtures/report/hostile"


def gradebox(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def run(suite: Path, out: Path) -> Path:
    p = gradebox("run", suite, "--out", out, "--workers", "2")
    assert p.returncode in (0, 1), p.stdout + p.stderr  # ran; some tests fail on purpose
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The quickstart, a copy of it whose agent fails meaning-of-life, and the hostile run."""
    tmp = tmp_path_factory.mktemp("runs")
    copy = tmp / "quickstart-b"
    shutil.copytree(ROOT / "examples/quickstart", copy)
    suite = copy / "suite.yaml"
    # The agent's answer changes, not the suite's checks: the same grader (``contains '42'``)
    # flips, so the comparison has a flip per grader to show (a changed value renames it).
    agent = copy / "agent.py"
    agent.write_text(agent.read_text().replace("The answer is 42.", "The answer is 43.", 1))
    return {
        "a": run(ROOT / "examples/quickstart/suite.yaml", tmp / "main"),
        "b": run(suite, tmp / "candidate"),
        "hostile": run(HOSTILE / "suite.yaml", tmp / "hostile"),
    }


def report(dirs: list[Path], out: Path) -> str:
    p = gradebox("report", *dirs, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "holds the run's outputs" in p.stderr  # warned before it is published
    return out.as_uri()


def shown(page: object) -> list[str]:
    return page.eval_on_selector_all("tbody button.toggle", "bs => bs.map(b => b.textContent)")


def shot(page: object, first: str, last: str, path: Path) -> None:
    """The page from ``first`` down to the end of ``last``, as a reader scrolled to it sees
    it (an element screenshot would have the sticky filter bar over it)."""
    page.evaluate("window.scrollTo(0, 0)")
    top = page.locator(first).first.bounding_box()
    bottom = page.locator(last).first.bounding_box()
    height = min(bottom["y"] + bottom["height"] - top["y"], 2400)
    clip = {"x": 0, "y": top["y"] - 8, "width": 1280, "height": height + 16}
    page.screenshot(path=str(path), full_page=True, clip=clip)


def count(page: object) -> str:
    return page.text_content("#count")


def searched(page: object) -> None:
    """Wait for the regex search's worker to answer."""
    expect(page.locator("#count")).not_to_contain_text("searching", timeout=30_000)


def test_rows_filters_search_sort_and_the_url(runs, tmp_path, open_page):
    w = open_page(report([runs["a"]], tmp_path / "r.html"), ("file://",))
    page = w.page
    assert count(page) == "3 of 3 tests"
    assert shown(page) == ["purposeful-failures", "fix-add", "meaning-of-life"]  # failed first
    assert page.text_content("header h1") == "quickstart"
    cards = page.text_content("header .cards")
    assert "2✔ PASS" in cards and "1✘ FAIL" in cards and "0! ERROR" in cards
    page.screenshot(path=str(DOCS_IMG / "report-overview.png"), full_page=True)

    page.uncheck("#f-passed")
    assert shown(page) == ["purposeful-failures"]
    page.check("#f-passed")
    page.uncheck("#f-failed")
    assert sorted(shown(page)) == ["fix-add", "meaning-of-life"]
    page.check("#f-failed")
    page.select_option("select[name=grader]", "notes-and-diff")
    assert shown(page) == ["fix-add"]
    page.select_option("select[name=grader]", "")
    page.fill("#q", "MEANING")  # text search: case-insensitive, ids and answers
    assert shown(page) == ["meaning-of-life"]
    # (not the regex grader's own pattern: its name, `regex 'answer is \d+'`, holds that text)
    page.fill("#q", "answer is \\d\\d")
    assert shown(page) == []  # as text, no match
    page.check("#f-re")
    searched(page)  # a regex runs in a worker: its answer comes a moment later
    assert shown(page) == ["meaning-of-life"]
    page.fill("#q", "(")  # a broken regex matches nothing and says so, no error
    assert shown(page) == [] and page.get_attribute("#q", "aria-invalid") == "true"
    page.fill("#q", "")
    page.uncheck("#f-re")
    page.click("th >> text=test")
    assert shown(page) == ["fix-add", "meaning-of-life", "purposeful-failures"]
    page.click("th >> text=score")  # highest first
    assert shown(page)[-1] == "purposeful-failures"

    page.uncheck("#f-error")
    page.fill("#q", "fix")
    # The view is written to the URL as the search answers (a moment later on a loaded
    # machine): expect polls page.url, since the page's CSP refuses wait_for_function's eval.
    expect(page).to_have_url(re.compile(r"q=fix"), timeout=30_000)
    url = page.url
    assert "q=fix" in url and "status=" in url
    again = open_page(url, ("file://",)).page  # a link shows the same view
    assert shown(again) == ["fix-add"] and again.input_value("#q") == "fix"
    assert not again.is_checked("#f-error")
    w.assert_clean()


def test_an_opened_test_shows_its_evidence_and_the_agents_diff(runs, tmp_path, open_page):
    w = open_page(report([runs["a"]], tmp_path / "r.html"), ("file://",))
    page = w.page
    assert page.query_selector("td.detail") is None  # details are built when opened
    page.click("button.toggle >> text=fix-add")
    assert page.get_attribute("button.toggle >> text=fix-add", "aria-expanded") == "true"
    detail = page.locator("td.detail")
    files = detail.locator("ul.filelist li").all_text_contents()
    assert any(f.startswith("calc.py") and "+1" in f for f in files), files
    assert any(f.startswith("NOTES.md") for f in files), files
    added = detail.locator(".diffbody .add").all_text_contents()
    assert "+    return a + b" in added
    text = detail.text_content()
    for shown_text in ("notes-and-diff", "pytest", "I fixed add()", "evidence", "oci"):
        assert shown_text in text, shown_text
    shot(page, "tr.open", "tr.detailrow", DOCS_IMG / "report-test.png")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.press("Escape")
    page.keyboard.press("j")  # keyboard: the first test, the next, back, Enter closes it
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.textContent") == "fix-add"
    page.keyboard.press("Enter")
    assert page.query_selector("td.detail") is None
    assert page.evaluate("document.activeElement.textContent") == "fix-add"  # focus kept
    w.assert_clean()


def test_two_runs_compared(runs, tmp_path, open_page):
    w = open_page(report([runs["a"], runs["b"]], tmp_path / "r.html"), ("file://",))
    page = w.page
    section = page.text_content("section[aria-labelledby=h-cmp]")
    expected = compare_runs(load_run(runs["a"]), load_run(runs["b"]), seed=0)
    assert expected.regressions == ["meaning-of-life"]
    assert f"McNemar p = {expected.p_value:.4f}" in section
    low, high = expected.pass_rate_ci
    assert f"[{low * 100:.1f}, {high * 100:.1f}] pp" in section
    assert "1 pass → fail" in section
    assert page.locator(".flips button").all_text_contents() == ["meaning-of-life"]
    # Flips per grader (issue 32): the graders whose verdict on a test changed, counted each
    # way, as the two results files say.
    a, b = (read_results(runs[k] / "results.jsonl")["meaning-of-life"] for k in ("a", "b"))
    before = {g.name: g.passed for g in a.graders}
    flipped = {g.name for g in b.graders if before.get(g.name) is True and g.passed is False}
    assert flipped, "the fixture's candidate run flips no grader"
    rows = page.eval_on_selector_all(
        "section[aria-labelledby=h-cmp] h4:text-is('per grader') + table tbody tr",
        "rs => rs.map(r => [...r.cells].map(c => c.textContent))",
    )
    assert rows, "no per-grader table"
    counted = {r[0]: (r[5], r[6]) for r in rows if (r[5], r[6]) != ("0", "0")}
    assert counted == {name: ("1", "0") for name in flipped}, rows
    page.check("#f-flips")
    assert shown(page) == ["meaning-of-life"]
    verdicts = page.text_content("table.tests tbody tr:first-child td:nth-child(2)")
    assert verdicts.startswith("✔ PASS ✘ FAIL")  # each run's, as text
    page.locator("section[aria-labelledby=h-cmp]").screenshot(
        path=str(DOCS_IMG / "report-compare.png")
    )
    w.assert_clean()


def _result(key: str, passed: bool) -> TestResult:
    status = Status.passed if passed else Status.failed
    g = GraderResult(name="g", status=status, passed=passed, score=float(passed))
    return TestResult(id=key, status=status, passed=passed, score=float(passed), graders=[g])


def test_the_live_view_picks_up_an_appended_result(runs, tmp_path, open_page):
    run_dir = tmp_path / "live"
    run_dir.mkdir()
    lines = (runs["a"] / "results.jsonl").read_text().splitlines(keepends=True)
    results = run_dir / "results.jsonl"
    results.write_text("".join(lines[:2]))  # a run still going: no summary yet
    server = ViewServer(run_dir)
    server.start()
    held = Held(run_dir).__enter__()  # its lock held, as `gradebox run` holds it
    try:
        w = open_page(server.url, (server.url,))  # every request of the page holds the token
        page = w.page
        assert count(page) == "2 of 2 tests"
        assert "live" in page.text_content("#live")
        page.uncheck("#f-error")
        first = shown(page)[0]
        page.click(f"button.toggle >> text={first}")
        page.evaluate("window.scrollTo(0, 300)")
        url = page.url
        with results.open("a") as f:
            f.write(lines[2])
            f.write(_result("appended-later", False).model_dump_json() + "\n")
        # (expect polls from here: the page's CSP refuses wait_for_function's eval)
        expect(page.locator("#count")).to_have_text("4 of 4 tests", timeout=30_000)
        assert "appended-later" in shown(page)
        assert page.url == url and not page.is_checked("#f-error")  # filters kept
        assert page.get_attribute(f"button.toggle >> text={first}", "aria-expanded") == "true"
        assert page.evaluate("window.scrollY") == 300  # no reload, no jump
        # A partial line (a writer mid-write) waits for its newline.
        with results.open("a") as f:
            f.write(_result("torn", True).model_dump_json()[:40])
        # Three polls answered after the write, not a wait of so many seconds (on a loaded
        # machine no poll may come in it, and the check held whatever the view did): one
        # may have been under way before the write, the next read the torn tail, and the
        # third is asked only once the page has taken in the one before.
        for _ in range(3):
            with page.expect_response(lambda r: "/api/results?" in r.url, timeout=30_000):
                pass
        assert count(page) == "4 of 4 tests"
        assert "ok" in page.get_attribute("#live", "class")  # still following the run
        # The rest of the line: the result is read whole, once (its start was not skipped).
        with results.open("a") as f:
            f.write(_result("torn", True).model_dump_json()[40:] + "\n")
        expect(page.locator("#count")).to_have_text("5 of 5 tests", timeout=30_000)
        assert shown(page).count("torn") == 1
        w.assert_clean()
    finally:
        held.__exit__()
        server.shutdown()


def test_the_view_answers_only_to_its_own_name(tmp_path):
    (tmp_path / "results.jsonl").write_text(_result("a", True).model_dump_json() + "\n")
    server = ViewServer(tmp_path)
    server.start()
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"

        def get(host: str, path: str = "/") -> tuple[int, bytes, dict[str, str]]:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.putrequest("GET", path, skip_host=True)
            conn.putheader("Host", host)
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, resp.read(), dict(resp.getheaders())

        # A page that rebinds its own DNS name to 127.0.0.1 sends its own name as Host.
        mine = f"/{server.token}/"  # the printed URL's path: every request needs its token
        assert get(f"attacker.example:{server.port}", mine)[0] == 403
        assert get("127.0.0.1", mine)[0] == 403
        code, body, headers = get(f"127.0.0.1:{server.port}", mine + "api/results?offset=0&file=")
        assert code == 200 and json.loads(body)["rows"][0]["id"] == "a"
        assert "connect-src 'self'" in headers["Content-Security-Policy"]
        assert get(f"localhost:{server.port}", mine)[0] == 200
        assert get(f"localhost:{server.port}")[0] == 403  # its own name, without the token
    finally:
        server.shutdown()


def _every_text_opened(page: object) -> None:
    """Open every test, every file of every diff, every "show all"."""
    for _ in range(100):  # each click draws the rows again: find the next one each time
        closed = page.query_selector("button.toggle[aria-expanded=false]")
        if closed is None:
            break
        closed.click()
    page.eval_on_selector_all("details", "ds => ds.forEach(d => { d.open = true; })")
    for _ in range(100):
        more = page.query_selector("button.more")
        if more is None:
            break
        more.click()
    assert page.query_selector("button.more, button.toggle[aria-expanded=false]") is None


def test_hostile_outputs_stay_text(runs, tmp_path, open_page):
    # The same strings through a result gradebox did not write: names, a diff, a summary.
    evil = "</script><img src=x onerror=alert(9)>\u202e<svg onload=alert(8)>"
    hand = tmp_path / "hand"
    hand.mkdir()
    r = _result(evil, False)
    r.file_changes = (
        f"diff --git a/{evil} b/{evil}\n--- /dev/null\n+++ b/{evil}\n@@ -0,0 +1 @@\n+{evil}\n"
    )
    r.output, r.metadata = evil, {"target": evil}
    (hand / "results.jsonl").write_text(r.model_dump_json() + "\n")
    url = report([runs["hostile"], hand], tmp_path / "r.html")
    w = open_page(url, ("file://",))
    page = w.page
    page.select_option("select[aria-label='verdicts of run']", "0")
    page.click("#f-passed")  # one test, opened: what a reader of a hostile run sees
    page.click("button.toggle[aria-expanded=false]")
    shot(page, "tr.open", "tr.detailrow", DOCS_IMG / "report-hostile.png")
    page.click("#f-passed")
    _every_text_opened(page)
    page.wait_for_timeout(500)
    text = page.text_content("#app")  # what the page shows (not the data block)
    assert "</script><script>alert('id')</script>" in text  # shown, as text
    assert "onerror=alert('evidence')" in text and "javascript:alert('link')" in text
    assert "<svg onload=alert('svg')><script>alert('svg-script')</script></svg>" in text
    assert "⟦U+202E⟧" in text and "\u202e" not in text  # the override shown, not obeyed
    assert "A" * 1_000_000 in text  # the 1 MB line, whole once asked for
    # Nothing from the run became an element: only our own. (Playwright's screenshots leave
    # an empty style attribute on inputs: hiding the caret.)
    made = page.evaluate(
        '[...document.querySelectorAll(\'img, svg script, script:not([type="application/json"]),'
        " a, iframe, object, embed, style, link, [onerror], [onload], [href], [src],"
        " [style]:not([style=\"\"])')].map(e => e.tagName + (e.id ? '#' + e.id : ''))"
    )
    assert made == ["STYLE", "SCRIPT"], made
    blocks = page.evaluate(
        "[...document.querySelectorAll('script[type=\"application/json\"]')].map(e => e.id)"
    )
    assert blocks == ["gradebox-data", "gbx-0-0", "gbx-0-1", "gbx-1-0"]  # data, never run
    w.assert_clean()


def test_light_and_dark(runs, tmp_path, open_page):
    url = report([runs["a"]], tmp_path / "r.html")
    light = open_page(url, ("file://",)).page
    dark = open_page(url, ("file://",), dark=True).page
    background = "getComputedStyle(document.body).backgroundColor"
    assert light.evaluate(background) == "rgb(255, 255, 255)"
    assert dark.evaluate(background) == "rgb(13, 17, 23)"
    dark.click("button.toggle >> text=fix-add")
    dark.screenshot(path=str(DOCS_IMG / "report-dark.png"))


def test_gradebox_run_writes_the_report(tmp_path):
    out = tmp_path / "site" / "report.html"
    p = gradebox("run", ROOT / "examples/quickstart/suite.yaml", "--out", tmp_path / "o",
                 "--report", out)  # fmt: skip
    assert p.returncode == 1, p.stderr
    html = out.read_text()
    assert "Content-Security-Policy" in html and '"fix-add"' in html
    assert write_report([tmp_path / "o"], tmp_path / "again.html").is_file()


def test_target_node_and_flaky_filters(tmp_path, open_page):
    """What a local run of our fixtures has only one of: targets, cluster nodes, trials (a
    Ray run's and a repeat run's fields, written through the same model)."""
    from gradebox.protocol.models import TrialRecord

    def trial(passes: list[bool]) -> list[TrialRecord]:
        return [
            TrialRecord(sample=i, status=Status.passed if p else Status.failed, score=float(p))
            for i, p in enumerate(passes)
        ]

    rows = []
    for i in range(6):
        r = _result(f"t{i}", i % 2 == 0)
        r.metadata = {"target": "model-a" if i < 3 else "model-b"}
        r.node = f"node-{i % 3}"
        r.trials = trial([True, False, True]) if i == 0 else trial([True, True]) if i == 2 else None
        rows.append(r)
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    w = open_page(report([run], tmp_path / "r.html"), ("file://",))
    page = w.page
    assert count(page) == "6 of 6 tests"
    page.select_option("select[name=target]", "model-b")
    assert sorted(shown(page)) == ["t3", "t4", "t5"]
    page.select_option("select[name=node]", "node-1")
    assert shown(page) == ["t4"]
    page.select_option("select[name=target]", "")
    page.select_option("select[name=node]", "")
    page.check("#f-flaky")
    assert shown(page) == ["t0"]  # passed 2 of 3 trials: flaky; t2 passed both
    marks = page.text_content("table.tests tbody tr:first-child td:nth-child(2)")
    assert "✔✘✔" in marks and "2/3" in marks and "flaky" in marks
    trials = page.text_content("section[aria-labelledby=h-trials]")
    assert "1 flaky" in trials and "pass@k" in trials
    w.assert_clean()


def test_a_regex_that_backtracks_for_ever_does_not_freeze_the_page(tmp_path, open_page):
    """The search is in the URL: a link with a catastrophic regex (`(.+)+X` takes 2^n steps
    on any text without an X) froze the page before it was drawn, for every report. The
    regex runs in a worker that is stopped after 2 s; the page says so and goes on."""
    from urllib.parse import quote

    run = tmp_path / "run"
    run.mkdir()
    rows = [_result("t" * 40 + str(i), i % 2 == 0) for i in range(4)]
    rows[1].output = "the answer is 42, " * 20
    (run / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    url = report([run], tmp_path / "r.html")
    w = open_page(f"{url}#re=1&q={quote('(.+)+X')}", ("file://",))
    page = w.page
    searched(page)
    assert "regex stopped after 2 s" in count(page)
    assert shown(page) == [] and page.get_attribute("#q", "aria-invalid") == "true"
    page.fill("#q", r"answer is \d+")  # control: the page still answers, a fine regex works
    searched(page)
    assert shown(page) == ["t" * 40 + "1"] and count(page) == "1 of 4 tests"
    assert page.get_attribute("#q", "aria-invalid") is None
    page.fill("#q", "(.+)+Y")  # typed, not only linked
    searched(page)
    assert "regex stopped" in count(page) and shown(page) == []
    w.assert_clean()


def _changed(tmp_path: Path, before: dict[bytes, bytes], after: dict[bytes, bytes], cap: int):
    """``file_changes`` and its notes as the host makes them (``Baseline.changes``), for a
    workspace that held ``before`` and then ``after`` (a name mapped to None is deleted)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    root = bytes(ws)

    def put(files: dict[bytes, bytes | None]) -> None:
        for name, data in files.items():
            if data is None:
                os.unlink(root + b"/" + name)
            else:
                with open(root + b"/" + name, "wb") as f:
                    f.write(data)

    put(before)
    base = Baseline.take(ws, store=tmp_path / "store")
    put(after)
    changes = base.changes(cap)
    base.discard()
    return changes.text, FileChangesNotes.model_validate(changes, from_attributes=True)


def _with_diff(tmp_path: Path, r: TestResult, text: str, notes: FileChangesNotes) -> str:
    r.file_changes, r.file_changes_notes = text, notes
    r.file_changes_bytes = len(text.encode())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.jsonl").write_text(r.model_dump_json() + "\n")
    return report([run_dir], tmp_path / "r.html")


def test_the_verdicts_come_first_and_a_large_diff_is_folded(tmp_path, open_page):
    """An agent that changed 306 files put its test's graders 12,785 px down, under the diff,
    with no way to fold it: the verdicts (failing checks, then evidence) come first, and the
    diff is folded under a summary of it."""
    text, notes = _changed(
        tmp_path, {}, {b"f%03d.py" % i: b"x = 1\n" * 40 for i in range(306)}, 1 << 20
    )
    r = _result("many-files", False)
    r.graders = [
        GraderResult(name="pytest", status=Status.failed, passed=False, score=0.0,
                     evidence="2 of 3 tests failed",
                     checks=[Check(text="test_add fails: 3 != 4", passed=False),
                             Check(text="test_sub", passed=True)]),
        GraderResult(name="lint", status=Status.passed, passed=True, score=1.0),
        GraderResult(name="asserts", status=Status.failed, passed=False, score=0.5, children=[
            GraderResult(name="contains 42", status=Status.failed, passed=False, score=0.0,
                         evidence="no 42 in the answer"),
            GraderResult(name="is-json", status=Status.passed, passed=True, score=1.0)]),
    ]  # fmt: skip
    w = open_page(_with_diff(tmp_path, r, text, notes), ("file://",))
    page = w.page
    page.click("button.toggle")
    verdicts = page.locator("ul.verdicts")
    assert verdicts.locator("> li").count() == 2  # pytest, asserts; lint passed
    said = verdicts.text_content()
    assert "test_add fails: 3 != 4" in said and "contains 42: failed — no 42 in the answer" in said
    assert "test_sub" not in said and "is-json" not in said  # only what failed
    changes = page.locator("details.changes")
    assert "306 files" in changes.locator("summary").text_content()
    assert not changes.evaluate("d => d.open")  # folded
    assert page.locator("details.file").count() == 0  # and not drawn until unfolded
    row = page.locator("tr.open").bounding_box()["y"]
    graders = page.locator("h4.graders-head").bounding_box()["y"]
    assert graders - row < 400, graders - row  # the graders are right below the test
    assert graders < changes.bounding_box()["y"]
    assert graders < page.locator(".grader", has_text="2 of 3 tests failed").bounding_box()["y"]
    shot(page, "tr.open", "tr.detailrow", DOCS_IMG / "report-verdicts-first.png")
    changes.locator("summary").click()
    expect(page.locator("details.file")).to_have_count(200)  # unfolded: drawn, by the page
    w.assert_clean()


def test_what_the_diff_cut_is_said_at_its_top_and_on_each_file(tmp_path, open_page):
    """The header said "306 files, 1,048,637 bytes"; that the diff was cut showed only after
    "show 2000 more lines" nine times, and a file over 4 MiB read "+0 −18125" as if emptied.
    Now the top of the diff says what was cut, where and why, and so does each file."""
    big = b"".join(b"line %05d of a long file that the agent rewrote\n" % i for i in range(18125))
    before = {b"big.txt": big}
    after = {b"big.txt": b"y" * (5 << 20), b"logo.png": b"\x89PNG\x00\xff" * 100}
    after |= {b"src%03d.py" % i: b"print('a line of code')\n" * 150 for i in range(300)}
    text, notes = _changed(tmp_path, before, after, 1 << 20)
    assert notes.size > notes.cap  # the host cut it, and said so
    r = _result("cut", False)
    w = open_page(_with_diff(tmp_path, r, text, notes), ("file://",))
    page = w.page
    page.click("button.toggle")
    changes = page.locator("details.changes")
    summary = changes.locator("> summary").text_content()
    assert "✂ cut at 1,048,576 bytes" in summary, summary  # said even while folded
    changes.locator("> summary").click()
    top = changes.locator("> p.cutnote").first.text_content()
    assert f"the diff is {notes.size:,} bytes" in top and "max_diff" in top, top
    last = changes.locator("details.file").last
    name = last.locator("summary > span").first.text_content()
    assert f"It stops inside {name}" in top and f"of the {notes.paths} paths changed" in top
    assert name.startswith("src") and "✂ cut here" in last.locator("summary").text_content()
    assert "the diff stops in this file" in last.locator("p.cutnote").text_content()
    # The marker is said at the top, not left at the end of the last file's lines.
    assert "file_changes truncated" not in changes.locator(".diffbody").all_text_contents()[-1]
    # The file over 4 MiB: its old lines deleted, and a summary, never "emptied" unsaid.
    bigfile = changes.locator("details.file", has_text="big.txt")
    head = bigfile.locator("summary").text_content()
    assert "−18125" in head and "⚠ not diffed" in head, head
    why = bigfile.locator("p.cutnote").text_content()
    assert f"{5 << 20:,} bytes, over the {4 << 20:,} bytes" in why, why
    png = changes.locator("details.file", has_text="logo.png").locator("p.cutnote")
    assert png.text_content().startswith("binary (600 bytes)")
    assert "Not diffed line by line: 2 files (over 4,194,304 bytes: 1, binary: 1)" in (
        changes.locator("> p.cutnote").nth(1).text_content()
    )
    bigfile.locator("summary").click()
    expect(bigfile.locator(".diffbody .del")).to_have_count(1995)  # 2,000 lines, 5 its header
    shot(page, "details.changes", "details.file >> nth=0", DOCS_IMG / "report-diff-cut.png")
    w.assert_clean()


def test_odd_file_names_are_shown_as_the_file_system_has_them(tmp_path, open_page):
    """A name with a newline read ``"b/evil\\nname‹svg…>.md"`` (git's quoting, prefix and
    all), one with a space kept git's trailing tab: each is shown as the file system has it
    (the host notes the real path of each name git quotes), control characters as marks."""
    evil = "evil\nname\u2039svg onload=alert(1)\u2026>.md"
    names = [evil.encode(), b"tab at the end\t", b"sp ace.txt", b'q"uo\\te\x01', b"caf\xe9.txt"]
    text, notes = _changed(tmp_path, {}, {n: b"x\n" for n in names}, 1 << 20)
    assert '"b/evil\\nname' in text  # what git wrote
    w = open_page(_with_diff(tmp_path, _result("names", False), text, notes), ("file://",))
    page = w.page
    page.click("button.toggle")
    listed = page.locator("ul.filelist li").all_text_contents()
    assert sorted(x.split(" +")[0] for x in listed) == sorted(
        [
            "evil⟦U+000A⟧name\u2039svg onload=alert(1)\u2026>.md",
            "tab at the end⟦U+0009⟧",
            "sp ace.txt",  # no tab after it
            'q"uo\\te⟦U+0001⟧',
            "caf\\xe9.txt",  # a byte not UTF-8, as \xNN (as the diff's text has it)
        ]
    ), listed
    heads = page.locator("details.file > summary > span:first-child").all_text_contents()
    assert "evil⟦U+000A⟧name\u2039svg onload=alert(1)\u2026>.md" in heads, heads
    assert page.locator("details.file .bidi[title='a control character']").count() == 3
    assert page.locator("svg[onload]").count() == 0
    shot(page, "details.changes", "ul.filelist", DOCS_IMG / "report-diff-names.png")
    w.assert_clean()


def test_a_diff_of_thousands_of_files_is_drawn_a_page_at_a_time(tmp_path, open_page):
    """A 1 MiB diff (the cap) can name 11,000 files: every one was drawn when the test was
    opened (100,000 elements, seconds of a frozen page). 200 are drawn, then on request."""
    run = tmp_path / "run"
    run.mkdir()
    diff = "".join(
        f"diff --git a/f{i} b/f{i}\nnew file mode 100644\n--- /dev/null\n+++ b/f{i}\n"
        f"@@ -0,0 +1 @@\n+line {i}\n"
        for i in range(1000)
    )
    r = _result("many", False)
    r.file_changes = diff
    (run / "results.jsonl").write_text(r.model_dump_json() + "\n")
    w = open_page(report([run], tmp_path / "r.html"), ("file://",))
    page = w.page
    page.click("button.toggle")
    assert "1000 files" in page.text_content(".opened")
    page.click("details.changes > summary")  # folded: 6,000 lines
    expect(page.locator("details.file")).to_have_count(200)
    assert page.locator(".filelist li").count() == 200
    page.click("text=show 200 more files (800 not shown)")
    assert page.locator("details.file").count() == 400
    for _ in range(3):
        page.click("text=show 200 more files")
    assert page.locator("details.file").count() == 1000  # every file, on request
    assert page.locator("text=more files").count() == 0
    assert page.locator("details.file").last.text_content().startswith("f999")
    w.assert_clean()


def _trial_run(output: str, passed: bool, evidence: str) -> TestResult:
    r = _result("flaky-answer", passed)
    r.output, r.graders[0].evidence = output, evidence
    return r


def test_trials_open_as_tabs_failing_first_and_search_reads_every_trial(tmp_path, open_page):
    """A `repeat: 3` test (its runs added up by `repeat.best_of`, as a run does) shows a tab
    per trial, the failing ones first, each with its own answer and graders; the search
    finds a failed trial's answer, which the result's own (the best run's) does not hold. A
    result from before trials kept their answers still opens, with the verdicts listed."""
    from gradebox.lifecycle.repeat import best_of
    from gradebox.protocol.models import TrialRecord

    evil = "<img src=x onerror=alert(7)>"
    runs = [
        _trial_run("The answer is 42.", True, "found 42"),
        _trial_run(f"I would rather not say {evil}", False, "no 42 in the answer"),
        _trial_run("The answer is 42, surely.", True, "found 42 again"),
    ]
    old = _result("old-run", True)
    old.trials = [TrialRecord(sample=i, status=s, score=float(s is Status.passed))
                  for i, s in enumerate([Status.passed, Status.failed])]  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text(best_of(runs).model_dump_json() + "\n"
                                       + old.model_dump_json() + "\n")  # fmt: skip
    w = open_page(report([run], tmp_path / "r.html"), ("file://",))
    page = w.page
    page.fill("#q", "rather not say")  # only the failed trial said it
    assert shown(page) == ["flaky-answer"]
    page.click("button.toggle >> text=flaky-answer")
    tabs = page.locator("td.detail [role=tab]")
    assert tabs.all_text_contents() == ["✘ trial 2 0.00", "✔ trial 1 1.00", "✔ trial 3 1.00"]
    assert tabs.first.get_attribute("aria-selected") == "true"
    panel = page.locator("td.detail [role=tabpanel]")
    assert f"I would rather not say {evil}" in panel.text_content()  # shown, as text
    assert "no 42 in the answer" in panel.text_content()  # its grader's evidence
    assert "flaky" in page.text_content("td.detail .opened")
    shot(page, "tr.open", "tr.detailrow", DOCS_IMG / "report-trials.png")
    tabs.nth(2).click()
    assert tabs.nth(2).get_attribute("aria-selected") == "true"
    assert tabs.first.get_attribute("aria-selected") == "false"
    assert "The answer is 42, surely." in panel.text_content()
    assert "found 42 again" in panel.text_content() and "rather not" not in panel.text_content()
    page.keyboard.press("ArrowLeft")  # the tabs' keys: the focused tab moves, and shows
    assert tabs.nth(1).get_attribute("aria-selected") == "true"
    assert "found 42" in panel.text_content()
    assert page.locator("td.detail img").count() == 0
    page.fill("#q", "")
    page.click("button.toggle >> text=old-run")  # an old result: its verdicts, no tabs
    old_detail = page.locator("tr.detailrow").last
    assert "trial 2: failed" in old_detail.text_content()
    assert old_detail.locator("[role=tab]").count() == 0
    w.assert_clean()


def test_a_trials_output_opens_with_every_trials_answer(tmp_path, open_page):
    """`gradebox trials -o` keeps every graded answer: the report shows each as a tab (the
    failing one first) and its search finds a failed trial's answer ("four", not "4")."""
    inline = ROOT / "examples" / "inline"
    out = tmp_path / "trials-out.jsonl"
    p = gradebox("trials", inline / "trials.jsonl", "-g", inline / "hint-grader.py", "-k", "3",
                 "-o", out)  # fmt: skip
    assert p.returncode == 0, p.stderr
    w = open_page(report([out], tmp_path / "r.html"), ("file://",))
    page = w.page
    page.fill("#q", "four")
    assert shown(page) == ["p1"]
    page.click("button.toggle >> text=p1")
    tabs = page.locator("td.detail [role=tab]").all_text_contents()
    assert tabs == ["✘ trial 2 0.00", "✔ trial 1 1.00", "✔ trial 3 1.00"]
    panel = page.text_content("td.detail [role=tabpanel]")
    assert "four" in panel and "Missing hint" in panel
    w.assert_clean()
