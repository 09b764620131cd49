"""file_changes over a hostile workspace is bounded: a file under thousands of names is read
and diffed once, a file too large to diff line by line is summarised, the text to compare is
counted before git runs, git runs under a memory cap and the whole step under a time budget;
past a bound the step is an error that names it (issue 30, class 8). Each hostile workspace
is cheap on disk (hard links, one file); bounded time is shown by the outcome, not a clock."""

from __future__ import annotations

import os

import pytest

from gradebox.errors import WorkspaceError
from gradebox.files import baseline
from gradebox.files.baseline import Baseline
from tests.conftest import write

LINE = b"y" * 63 + b"\n"


def _take(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "keep.txt", "keep\n")
    return ws, Baseline.take(ws, store=tmp_path / "store")


def test_a_file_under_20000_names_is_read_and_diffed_once(tmp_path):
    """2 MiB of text under 20,000 names: diffed under each it was 40 GB for git (past any
    time budget); shown once in full and as a one-line note under every other name."""
    ws, base = _take(tmp_path)
    (ws / "big.txt").write_bytes(LINE * (2 << 14))
    (ws / "links").mkdir()
    for i in range(20_000):
        os.link(ws / "big.txt", ws / "links" / f"{i:05d}")
    diff = base.diff(cap=64 << 20)
    assert diff.count("+" + LINE.decode()) == 2 << 14  # the text, once
    assert diff.count("another name (hard link) of big.txt, shown there") == 20_000
    assert "b/links/00000" in diff and "b/links/19999" in diff


def test_a_changed_hard_linked_file_shows_its_change(tmp_path):
    """The control: the first name shows the change line by line, the other names that the
    file changed (their note names its new content)."""
    ws = tmp_path / "ws"
    write(ws / "a.txt", "old\n")
    os.link(ws / "a.txt", ws / "b.txt")
    base = Baseline.take(ws, store=tmp_path / "store")
    with open(ws / "a.txt", "w") as f:  # the same file, under both names
        f.write("new\n")
    diff = base.diff()
    assert "-old\n+new\n" in diff
    assert diff.count("another name (hard link) of a.txt, shown there") == 2  # b.txt's, -/+


@pytest.mark.parametrize(
    "content",
    [
        b"\n" * (32 << 20),  # 33 M lines: git needed ~1.4 GB to diff it (44 bytes a line)
        b"\n" * (baseline.DIFF_FILE_LINES + 1),  # a small file with too many lines
        LINE * ((baseline.DIFF_FILE_BYTES >> 6) + 1),  # too many bytes
    ],
    ids=["32MiB-of-newlines", "lines", "bytes"],
)
def test_a_file_too_large_to_diff_line_by_line_is_summarised(tmp_path, content):
    ws, base = _take(tmp_path)
    (ws / "huge.txt").write_bytes(content)
    diff = base.diff(cap=64 << 20)
    lines = content.count(b"\n")
    assert f"+[gradebox: text, {len(content)} bytes, {lines} lines: past" in diff
    assert len(diff) < 4096


def test_the_text_to_compare_is_counted_before_git_diffs_it(tmp_path, monkeypatch):
    """Past DIFF_TOTAL_BYTES of changed text the diff is not made: an error naming the limit
    (and the control, under the limit, is diffed)."""
    monkeypatch.setattr(baseline, "DIFF_TOTAL_BYTES", 1 << 20)
    ws, base = _take(tmp_path)
    (ws / "a.txt").write_bytes(LINE * (6 << 10))  # 384 KiB: under
    assert "+" + LINE.decode() in base.diff()
    (ws / "b.txt").write_bytes(LINE * (6 << 10))
    (ws / "c.txt").write_bytes(LINE * (6 << 10))  # 1.1 MiB in all: over
    with pytest.raises(WorkspaceError, match=r"past the limit of 1,048,576 bytes a diff may"):
        base.diff()


def test_git_runs_under_its_memory_cap(tmp_path, monkeypatch):
    """A diff git needs more memory for than its cap: an error naming the cap, never a host
    that swaps (the bounds on files are lifted here to reach git)."""
    monkeypatch.setattr(baseline, "DIFF_FILE_LINES", 1 << 30)
    monkeypatch.setattr(baseline, "DIFF_FILE_BYTES", 1 << 30)
    monkeypatch.setattr(baseline, "DIFF_TOTAL_BYTES", 1 << 30)
    monkeypatch.setattr(baseline, "GIT_MEMORY", 128 << 20)
    ws, base = _take(tmp_path)
    write(ws / "n.txt", "a\n" * (1 << 20))
    base = Baseline.take(ws, store=tmp_path / "store2")
    (ws / "n.txt").write_text("b\n" * (4 << 20))  # 4 M changed lines: well past 128 MiB
    with pytest.raises(WorkspaceError, match=r"git passed its memory cap \(134,217,728 bytes"):
        base.diff()


def test_the_whole_step_has_a_time_budget(tmp_path, monkeypatch):
    """A git that does not finish within the budget is killed: an error naming the budget.
    (git is made slow here by a wrapper; the snapshot of this workspace takes no time.)"""
    ws, base = _take(tmp_path)
    write(ws / "new.txt", "new\n")
    capped = baseline._capped
    ran = tmp_path / "git-ran"
    wrapper = ["sh", "-c", f'sleep 30 >/dev/null 2>&1; touch {ran}; exec "$@"', "sh"]
    monkeypatch.setattr(baseline, "_capped", lambda argv: [*wrapper, *capped(argv)])
    monkeypatch.setattr(baseline, "DIFF_SECONDS", 1.0)
    with pytest.raises(WorkspaceError, match=r"passed its time budget of 1 s"):
        base.diff()
    assert not ran.exists()  # killed at the budget's end, not found late once it finished
