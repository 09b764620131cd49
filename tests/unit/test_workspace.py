"""Git baselines and diffs on the host (real git, no containers)."""

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from gradebox.files.baseline import DIFF_FILE_BYTES
from gradebox.files.workspace import Baseline, copy_template, truncate_diff
from tests.conftest import write


@pytest.fixture(autouse=True)
def _baselines_in_tmp_path(tmp_path, monkeypatch):
    # Baseline stores default to the system temp folder: keep this module's in its tmp_path.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield
    # pytest's own clean-up recurses: a tree thousands deep is removed here, whatever failed.
    from gradebox.core.fstree import remove_tree

    for child in tmp_path.iterdir():
        remove_tree(child)


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
    (ws / "blob.bin").write_bytes(b"\x00\xff\x02")
    base = Baseline.take(ws)
    assert sorted(os.listdir(ws)) == ["a.txt", "blob.bin", "gone.txt", "move_me.txt", "run.sh"]

    write(ws / "a.txt", "one\nTWO\n")
    (ws / "gone.txt").unlink()
    (ws / "move_me.txt").rename(ws / "moved.txt")
    os.chmod(ws / "run.sh", 0o755)
    (ws / "blob.bin").write_bytes(b"\x00\xfe\x02")
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


def test_nested_repositories_are_folders_with_their_git_dir_shown(tmp_path):
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
    # What git keeps in a .git folder is content too; it comes after the rest.
    assert "+++ b/cloned/.git/HEAD" in diff and "+ref: refs/heads/" in diff
    assert diff.index("b/top.txt") < diff.index("b/cloned/.git/HEAD")


def test_ignored_changes_are_listed_and_their_content_is_an_option(tmp_path):
    ws = tmp_path / "ws"
    write(ws / ".gitignore", "*.log\n")
    write(ws / "old.log", "old\n")
    write(ws / "kept.log", "kept\n")
    base = Baseline.take(ws)
    write(ws / "debug.log", "noise\n")
    write(ws / "kept.log", "changed\n")
    (ws / "old.log").unlink()
    diff = base.diff()
    assert "noise" not in diff and "+changed" not in diff
    assert diff.endswith("content not shown]\nA\tdebug.log\nM\tkept.log\nD\told.log\n")
    base.discard()
    base = Baseline.take(ws, include_ignored=True)
    write(ws / "debug.log", "more noise\n")
    diff = base.diff()
    assert "+more noise" in diff and "content not shown" not in diff
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


# Hostile workspaces: every trick an agent has to hide a change or reach the host.


def test_nested_repo_replaced_by_a_link_to_the_host_is_a_deletion(tmp_path):
    host = tmp_path / "host-secrets"
    write(host / "id_rsa", "PRIVATE KEY\n")
    git(host, "init", "-q")
    ws = tmp_path / "ws"
    write(ws / "top.txt", "top\n")
    write(ws / "sub" / "code.py", "x = 1\n")
    git(ws / "sub", "init", "-q")
    base = Baseline.take(ws)
    import shutil

    shutil.rmtree(ws / "sub")
    (ws / "sub").symlink_to(host)
    diff = base.diff()
    base.discard()
    assert "PRIVATE KEY" not in diff and "id_rsa" not in diff
    assert "deleted file mode" in diff and "-x = 1" in diff
    assert "new file mode 120000" in diff  # the link itself is a change of the top tree


def test_deleted_nested_repository_shows_as_deleted(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "lib" / "a.py", "a = 1\n")
    git(ws / "lib", "init", "-q")
    base = Baseline.take(ws)
    import shutil

    shutil.rmtree(ws / "lib")
    diff = base.diff()
    assert "deleted file mode" in diff and "a/lib/a.py" in diff and "-a = 1" in diff


def test_glob_characters_in_a_nested_repo_name_hide_nothing(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "*" / "x.txt", "x\n")
    git(ws / "*", "init", "-q")
    base = Baseline.take(ws)
    write(ws / "new.txt", "visible\n")
    write(ws / "dir" / "deep.txt", "visible too\n")
    diff = base.diff()
    assert "+visible\n" in diff and "+visible too" in diff


def test_ignore_rules_come_from_the_baseline(tmp_path):
    ws = tmp_path / "ws"
    write(ws / ".gitignore", "*.log\n")
    write(ws / "pkg" / ".gitignore", "build/\n!keep.log\n")
    base = Baseline.take(ws)
    write(ws / ".gitignore", "*\n")  # the agent tries to hide everything
    write(ws / "pkg" / ".gitignore", "*\n")
    write(ws / "solution.py", "print('cheat')\n")
    write(ws / "debug.log", "noise\n")
    write(ws / "pkg" / "build" / "out.o", "obj\n")
    write(ws / "pkg" / "keep.log", "kept\n")
    diff = base.diff()
    assert "+print('cheat')" in diff
    assert "+noise" not in diff and "+obj" not in diff  # ignored by the baseline's rules...
    assert "\nA\tdebug.log\nA\tpkg/build/out.o\n" in diff  # ...so listed, not shown
    assert "+kept" in diff  # re-included by the baseline's nested rule
    assert "+*" in diff  # the .gitignore edits themselves are changes


def test_gitattributes_cannot_break_or_blank_the_diff(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.py", "a = 1\n")
    base = Baseline.take(ws)
    write(ws / ".gitattributes", "* working-tree-encoding=UTF-16\n*.py -diff\n")
    write(ws / "a.py", "a = 2\n")
    diff = base.diff()
    assert "-a = 1\n+a = 2" in diff


def test_a_failing_diff_is_an_error_not_an_empty_diff(tmp_path):
    import pytest

    from gradebox.files.workspace import WorkspaceError

    ws = tmp_path / "ws"
    write(ws / "a.py", "a = 1\n")
    base = Baseline.take(ws)
    import shutil

    shutil.rmtree(base.store)
    with pytest.raises(WorkspaceError):
        base.diff()


def test_diff_is_streamed_and_counted_past_the_cap(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    base = Baseline.take(ws)
    write(ws / "big.txt", "line of text\n" * 50_000)
    diff = base.diff(cap=1000)
    assert len(diff.encode()) < 1200
    assert "file_changes truncated at 1000 bytes" in diff and "of 700123 bytes dropped" in diff


def test_copies_skip_fifos_and_follow_no_links(tmp_path):
    from gradebox.files.workspace import safe_copy

    src = tmp_path / "src"
    write(src / "f.txt", "data\n")
    os.mkfifo(src / "pipe")
    (src / "link").symlink_to("/etc/passwd")
    (src / "dirlink").symlink_to(tmp_path)
    skipped = safe_copy(src, tmp_path / "dst")
    assert skipped == ["pipe"]
    dst = tmp_path / "dst"
    assert (dst / "f.txt").read_text() == "data\n"
    assert os.readlink(dst / "link") == "/etc/passwd" and (dst / "link").is_symlink()
    assert (dst / "dirlink").is_symlink()


def test_workspace_quota_is_enforced_by_the_filesystem(tmp_path):
    import pytest

    from gradebox.files.workspace import Quota, Workspace

    ws = Workspace.create(tmp_path / "ws", quota=Quota(size=4 << 20, files=50))
    try:
        assert ws.exceeded() is None
        with pytest.raises(OSError), open(ws.path / "big", "wb") as f:
            f.write(b"x" * (8 << 20))  # ENOSPC from the kernel (as root), or...
        assert ws.exceeded() is not None
    except BaseException:
        if ws.mounted:
            raise
        # ...without root there is no mount: the write succeeds and the check catches it.
        assert ws.exceeded() is not None
    finally:
        ws.close()
    assert ws.mounted is False


def test_a_tree_nested_thousands_deep_is_diffed_copied_and_measured(tmp_path):
    """Python's own walkers recurse: an agent's 1,500-deep tree must not crash the host side."""
    from gradebox.files.workspace import Quota, Workspace, safe_copy

    (tmp_path / "host-file").write_text("keep\n")
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    base = Baseline.take(ws)
    here = os.open(ws, os.O_RDONLY)
    try:
        for _ in range(1500):  # relative steps: no path is ever longer than one component
            os.mkdir("d", dir_fd=here)
            deeper = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = deeper
        fd = os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here)
        os.write(fd, b"deep\n")
        os.close(fd)
        os.symlink(str(tmp_path), "up", dir_fd=here)  # removal must not follow it
    finally:
        os.close(here)
    assert "+deep" in base.diff(cap=1 << 24)
    safe_copy(ws, tmp_path / "copy")
    assert os.path.exists(str(tmp_path / "copy") + "/d" * 1500 + "/deep.txt")
    workspace = Workspace(ws, Quota(size=1 << 30, files=1000), mounted=False)
    assert "quota" in (workspace.exceeded() or "")  # 1,502 entries over a 1,000-file quota
    # Scratch folders holding such a tree are removed too (shutil.rmtree would recurse).
    from gradebox.files.workspace import remove_tree

    base.discard()
    for tree in (ws, tmp_path / "copy"):
        remove_tree(tree)
        assert not tree.exists()
    assert (tmp_path / "host-file").read_text() == "keep\n"


def test_an_overlay_workspace_never_writes_into_its_lower_layer(tmp_path):
    from gradebox.files.workspace import Quota, Workspace

    lower = tmp_path / "stage"
    write(lower / "a.txt", "template\n")
    ws = Workspace.create(tmp_path / "ws", owner=(os.getuid(), os.getgid()), lower=lower,
                          quota=Quota(size=8 << 20, files=100))  # fmt: skip
    try:
        if os.geteuid() == 0:
            assert ws.kind == "overlay"  # as root the kernel allows it; elsewhere: a copy
        (ws.path / "a.txt").write_text("agent\n")
        (ws.path / "new.txt").write_text("new\n")
        assert (ws.path / "a.txt").read_text() == "agent\n"
        assert (lower / "a.txt").read_text() == "template\n"
        assert not (lower / "new.txt").exists()
    finally:
        ws.close()


# Hostile names are data: any byte string, any depth, any length (issue 21). Each class has
# variants and a control: the same change made with a plain name shows the same way.


def _plant(root: Path, path: bytes, content: bytes | None = b"EVIL-MARKER\n",
           link: bytes | None = None) -> None:  # fmt: skip
    """Make ``path`` under ``root`` one name at a time (no path past one name is ever used)."""
    *folders, last = path.split(b"/")
    here = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in folders:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=here)
            deeper = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = deeper
        if link is not None:
            os.symlink(link, last, dir_fd=here)
        elif content is None:
            os.mkdir(last, dir_fd=here)
        else:
            fd = os.open(last, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755, dir_fd=here)
            os.write(fd, content)
            os.close(fd)
    finally:
        os.close(here)


def _repo(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")


def _hostile_tree_survives(ws: Path, tmp_path: Path) -> None:
    """Everything else the host does with an agent's tree: measure, copy, remove."""
    from gradebox.files.workspace import Quota, Workspace, remove_tree, safe_copy

    assert Workspace(ws, Quota(), mounted=False).exceeded() is None
    copy = tmp_path / "copy"
    safe_copy(ws, copy)
    (tmp_path / "host-file").write_text("keep\n")
    for tree in (copy, ws):
        remove_tree(tree)
        assert not tree.exists()
    assert (tmp_path / "host-file").read_text() == "keep\n"


NOT_UTF8 = {
    "a folder holding .git (the issue's)": (b"\xff/.git/config", b"\xff/x.py", "\\xff/x.py"),
    "a file at the top": (None, b"\xfe.py", "\\xfe.py"),
    "a nested file": (None, b"a/\xfd\xfe/b.py", "a/\\xfd\\xfe/b.py"),
    "inside a nested repository": (b"sub/.git/HEAD", b"sub/\xff.py", "sub/\\xff.py"),
    "control": (b"plain/.git/config", b"plain/x.py", "plain/x.py"),
}


@pytest.mark.parametrize("case", NOT_UTF8, ids=list(NOT_UTF8))
def test_names_that_are_not_utf8_are_data(tmp_path, case):
    template_file, planted, shown = NOT_UTF8[case]
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    if template_file:
        _plant(ws, template_file, b"[core]\n")  # a repository (or .git folder) at the baseline
    base = Baseline.take(ws)
    _plant(ws, planted)
    target = b"target" if case == "control" else b"\xfb-target"
    _plant(ws, planted + b"-link", link=target)  # links with such names and targets, too
    diff = base.diff()
    base.discard()
    assert f"+++ b/{shown}\n@@ -0,0 +1 @@\n+EVIL-MARKER\n" in diff
    assert (
        f"+++ b/{shown}-link\n" in diff and "+" + target.decode(errors="backslashreplace") in diff
    )
    _hostile_tree_survives(ws, tmp_path)


DEEP = {
    "names of 200 bytes past PATH_MAX": [b"d" * 200] * 30,
    "3,000 folders deep (past git's own limit)": [b"d"] * 3000,
    "deep, not UTF-8, a .git on the way": [b"\xff" * 100] * 30 + [b".git"] + [b"\xfe" * 100] * 20,
    "control": [b"d" * 10] * 3,
}


@pytest.mark.parametrize("case", DEEP, ids=list(DEEP))
def test_paths_past_path_max_are_diffed_copied_measured_and_removed(tmp_path, case):
    folders = DEEP[case]
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    _plant(ws, b"/".join(folders[:2] + [b"template.txt"]), b"old\n")
    base = Baseline.take(ws)
    _plant(ws, b"/".join(folders[:2] + [b"template.txt"]), b"new\n")
    _plant(ws, b"/".join(folders + [b"deep.py"]))
    _plant(ws, b"/".join(folders[: len(folders) // 2] + [b"middle.py"]), b"MIDDLE\n")
    diff = base.diff(cap=1 << 24)
    base.discard()
    assert "-old\n+new\n" in diff
    assert "+EVIL-MARKER\n" in diff and "+MIDDLE\n" in diff
    # Git never handles a path longer than PATH_MAX and a few names, however deep it goes.
    headers = [line for line in diff.splitlines() if line.startswith("+++ ")]
    assert max(len(h) for h in headers) < 4096 * 4 + 2000  # \xNN shows a byte as 4
    if case != "control":
        assert "/.gradebox-folders\n" in diff and "-deep.py\n" in diff
    _hostile_tree_survives(ws, tmp_path)


GIT_PLACES = {
    "a hook of the workspace's repository": (".git/hooks/pre-commit", True),
    "the workspace's git config": (".git/config", True),
    "inside a nested repository's .git": ("sub/.git/evil.py", True),
    "a .GIT folder (git refuses to add it)": (".GIT/evil.py", False),
    "git~1 (refused under core.protectNTFS)": ("git~1/evil.py", False),
    "a .git file in a subfolder": ("other/.git", False),
    "control": ("plain/evil.py", False),
}


@pytest.mark.parametrize("case", GIT_PLACES, ids=list(GIT_PLACES))
def test_what_git_itself_skips_is_in_file_changes(tmp_path, case):
    path, repo = GIT_PLACES[case]
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    write(ws / "sub" / "code.py", "x = 1\n")
    if repo:
        _repo(ws)
        _repo(ws / "sub")
    base = Baseline.take(ws)
    target = ws / path
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a") as f:
        f.write("EVIL-MARKER\n")
    write(ws / "a.txt", "b\n")  # and an ordinary change beside it
    diff = base.diff()
    base.discard()
    assert f"+++ b/{path}\n" in diff and "+EVIL-MARKER\n" in diff
    assert "-a\n+b\n" in diff


IGNORED = {
    "bytecode beside a conftest.py": ("__pycache__/\n", "__pycache__/conftest.cpython-311.pyc"),
    "a module under node_modules": ("node_modules/\n", "node_modules/lib/index.js"),
    "an extension module beside its source": ("*.so\n", "pkg/mod.cpython-311-x86_64-linux-gnu.so"),
    "a file in an ignored folder's nested repository": ("vendor/\n", "vendor/x/.git/config"),
    "control": ("*.log\n", "pkg/plain.py"),
}


@pytest.mark.parametrize("case", IGNORED, ids=list(IGNORED))
def test_ignore_rules_never_hide_that_a_file_changed(tmp_path, case):
    rules, path = IGNORED[case]
    ws = tmp_path / "ws"
    write(ws / ".gitignore", rules)
    write(ws / "conftest.py", "import os\n")
    base = Baseline.take(ws)
    write(ws / path, "EVIL-MARKER\n")
    write(ws / ".gitignore", "*\n")  # the agent's own rules change nothing
    diff = base.diff()
    base.discard()
    if case == "control":
        assert f"+++ b/{path}\n" in diff and "+EVIL-MARKER" in diff
    else:
        assert diff.endswith(f"content not shown]\nA\t{path}\n")
        assert "EVIL-MARKER" not in diff


def test_a_fifo_or_a_socket_is_reported_not_read(tmp_path):
    import socket

    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    base = Baseline.take(ws)
    os.mkfifo(ws / "answer.txt")  # a grader that reads it would hang
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "sock"))
    write(ws / "control.txt", "plain\n")
    diff = base.diff()
    sock.close()
    base.discard()
    assert "+++ b/answer.txt\n@@ -0,0 +1 @@\n+[gradebox: not a regular file: a FIFO]" in diff
    assert "+++ b/sock\n@@ -0,0 +1 @@\n+[gradebox: not a regular file: a socket]" in diff
    assert "+++ b/control.txt\n@@ -0,0 +1 @@\n+plain" in diff


def test_a_reference_workspace_is_laid_over_without_following_links(tmp_path):
    from gradebox.core.fstree import copy_tree

    host = tmp_path / "host"
    write(host / "keep.txt", "host\n")
    ws = tmp_path / "ws"
    write(ws / "a.txt", "template\n")
    (ws / "sub").symlink_to(host)  # a link the template (or a hook) left
    (ws / "f").symlink_to(host / "keep.txt")
    ref = tmp_path / "ref"
    write(ref / "a.txt", "reference\n")
    write(ref / "sub" / "keep.txt", "reference\n")
    write(ref / "f", "reference\n")
    _plant(ref, b"\xff/" + b"/".join([b"d" * 200] * 25) + b"/deep.txt")
    copy_tree(ref, ws, merge=True)
    assert (host / "keep.txt").read_text() == "host\n" and sorted(os.listdir(host)) == ["keep.txt"]
    assert not (ws / "sub").is_symlink() and (ws / "sub" / "keep.txt").read_text() == "reference\n"
    assert not (ws / "f").is_symlink() and (ws / "f").read_text() == "reference\n"
    assert (ws / "a.txt").read_text() == "reference\n"
    base = Baseline.take(ws)
    _plant(ws, b"\xff/" + b"/".join([b"d" * 200] * 25) + b"/deep.txt", b"changed\n")
    assert "-EVIL-MARKER\n+changed\n" in base.diff()
    base.discard()


NUL_TRICKS = {
    "a NUL in a comment of a small script": (b"// \0\nEVIL-MARKER();\n", 1),
    "a NUL up front of a 9 MiB script": (
        b"// \0\n" + b"// pad\n" * (9 << 17) + b"EVIL-MARKER();\n",
        1,
    ),
    "control": (b"// plain\nEVIL-MARKER();\n", 0),
}


@pytest.mark.parametrize("case", NUL_TRICKS, ids=list(NUL_TRICKS))
def test_a_nul_byte_does_not_turn_code_into_a_binary_file(tmp_path, case):
    content, nuls = NUL_TRICKS[case]
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    base = Baseline.take(ws)
    (ws / "index.js").write_bytes(content)
    (ws / "real.bin").write_bytes(b"\x7fELF\x00\x01\xff\xfe")  # not text: stays binary
    diff = base.diff(cap=64 << 20)
    base.discard()
    if len(content) > DIFF_FILE_BYTES:  # summarised (too large to diff), but as text
        assert "+[gradebox: text, " in diff and "b/index.js differ" not in diff
    else:
        assert "+EVIL-MARKER();\n" in diff and diff.count("\u2400") == nuls
    assert "Binary files /dev/null and b/real.bin differ" in diff
    assert "\0" not in diff


def test_a_sparse_file_is_read_by_its_data_not_its_holes(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    with open(ws / "kept", "wb") as f:
        f.truncate(1 << 40)  # a terabyte of holes in the template: read, it would take hours
    base = Baseline.take(ws)
    with open(ws / "huge", "wb") as f:
        f.truncate(1 << 43)
    with open(ws / "kept", "r+b") as f:
        f.seek(1 << 30)
        f.write(b"EVIL")
    diff = base.diff()
    base.discard()
    assert "Binary files /dev/null and b/huge differ" in diff
    assert "Binary files a/kept and b/kept differ" in diff


def _as_nobody_if_root(work) -> bool:  # type: ignore[no-untyped-def]
    """Run ``work()`` as an unprivileged uid (65534 when this is root: forked and dropped)."""
    if os.geteuid() != 0:
        return bool(work())
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(65534)
            os.setuid(65534)
            os._exit(0 if work() else 1)
        finally:
            os._exit(2)
    return os.waitpid(pid, 0)[1] == 0


def test_remove_tree_without_root_takes_folders_its_owner_closed():
    """Without root, the sealed input folder (0500, its file 0400) kept every scratch folder of
    a run, and an agent running as the runner's uid could keep its workspace copy on the
    host with a 000 folder: remove_tree gives the owner rwx back first, through no link."""
    from gradebox.core.fstree import remove_tree

    # In /tmp itself: the test's own temp folder is closed to uid 65534.
    base = Path(tempfile.mkdtemp(prefix="gbx-rt-", dir="/tmp"))
    os.chmod(base, 0o755)
    root, outside = base / "gradebox-scratch", base / "outside"
    write(root / "input" / "input.json", "{}")
    write(root / "ws" / "a" / "b" / "c.txt", "x")
    write(outside / "keep.txt", "keep")
    (root / "ws" / "link").symlink_to(outside)
    (root / "input" / "input.json").chmod(0o400)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "-h", "65534:65534", str(base)], check=True)
    for folder, mode in ((root / "input", 0o500), (root / "ws" / "a", 0o000),
                         (outside, 0o500), (root, 0o500)):  # fmt: skip
        folder.chmod(mode)
    try:
        assert _as_nobody_if_root(lambda: remove_tree(root) or True)
        assert not os.path.lexists(root)  # seen from here: the child may see less
        assert (outside / "keep.txt").read_text() == "keep"
        assert outside.stat().st_mode & 0o777 == 0o500  # the link's target was not opened up
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        subprocess.run(["rm", "-rf", str(base)], check=False)
