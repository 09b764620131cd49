"""file_changes' listing of changed paths is streamed and bounded: git's ``--raw -z`` listing is
read as it comes (never whole), each changed path's bytes count against the same budget as the
text to compare (``DIFF_TOTAL_BYTES``), and past it git is stopped and the step is an error
naming the limit. Before: 96,000 empty files under ~4 KB paths took gradebox to 1.25 GiB (the
listing read whole, then split) and git to 0.74 GiB.

Each workspace is made by descriptor (a chain of 250-byte folder names, ``mkdir``/``open``
with ``dir_fd``, as ``fstree`` walks it), and each diff runs in a fresh interpreter whose peak
RSS (``ru_maxrss``, before and after the diff) is what is measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.files import baseline
from gradebox.files.baseline import Baseline
from tests.conftest import write

ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import json, os, resource, sys, time
from pathlib import Path
from gradebox.files import baseline
from gradebox.files.baseline import Baseline
from gradebox.errors import WorkspaceError

root, files, where = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
budget, git_memory = int(sys.argv[4]), int(sys.argv[5])
if budget:
    baseline.DIFF_TOTAL_BYTES = budget
if git_memory:
    baseline.GIT_MEMORY = git_memory
ws = root / "ws"
ws.mkdir()
(ws / "keep.txt").write_text("keep\n")
top = {"work": b"long", "git": b".git", "ignored": b"long"}[where]
if where == "ignored":
    (ws / ".gitignore").write_text("long/\n")
base = Baseline.take(ws, store=root / "store")
fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
for name in [top] + [b"%03d" % i + b"d" * 247 for i in range(7)]:  # ~1.8 KB of folders
    os.mkdir(name, dir_fd=fd)
    below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = below
for i in range(files):
    os.close(os.open(b"%06d" % i + b"f" * 200, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
os.close(fd)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
base._snapshot()  # what a snapshot of this tree costs alone (the diff takes one again)
snapshot = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    said = base.diff()
except WorkspaceError as exc:
    said = "error: " + str(exc)
print(json.dumps({
    "said": said[-400:], "seconds": time.monotonic() - start,
    "grew_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before,
    "beyond_snapshot_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - snapshot,
    "children_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
}))
"""

# Before, the diff of the 20,000-file workspace grew the runner by 124-165 MiB, 85-125 of them
# past what the snapshot of the tree costs (~40 MiB: its trees are built in memory); streamed,
# the listing costs a chunk and one path at a time.
GROWTH_KIB = 64 << 10
BEYOND_SNAPSHOT_KIB = 16 << 10
# git's peak (and, as children are forked from it, the runner's size at the fork): under its
# cap whatever the workspace.
CHILD_KIB = baseline.GIT_MEMORY >> 10


def _probe(
    tmp_path: Path, files: int, where: str = "work", budget: int = 0, git_memory: int = 0
) -> dict:
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE,
            str(tmp_path),
            str(files),
            where,
            str(budget),
            str(git_memory),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def test_a_listing_of_20000_long_paths_is_streamed_in_bounded_memory(tmp_path):
    """20,000 empty files under ~2 KB paths: 44 MB of paths, inside the budget, so the diff is
    made, and shown truncated at its cap; the listing never sits whole in the runner."""
    seen = _probe(tmp_path, 20_000)
    assert "[gradebox: file_changes truncated at 1048576 bytes" in seen["said"], seen
    assert seen["beyond_snapshot_kib"] < BEYOND_SNAPSHOT_KIB, seen
    assert seen["grew_kib"] < GROWTH_KIB, (seen["grew_kib"] >> 10, "MiB")
    assert seen["children_kib"] < CHILD_KIB, seen


@pytest.mark.parametrize("where", ["work", "git", "ignored"])
def test_paths_past_the_budget_stop_git_and_name_the_limit(tmp_path, where):
    """The same flood against a budget of 4 MiB, in each tree a snapshot has (files, what lies
    in a .git folder, what the template's .gitignore ignores): an error naming the limit, with
    git stopped as soon as the paths pass it."""
    seen = _probe(tmp_path, 8_000, where, budget=4 << 20)
    said = seen["said"]
    assert said.startswith("error: file_changes: ") and "\n" not in said, said
    assert "past the limit of 4,194,304 bytes a diff may compare" in said, said
    assert "paths" in said, said
    assert seen["beyond_snapshot_kib"] < BEYOND_SNAPSHOT_KIB, seen


def test_git_holding_the_whole_listing_stops_at_its_memory_cap(tmp_path):
    """git builds its whole listing (~2 paths an entry) before it writes a byte of it, so no
    count of ours can stop it first: its address-space cap (prlimit) does. At full scale
    (96,000 files, ~4 KB paths) it needs ~0.78 GiB, past the cap of 512 MiB; here 20,000
    files against a cap of 64 MiB: an error naming the cap."""
    seen = _probe(tmp_path, 20_000, git_memory=64 << 20)
    assert seen["said"] == (
        "error: file_changes: git passed its memory cap (67,108,864 bytes of address space) "
        "diffing the workspace; not diffed"
    ), seen
    assert baseline.GIT_MEMORY == 512 << 20


def test_control_under_the_budget_the_same_tree_is_diffed(tmp_path):
    seen = _probe(tmp_path, 500, "work", budget=4 << 20)
    assert not seen["said"].startswith("error"), seen
    assert "new file mode 100644" in seen["said"], seen


def test_control_a_normal_diff_is_unchanged(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "one\ntwo\n")
    write(ws / "sub" / "b.txt", "b\n")
    write(ws / ".gitignore", "out/\n")
    base = Baseline.take(ws, store=tmp_path / "store")
    write(ws / "a.txt", "one\nTWO\n")
    (ws / "sub" / "b.txt").unlink()
    write(ws / "c.txt", "new\n")
    write(ws / "out" / "x.log", "x\n")
    assert base.diff() == (
        "diff --git a/a.txt b/a.txt\nindex 814f4a4..879de50 100644\n--- a/a.txt\n+++ b/a.txt\n"
        "@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
        "diff --git a/c.txt b/c.txt\nnew file mode 100644\nindex 0000000..3e75765\n"
        "--- /dev/null\n+++ b/c.txt\n@@ -0,0 +1 @@\n+new\n"
        "diff --git a/sub/b.txt b/sub/b.txt\ndeleted file mode 100644\nindex 6178079..0000000\n"
        "--- a/sub/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-b\n"
        "[gradebox: changed paths that the template's .gitignore files ignore; A added, "
        "M modified, D deleted, T type changed; content not shown]\nA\tout/x.log\n"
    )
