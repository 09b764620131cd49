"""Git baselines and diffs on the host (real git, no containers)."""

import os
import subprocess
from pathlib import Path

from gradebox.workspace import Baseline, copy_template, truncate_diff
from tests.conftest import write


def git(cwd, *args):
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath, f)
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_edits_new_deleted_renamed_mode_and_binary(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "one\ntwo\n")
    write(ws / "gone.txt", "bye\n")
    write(ws / "move_me.txt", "same content here\n" * 5)
    write(ws / "run.sh", "echo hi\n")
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02")
    base = Baseline.take(ws)
    assert sorted(os.listdir(ws)) == ["a.txt", "blob.bin", "gone.txt", "move_me.txt", "run.sh"]

    write(ws / "a.txt", "one\nTWO\n")
    (ws / "gone.txt").unlink()
    (ws / "move_me.txt").rename(ws / "moved.txt")
    os.chmod(ws / "run.sh", 0o755)
    (ws / "blob.bin").write_bytes(b"\x00\x09\x02")
    write(ws / "new" / "file.txt", "fresh\n")
    diff = base.diff()
    base.discard()
    assert "-two\n+TWO" in diff
    assert "deleted file mode" in diff and "a/gone.txt" in diff
    assert "rename from move_me.txt" in diff and "rename to moved.txt" in diff
    assert "old mode 100644\nnew mode 100755" in diff
    assert "Binary files a/blob.bin and b/blob.bin differ" in diff
    assert "+++ b/new/file.txt" in diff and "+fresh" in diff


def test_existing_repo_history_index_and_files_untouched(tmp_path):
    ws = tmp_path / "repo"
    write(ws / "tracked.txt", "v1\n")
    git(ws, "init", "-q")
    git(ws, "add", ".")
    git(ws, "commit", "-qm", "first")
    write(ws / "tracked.txt", "v2 uncommitted\n")
    write(ws / "staged.txt", "staged\n")
    git(ws, "add", "staged.txt")
    write(ws / "untracked.txt", "u\n")
    before = (
        git(ws, "log", "--format=%H"),
        git(ws, "status", "--porcelain"),
        (ws / ".git" / "index").read_bytes(),
        snapshot(ws),
    )

    base = Baseline.take(ws)
    write(ws / "agent.txt", "agent\n")
    diff = base.diff()
    base.discard()
    (ws / "agent.txt").unlink()

    after = (
        git(ws, "log", "--format=%H"),
        git(ws, "status", "--porcelain"),
        (ws / ".git" / "index").read_bytes(),
        snapshot(ws),
    )
    assert before == after
    assert "+++ b/agent.txt" in diff and "tracked.txt" not in diff


def test_nested_repositories_diff_against_their_own_baseline(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "top.txt", "top\n")
    write(ws / "libs" / "inner" / "code.py", "x = 1\n")
    git(ws / "libs" / "inner", "init", "-q")
    git(ws / "libs" / "inner", "add", ".")
    git(ws / "libs" / "inner", "commit", "-qm", "i")
    base = Baseline.take(ws)
    write(ws / "libs" / "inner" / "code.py", "x = 2\n")
    write(ws / "top.txt", "top!\n")
    write(ws / "cloned" / "README", "new repo\n")
    git(ws / "cloned", "init", "-q")
    diff = base.diff()
    base.discard()
    assert "+++ b/libs/inner/code.py" in diff and "-x = 1\n+x = 2" in diff
    assert "+++ b/top.txt" in diff
    assert "+++ b/cloned/README" in diff
    assert "Subproject" not in diff


def test_ignored_files_are_an_option(tmp_path):
    ws = tmp_path / "ws"
    write(ws / ".gitignore", "*.log\n")
    base = Baseline.take(ws)
    write(ws / "debug.log", "noise\n")
    assert "debug.log" not in base.diff()
    base.discard()
    base = Baseline.take(ws, include_ignored=True)
    write(ws / "debug.log", "more noise\n")
    assert "debug.log" in base.diff()
    base.discard()


def test_diff_over_the_cap_is_cut_with_a_marker(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    base = Baseline.take(ws)
    write(ws / "big.txt", "line of text\n" * 10000)
    diff = base.diff(cap=4096)
    base.discard()
    assert len(diff.encode()) < 4096 + 200
    assert "[gradebox: file_changes truncated at 4096 bytes:" in diff
    assert "bytes dropped]" in diff


def test_truncate_is_exact_under_the_cap():
    assert truncate_diff("abc\n", 10) == "abc\n"
    cut = truncate_diff("a\n" * 100, 10)
    assert cut.startswith(
        "a\na\na\na\na\n[gradebox: file_changes truncated at 10 bytes: 190 of 200"
    )


def test_copy_template_is_fresh_each_time(tmp_path):
    write(tmp_path / "tpl" / "f.txt", "x")
    a = copy_template(tmp_path / "tpl", tmp_path / "a")
    write(a / "f.txt", "changed")
    b = copy_template(tmp_path / "tpl", tmp_path / "b")
    assert (b / "f.txt").read_text() == "x"
    assert copy_template(None, tmp_path / "empty").is_dir()
