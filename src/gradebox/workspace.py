"""Test workspaces on the host: a fresh copy of the template, a git baseline, and the diff.

The baseline lives in a git directory *outside* the workspace (``GIT_DIR`` + ``--work-tree``):
nothing is created, changed or left inside the workspace, and a repository that the workspace
already is (or contains) keeps its own history, index and files untouched. Each nested
repository gets its own baseline, so changes inside it show up as file diffs, not as a
"submodule dirty" line. All of this runs on the host, never inside a sandbox.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import GradeboxError

__all__ = ["DEFAULT_DIFF_CAP", "Baseline", "copy_template", "truncate_diff"]

DEFAULT_DIFF_CAP = 1 << 20

_GIT_ENV = {
    # Our own identity and no user/system configuration: hooks, signing or a global
    # excludesfile on the runner's machine must not change what a diff says.
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "gradebox",
    "GIT_AUTHOR_EMAIL": "gradebox@localhost",
    "GIT_COMMITTER_NAME": "gradebox",
    "GIT_COMMITTER_EMAIL": "gradebox@localhost",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}
_GIT_OPTS = [
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.filemode=true",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.quotepath=false",
    "-c",
    "safe.directory=*",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.renames=true",
]


class WorkspaceError(GradeboxError):
    """The host could not copy a template or take a baseline (git missing, disk full)."""


def copy_template(template: Path | None, dest: Path, owner: tuple[int, int] | None = None) -> Path:
    """A fresh copy of ``template`` at ``dest`` (empty when there is none).

    ``owner``: hand the copy to the sandbox user so an ``rw`` target can write it.
    """
    if template is None:
        dest.mkdir(parents=True)
    else:
        shutil.copytree(template, dest, symlinks=True)
    if owner is not None and os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(dest):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.lchown(name, *owner)
    return dest


def truncate_diff(diff: str, cap: int) -> str:
    """Cut at a line boundary under ``cap`` bytes and say how much was dropped; never silently."""
    data = diff.encode("utf-8", errors="replace")
    if len(data) <= cap:
        return diff
    cut = data.rfind(b"\n", 0, cap) + 1 or cap
    kept = data[:cut].decode("utf-8", errors="ignore")
    dropped = len(data) - cut
    return (
        f"{kept}[gradebox: file_changes truncated at {cap} bytes: "
        f"{dropped} of {len(data)} bytes dropped]\n"
    )


def _find_repos(root: Path) -> list[str]:
    """Relative paths of git repositories inside ``root`` ("" for root itself)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        if ".git" in dirnames or ".git" in filenames:
            found.append(os.path.relpath(dirpath, root).replace(os.sep, "/").removeprefix("."))
        dirnames[:] = [d for d in dirnames if d != ".git"]
    return sorted(p.lstrip("/") for p in found)


@dataclass
class _Tree:
    """One baseline: a git dir outside the workspace tracking one directory of it."""

    rel: str
    git_dir: Path
    excludes: list[str] = field(default_factory=list)
    commit: str = ""


class Baseline:
    """Snapshot a workspace now; ``diff()`` later gives the unified diff of every change.

    Example::

        base = Baseline.take(workspace)
        ...  # the agent edits files
        print(base.diff())
        base.discard()
    """

    def __init__(self, root: Path, store: Path, include_ignored: bool) -> None:
        self.root = root
        self.store = store
        self.include_ignored = include_ignored
        self.trees: dict[str, _Tree] = {}

    @classmethod
    def take(
        cls, root: Path, *, include_ignored: bool = False, store: Path | None = None
    ) -> Baseline:
        if shutil.which("git") is None:
            raise WorkspaceError("git is needed on the host to compute file_changes")
        store = store or Path(tempfile.mkdtemp(prefix="gradebox-baseline-"))
        base = cls(root.resolve(), store, include_ignored)
        for rel in _find_repos(base.root) or [""]:
            base._snapshot(rel)
        if "" not in base.trees:
            base._snapshot("")
        return base

    def _git(self, tree: _Tree, *args: str, check: bool = True) -> str:
        work = self.root / tree.rel if tree.rel else self.root
        proc = subprocess.run(
            ["git", *_GIT_OPTS, f"--git-dir={tree.git_dir}", f"--work-tree={work}", *args],
            capture_output=True,
            env={**os.environ, **_GIT_ENV},
            cwd=work,
        )
        if check and proc.returncode != 0:
            msg = proc.stderr.decode(errors="replace").strip().splitlines()
            raise WorkspaceError(f"git {args[0]} failed in {work}: {msg[-1] if msg else '?'}")
        return proc.stdout.decode("utf-8", errors="replace")

    def _nested_under(self, rel: str, repos: list[str]) -> list[str]:
        prefix = f"{rel}/" if rel else ""
        return [r[len(prefix) :] for r in repos if r != rel and r.startswith(prefix)]

    def _snapshot(self, rel: str, empty: bool = False) -> None:
        tree = _Tree(rel, self.store / f"tree{len(self.trees)}.git")
        subprocess.run(
            ["git", "init", "-q", "--bare", str(tree.git_dir)],
            check=True,
            capture_output=True,
            env={**os.environ, **_GIT_ENV},
        )
        self._git(tree, "config", "core.bare", "false")
        tree.excludes = self._nested_under(rel, list(self.trees) + _find_repos(self.root))
        self._write_excludes(tree)
        if empty:
            tree.commit = self._git(
                tree, "commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-m", "empty"
            ).strip()  # the empty tree: everything in a repo that appeared later is new
        else:
            self._add(tree)
            self._git(tree, "commit", "-q", "--allow-empty", "--no-verify", "-m", "baseline")
            tree.commit = self._git(tree, "rev-parse", "HEAD").strip()
        self.trees[rel] = tree

    def _write_excludes(self, tree: _Tree) -> None:
        info = tree.git_dir / "info"
        info.mkdir(exist_ok=True)
        lines = [f"/{p}/" for p in tree.excludes]
        (info / "exclude").write_text("\n".join(lines) + "\n")

    def _add(self, tree: _Tree) -> None:
        args = ["add", "-A", "--ignore-errors"]
        if self.include_ignored:
            args.append("--force")
        self._git(tree, *args, ".", check=False)

    def diff(self, cap: int = DEFAULT_DIFF_CAP) -> str:
        """The unified diff from the baseline: edits, new and deleted files, renames, modes,
        binaries (marked), nested repositories against their own baselines."""
        for rel in _find_repos(self.root):
            if rel not in self.trees:  # a repository the agent created or cloned
                self._snapshot(rel, empty=True)
        parts = []
        for rel, tree in sorted(self.trees.items()):
            if rel and not (self.root / rel).is_dir():
                continue
            tree.excludes = self._nested_under(rel, list(self.trees))
            self._write_excludes(tree)
            self._add(tree)
            prefix = f"{rel}/" if rel else ""
            parts.append(
                self._git(
                    tree,
                    "diff",
                    "--cached",
                    "-M",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-textconv",
                    f"--src-prefix=a/{prefix}",
                    f"--dst-prefix=b/{prefix}",
                    tree.commit,
                )
            )
        return truncate_diff("".join(parts), cap)

    def discard(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)
