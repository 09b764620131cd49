"""`gradebox view` at a run's edges (issue 42, item 8), in a real headless browser: a run
that has not started yet, its plan's total and the tests not run yet, and the badge saying
running, finished, interrupted or stale (green only while running). Run folders written
here (no container needed), the run's lock held as `gradebox run` holds it."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import expect

from gradebox.report.view import ViewServer
from tests.browser.conftest import DOCS_IMG
from tests.unit.test_live_view import Held, plan, result, summary

WAIT = 30_000  # ms: the page polls every second; a loaded machine may take a few


def badge(page: object):
    return page.locator("#live")


def test_a_run_not_started_yet_then_running_then_finished(tmp_path, open_page):
    run = tmp_path / "pr-42"
    server = ViewServer(run, wait=True)
    server.start()
    try:
        w = open_page(server.url, (server.url,))
        page = w.page
        assert page.text_content("h1") == "pr-42"  # its own name, not its parent's
        expect(badge(page)).to_have_attribute("data-state", "waiting")
        expect(badge(page)).to_contain_text("waiting")
        assert "ok" not in page.get_attribute("#live", "class")  # not the green "live"
        run.mkdir()
        with Held(run):
            plan(run, [f"t{i:02}" for i in range(16)])
            (run / "results.jsonl").write_text("".join(result(f"t{i:02}") for i in range(4)))
            expect(badge(page)).to_have_attribute("data-state", "running", timeout=WAIT)
            expect(badge(page)).to_contain_text("4 of 16 tests done", timeout=WAIT)
            assert "ok" in page.get_attribute("#live", "class")
            # every planned test is listed; those not run yet say so
            expect(page.locator("#count")).to_have_text("16 of 16 tests")
            assert page.locator("tbody tr", has_text="not run").count() == 12
            page.screenshot(path=str(DOCS_IMG / "view-running.png"))
            with (run / "results.jsonl").open("a") as f:
                f.write(result("t04", False))
            expect(badge(page)).to_contain_text("5 of 16 tests done", timeout=WAIT)
            (run / "summary.json").write_text(summary(total=16))
        # the process let its lock go: the run is over
        expect(badge(page)).to_have_attribute("data-state", "finished", timeout=WAIT)
        expect(badge(page)).to_contain_text("finished: 5 of 16 tests done")
        assert "ok" not in page.get_attribute("#live", "class")
        w.assert_clean()
    finally:
        server.shutdown()


def test_interrupted_and_stale_runs_say_so(tmp_path, open_page):
    plan(tmp_path, ["a", "b", "c"])
    (tmp_path / "results.jsonl").write_text(result("a"))
    server = ViewServer(tmp_path)
    server.start()
    try:
        w = open_page(server.url, (server.url,))
        page = w.page
        # no process holds it, and it wrote no summary: it was killed
        expect(badge(page)).to_have_attribute("data-state", "stale")
        expect(badge(page)).to_contain_text("1 of 3 tests done")
        assert "down" in page.get_attribute("#live", "class")
        assert "stopped without writing its summary" in page.text_content("dl.meta")
        (tmp_path / "summary.json").write_text(summary(interrupted=True, total=3))
        expect(badge(page)).to_have_attribute("data-state", "interrupted", timeout=WAIT)
        expect(badge(page)).to_contain_text("--resume")
        assert "down" in page.get_attribute("#live", "class")
        page.screenshot(path=str(DOCS_IMG / "view-interrupted.png"))
        w.assert_clean()
    finally:
        server.shutdown()


def test_a_run_of_several_files_is_shown_whole(tmp_path: Path, open_page):
    folders = [
        {"folder": f"{x}.yaml", "suite": name, "file": f"{x}.yaml", "tests": ["t1"]}
        for x, name in (("a", "first"), ("b", "second"))
    ]
    doc = {"gradebox_plan": 1, "suite": "2 suites", "folders": folders}
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    for f in ("a.yaml", "b.yaml"):
        (tmp_path / f).mkdir()
        (tmp_path / f / "results.jsonl").write_text(result("t1"))
    done = (
        summary(total=2).replace('"passed":1', '"passed":2').replace('"not_run":1', '"not_run":0')
    )
    (tmp_path / "summary.json").write_text(done)
    server = ViewServer(tmp_path)
    server.start()
    try:
        w = open_page(server.url, (server.url,))
        page = w.page
        assert page.text_content("#count") == "2 of 2 tests"
        cards = page.text_content(".cards")
        assert "not run" not in cards, cards  # both passed: nothing is "not run"
        assert page.locator("tbody tr", has_text="✔ PASS").count() == 2
        expect(badge(page)).to_have_attribute("data-state", "finished")
        w.assert_clean()
    finally:
        server.shutdown()
