"""Red-team: ``gradebox compare --markdown`` writes a pull-request comment, and the unrelated
warning (issue 42) put both runs' suite names in it as written, beside the test ids (in code
spans a backtick ends) and grader names already there: a pull request's suite is its
author's, and ``<img src=…>``, a link or ``**ok**`` in one was drawn as such in a comment
the bot posts. Each is text there, whatever it holds."""

from __future__ import annotations

from markdown_it import MarkdownIt

from gradebox.protocol.models import GraderResult, Status, TestResult
from gradebox.report.compare import compare_runs, markdown, outcomes, unrelated

EVIL = "y` <img src=https://evil.example/p.png> | **ok** [z](https://evil.example) <!-- "
SUITE = "x <img src=https://evil.example/s.png> **ok** [z](https://evil.example)"


def _r(key: str, passed: bool, grader: str) -> TestResult:
    status = Status.passed if passed else Status.failed
    g = GraderResult(name=grader, status=status, passed=passed, score=float(passed))
    return TestResult(id=key, status=status, passed=passed, score=float(passed), graders=[g])


def test_names_in_the_comment_stay_text():
    ids = [f"t{i}" for i in range(12)] + [EVIL, "``", "a\nb", "z`-->"]
    a = outcomes([_r(k, True, EVIL) for k in ids])
    b = outcomes([_r(k, False, EVIL) for k in ids] + [_r(f"new{i}", False, "g") for i in range(20)])
    warning = unrelated("main", a.keys(), "quickstart", "pr", b.keys(), SUITE)
    assert warning is not None
    md = markdown(compare_runs(a, b, seed=0), "main", "pr", 0.05, warning)
    html = MarkdownIt("commonmark").enable("table").render(md)
    for made in ("<img", "<a ", "<!--", "<strong>ok</strong>"):
        assert made not in html, (made, html)
    assert "B is significantly worse" in html and "bootstrap:" in html
    assert html.count("<tr>") == 1 + 2 + 1 + 1  # both tables' rows: no cell split off
    assert html.count("<td>") == 3 * 5
    assert "evil.example/s.png" in html and "evil.example/p.png" in html  # said, as text
