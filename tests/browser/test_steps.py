"""The agent's steps (issue 42, item 7): a test whose agent reported a transcript shows it as
a timeline (each message, each tool call with its arguments and result) with the trace checks
that read it beside it, each linked to the calls its verdict names. The runs are real (the
runner, a replay target answering from recorded transcripts, the checks on the host); no
container is started."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import expect

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.report.html import write_report
from gradebox.suite import load_suite
from tests.browser.conftest import DOCS_IMG
from tests.browser.test_report import shot
from tests.conftest import write
from tests.unit.test_host_targets import NoContainers

EVIL = "</script><img src=x onerror=alert(7)>\u202eexe.txt<svg onload=alert(6)>"


def _call(tool: str, args: object, output: object = None, ms: int | None = None) -> dict:
    call: dict = {"tool": tool, "input": args}
    if output is not None:
        call["output"] = output
    if ms is not None:
        call["durationMs"] = ms
    return call


def _record(test_id: str, messages: list[dict]) -> str:
    return json.dumps({
        "schema_version": "agentv.replay_fixture.v1", "suite": "steps", "test_id": test_id,
        "source_target": "live", "output": messages,
        "token_usage": {"input": 1200, "output": 340}, "duration_ms": 4200,
    })  # fmt: skip


WEATHER = [
    {"role": "user", "content": "What is the weather in Paris tomorrow?"},
    {"role": "assistant", "content": "I will look it up.", "durationMs": 800,
     "tokenUsage": {"input": 400, "output": 30},
     "tool_calls": [_call("search", {"query": "weather Paris", "limit": 5},
                          ["meteo.example: Paris, sunny, 24°C"], 40)]},
    {"role": "assistant", "content": "",
     "tool_calls": [_call("fetch", {"url": "https://meteo.example/paris"},
                          "Tomorrow: sunny spells, 24°C, wind 10 km/h.\n" * 40, 900)]},
    {"role": "assistant", "content": "Tomorrow in Paris: sunny, around 24°C."},
]  # fmt: skip
HOSTILE = [
    {"role": f"assistant{EVIL}", "content": f"plan {EVIL}",
     "tool_calls": [_call(f"Bash{EVIL}", {"command": f"echo {EVIL}", EVIL: EVIL}, EVIL)]},
    {"role": "assistant", "content": f"done {EVIL}"},
]  # fmt: skip
LONG = [{"role": "user", "content": "count to 120"}] + [
    {"role": "assistant", "content": f"step {i}", "tool_calls": [_call("count", {"n": i}, str(i))]}
    for i in range(120)
]

SUITE = """\
providers: [agent]
prompts: ['{{ q }}']
tests:
  - id: weather
    vars: {q: weather}
    assert:
      - type: tool-trajectory
        mode: in_order
        expected: [{tool: search}, {tool: fetch, max_duration_ms: 1000}]
      - {type: skill-trigger, skill: meteo}
      - {type: trajectory:tool-used, value: fetch}
      - {type: execution-metrics, max_tool_calls: 5}
      - {type: contains, value: sunny}
  - id: hostile
    vars: {q: x}
    assert:
      - {type: trajectory:tool-used, value: {pattern: '^Bash'}}
  - id: long
    vars: {q: x}
    assert:
      - {type: trajectory:tool-args-match, value: {name: count, args: {n: 110}}}
  - id: plain
    vars: {q: x}
    assert: [{type: contains, value: fine}]
"""


def _run(tmp: Path) -> Path:
    records = [_record("weather", WEATHER), _record("hostile", HOSTILE), _record("long", LONG),
               _record("plain", [{"role": "assistant", "content": "all fine"}])]  # fmt: skip
    write(tmp / ".agentv" / "rec.jsonl", "\n".join(records) + "\n")
    write(tmp / ".agentv" / "providers.yaml",
          "- {id: replay, label: agent, fixtures: rec.jsonl, source_target: live}\n")  # fmt: skip
    path = write(tmp / "evals" / "steps.eval.yaml", SUITE)
    out = tmp / "out"
    run_suite(load_suite(path), NoContainers(), NoContainers(), RunOptions(out))
    return out


def _open(tmp: Path, open_page, test_id: str):
    out = _run(tmp)
    w = open_page(write_report([out], tmp / "r.html").as_uri(), ("file://",))
    w.page.click(f"button.toggle >> text={test_id}")
    return out, w


def test_the_timeline_shows_the_tool_calls_and_the_checks_beside_them(tmp_path, open_page):
    out, w = _open(tmp_path, open_page, "weather")
    page = w.page
    steps = page.locator("td.detail section.steps")
    assert steps.locator("h4").first.text_content() == "steps: 4 messages, 2 tool calls"
    roles = steps.locator("li.step .role").all_text_contents()
    assert roles == ["user", "assistant", "assistant", "assistant"]
    calls = steps.locator(".call")
    assert calls.count() == 2
    first = calls.nth(0).text_content()
    for text in ("search", "call #0", "40 ms", '"query": "weather Paris"', "meteo.example"):
        assert text in first, (text, first)
    assert "400 in, 30 out tokens" in steps.locator("li.step").nth(1).text_content()
    second = calls.nth(1)
    assert "fetch" in second.text_content() and "900 ms" in second.text_content()
    folded = second.locator("details.result")  # a long result folds
    assert not folded.evaluate("d => d.open") and "Tomorrow" not in folded.text_content()
    folded.locator("summary").click()
    expect(folded).to_contain_text("Tomorrow: sunny spells")  # drawn on the toggle event

    # The checks beside it: every trace check of the test, its verdict, the calls it names.
    aside = steps.locator("aside.readers")
    names = aside.locator(".reader-check .name").all_text_contents()
    result = read_results(out / "results.jsonl")["weather"]
    assert names == [g.name for g in result.graders if g.type == "trace"]
    trajectory = aside.locator(".reader-check", has_text="tool-trajectory")
    assert "✔ PASS" in trajectory.text_content()
    assert trajectory.locator("button.call-link").all_text_contents() == ["#0 search", "#1 fetch"]
    skill = aside.locator(".reader-check", has_text="skill-trigger")
    assert "✘ FAIL" in skill.text_content() and "no tool calls" not in skill.text_content()
    metrics = aside.locator(".reader-check", has_text="execution-metrics")
    assert "reads the whole run" in metrics.text_content()
    # Each call says which checks named it; a link takes the reader to its call.
    assert "tool-trajectory" in calls.nth(0).locator(".reader").first.text_content()
    used = aside.locator(".reader-check", has_text="tool-used")
    used.locator("button.call-link").click()
    assert "hit" in second.get_attribute("class")
    assert page.evaluate("document.activeElement.dataset.call") == "1"
    # A test whose agent said no more than its answer has no steps.
    page.click("button.toggle >> text=plain")
    plain = page.locator("tr.detailrow", has_text="all fine")
    assert plain.locator("section.steps").count() == 0
    page.click("button.toggle >> text=plain")
    trajectory.locator("button.call-link").first.click()
    shot(page, "section.steps", "section.steps", DOCS_IMG / "report-steps.png")
    w.assert_clean()


def test_a_long_transcript_folds_and_a_link_draws_its_call(tmp_path, open_page):
    _, w = _open(tmp_path, open_page, "long")
    steps = w.page.locator("td.detail section.steps")
    assert "121 messages, 120 tool calls" in steps.locator("h4").first.text_content()
    assert steps.locator("li.step").count() == 40  # the rest on request
    more = steps.locator("button.more", has_text="more messages")
    assert "81 not shown" in more.text_content()
    link = steps.locator("button.call-link")
    assert link.all_text_contents() == ["#110 count"]
    link.click()  # the call is past what was drawn: drawn up to it, and shown
    assert steps.locator("li.step").count() == 112
    hit = steps.locator(".call.hit")
    assert hit.count() == 1 and "call #110" in hit.text_content()
    more.click()
    assert steps.locator("li.step").count() == 121 and more.count() == 0
    w.assert_clean()


def test_hostile_steps_stay_text(tmp_path, open_page):
    _, w = _open(tmp_path, open_page, "hostile")
    page = w.page
    steps = page.locator("td.detail section.steps")
    text = steps.text_content()
    shown = EVIL.replace("\u202e", "⟦U+202E⟧")
    assert f"Bash{shown}" in text and f"echo {shown}" in text and f"plan {shown}" in text
    assert f"assistant{shown}" in text  # the role, as text; its class is ours
    assert "\u202e" not in text
    assert steps.locator("li.step").first.get_attribute("class") == "step role-other"
    assert steps.locator("button.call-link").all_text_contents() == [f"#0 Bash{shown}"]
    made = page.evaluate(
        '[...document.querySelectorAll(\'img, svg script, script:not([type="application/json"]),'
        " a, iframe, object, embed, [onerror], [onload], [href], [src]')].map(e => e.tagName)"
    )
    assert made == ["SCRIPT"], made  # our own script, nothing of the agent's
    w.assert_clean()
