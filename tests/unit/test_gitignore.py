"""The template's ignore rules, matched on the host: git itself is the oracle."""

import os
import random
import subprocess

import pytest

from gradebox.files.baseline import Baseline

NAMES = [b"a", b"b.log", b"c.py", b"build", b"Build", b"x y", b"[ab]", b"*", b"!imp", b"#h",
         b"foo", b"bar", b"d\xff", b"caf\xc3\xa9", b"q?", b"a\\b", b"lib", b"doc", b"trail ",
         b"-"]  # fmt: skip
PATTERNS = [
    b"*.log", b"build/", b"/foo", b"foo/", b"**/bar", b"lib/**", b"a/**/c.py", b"doc/*.py",
    b"[ab]", b"\\[ab]", b"!b.log", b"\\!imp", b"\\#h", b"#h", b"x\\ y", b"trail\\ ",
    b"trail ", b"[!a-c]*", b"[[:upper:]]*", b"[[:digit:]-]", b"?", b"*\xff", b"d[\x80-\xff]",
    b"caf?", b"caf??", b"**", b"*/", b"a/*", b"**/lib/", b"!**/lib/c.py", b"[a-", b"\\",
    b"a\\\\b", b"[]-]", b"[!]]", b"**a", b"a**/c.py", b"/*/b.log", b"q\\?", b"[[:foo:]]",
    b"[[:a]b]", b"a/**b", b"!*/", b"*\r", b"\xef\xbb\xbf*.py",
]  # fmt: skip


def _git_ignores(ws) -> set[bytes]:
    out = subprocess.run(
        ["git", "-c", "core.excludesFile=/dev/null", "ls-files", "-z", "--others", "--ignored",
         "--exclude-per-directory=.gitignore"],
        cwd=ws, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return {p for p in out.split(b"\0") if p}


def _we_ignore(ws, store) -> set[bytes]:
    base = Baseline.take(ws, store=store)
    out = subprocess.run(
        ["git", "--git-dir", str(store), "ls-tree", "-r", "-z", "--name-only",
         base._before["ignored"]],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    return {p for p in out.split(b"\0") if p}


def _tree(rng: random.Random) -> tuple[list[bytes], dict[bytes, bytes]]:
    files: list[bytes] = []
    for path in sorted({b"/".join(rng.choices(NAMES, k=rng.randint(1, 4))) for _ in range(40)},
                       key=len):  # fmt: skip
        if not any(path.startswith(f + b"/") or f.startswith(path + b"/") for f in files):
            files.append(path)
    rules = {b".gitignore": b"\n".join(rng.sample(PATTERNS, 4)) + b"\n"}
    for sub in rng.sample([b"a", b"lib", b"build", b"foo", b"doc"], 2):
        if any(f.startswith(sub + b"/") for f in files):
            rules[sub + b"/.gitignore"] = b"\n".join(rng.sample(PATTERNS, 3)) + b"\n"
    return files, rules


@pytest.mark.parametrize("seed", range(4))
def test_the_same_paths_are_ignored_as_git_ignores(tmp_path, seed):
    rng = random.Random(seed)
    for trial in range(25):
        ws = tmp_path / f"ws{trial}"
        ws.mkdir()
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
        files, rules = _tree(rng)
        root = os.fsencode(ws)
        for rel in files:
            os.makedirs(os.path.dirname(root + b"/" + rel), exist_ok=True)
            with open(root + b"/" + rel, "wb") as f:
                f.write(b"x\n")
        for rel, text in rules.items():
            os.makedirs(os.path.dirname(root + b"/" + rel), exist_ok=True)
            with open(root + b"/" + rel, "wb") as f:
                f.write(text)
        assert _we_ignore(ws, tmp_path / f"store{trial}") == _git_ignores(ws), rules
