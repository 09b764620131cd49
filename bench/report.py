"""The HTML report on a large run: `python bench/run.py --only report` (or this file alone).

A synthetic 10,000-test run (each test: an input, a 300-character answer, three graders with
evidence and checks, a 1 KB diff, a fifth of them with three trials, each with its own answer,
diff and graders) is written as results.jsonl, then `gradebox report` turns it into one file;
headless Chromium (Debian's chromium-headless-shell, as the tests use) opens it. Measured:
the file's size against the results', the time to write it, the time from navigation until
the table is drawn (the page's own clock, median of N: the script's mark once the table is
drawn, or the load event if later), and then, on the open page, a search over every test
and opening one (wall clock, with Playwright's polling in it). The machine's load average is
printed beside: on a shared machine every figure scales with it.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from gradebox.protocol.models import (
    Check,
    GraderResult,
    Message,
    RunSummary,
    Status,
    TestResult,
    TrialRecord,
)
from gradebox.report.html import write_report

ROOT = Path(__file__).resolve().parents[1]
DIFF = "".join(
    f"diff --git a/src/mod{i}.py b/src/mod{i}.py\n--- a/src/mod{i}.py\n+++ b/src/mod{i}.py\n"
    f"@@ -1,4 +1,4 @@\n def f{i}(x):\n-    return x - {i}\n+    return x + {i}\n \n"
    for i in range(6)
)


def synthetic_run(out: Path, n: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    statuses = [Status.passed] * 6 + [Status.failed] * 3 + [Status.error]
    counts = {s: 0 for s in Status}
    with (out / "results.jsonl").open("w") as f:
        for i in range(n):
            st = statuses[i % len(statuses)]
            counts[st] += 1
            graders = [
                GraderResult(
                    name=name, type="script", status=st if k == 0 else Status.passed,
                    passed=st is Status.passed or k > 0, score=1.0 if st is Status.passed else 0.4,
                    evidence=f"{name}: 12 passed, {i % 3} failed in 0.{i % 9}s " * 3,
                    checks=[Check(text=f"check {j}", passed=(i + j) % 4 != 0) for j in range(3)],
                    exit_code=0, duration_ms=300 + i % 700, backend="oci",
                    stdout_tail="collected 12 items\n" * 4,
                )
                for k, name in enumerate(("pytest", "lint", "notes"))
            ]  # fmt: skip
            trials = (  # each with its own answer, diff and graders, as a repeat run keeps
                [
                    TrialRecord(
                        sample=t, status=statuses[(i + t) % 10], score=0.5,
                        output=f"Trial {t}: I changed mod{i % 6}.py. " * 7, graders=graders,
                        file_changes=DIFF, file_changes_bytes=len(DIFF),
                    )
                    for t in range(3)
                ]
                if i % 5 == 0
                else None
            )  # fmt: skip
            r = TestResult(
                id=f"case-{i:05d}", status=st, passed=st is Status.passed,
                score=1.0 if st is Status.passed else 0.4,
                input=[Message(role="user", content=f"Task {i}: fix the function in mod{i % 6}.")],
                output=f"I changed mod{i % 6}.py so f returns x + n. " * 7,
                graders=graders, file_changes=DIFF, file_changes_bytes=len(DIFF),
                timings_ms={"total": 900 + (i * 37) % 5000}, trials=trials,
                images={"gradebox/python": "sha256:" + "ab" * 32},
                started_at="2026-11-27T12:00:00+00:00", node=f"node-{i % 4}",
            )  # fmt: skip
            f.write(r.model_dump_json() + "\n")
    summary = RunSummary(
        suite="synthetic", run_id="bench", total=n, passed=counts[Status.passed],
        failed=counts[Status.failed], errored=counts[Status.error],
        pass_rate=counts[Status.passed] / n, mean_score=0.8, duration_s=3600.0, workers=8,
        started_at="2026-11-27T12:00:00+00:00", finished_at="2026-11-27T13:00:00+00:00",
    )  # fmt: skip
    (out / "summary.json").write_text(summary.model_dump_json())
    return out


def _chromium() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.browser.conftest import chromium_path

    return chromium_path()


def bench_report(root: Path, n: int = 10_000, repeats: int = 5) -> dict[str, float]:
    from playwright.sync_api import expect, sync_playwright

    run = synthetic_run(root / "run", n)
    t = time.perf_counter()
    html = write_report([run], root / "report.html")
    write_s = time.perf_counter() - t
    drawn = f"{n} of {n} tests"
    loads, searches, opens = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium())
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(html.as_uri())
            expect(page.locator("#count")).to_have_text(drawn, timeout=60_000)
            # The page's own clock from navigation: its script has drawn the table (a mark it
            # sets) and the load event has fired (the first paint follows at once).
            timing = page.evaluate(
                "[performance.getEntriesByName('gradebox-drawn')[0].startTime,"
                " performance.getEntriesByType('navigation')[0].loadEventEnd]"
            )
            loads.append(max(timing))
            t = time.perf_counter()
            page.fill("#q", f"case-{n - 1:05d}")  # a search over every test's text
            expect(page.locator("#count")).to_have_text(f"1 of {n} tests", timeout=60_000)
            searches.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            page.click("button.toggle >> nth=0")
            page.wait_for_selector("td.detail .diffbody")
            opens.append((time.perf_counter() - t) * 1000)
            page.close()
        browser.close()
    results = (run / "results.jsonl").stat().st_size
    return {
        "load_average": os.getloadavg()[0],
        "tests": n,
        "results_bytes": results,
        "report_bytes": html.stat().st_size,
        "size_ratio": html.stat().st_size / results,
        "write_s": write_s,
        "load_ms": statistics.median(loads),
        "load_ms_max": max(loads),
        "search_ms": statistics.median(searches),
        "open_ms": statistics.median(opens),
    }


if __name__ == "__main__":
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gradebox-bench-report-") as where:
        print(json.dumps(bench_report(Path(where)), indent=2))
