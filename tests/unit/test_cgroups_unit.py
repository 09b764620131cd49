"""cgroups.py's v2 logic on a fake cgroup tree, and what decides a runtime's ``--keep``. The
real kernel's answers: tests/docker/test_cgroups.py, here (v1) and in the v2 guest
(tests/guest/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradebox.sandbox import cgroups
from gradebox.sandbox.runtime import Runtime


@pytest.fixture
def v2(tmp_path, monkeypatch) -> Path:
    """A unified hierarchy's files, as the kernel shows them to root."""
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    monkeypatch.setattr(cgroups, "ROOT", root)
    monkeypatch.setattr(cgroups, "_enabled", set())
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):  # the kernel fills a new cgroup with its files
        real_mkdir(self, *args, **kwargs)
        if self.is_relative_to(root) and not (self / "cgroup.controllers").exists():
            on = (self.parent / "cgroup.subtree_control").read_text()
            (self / "cgroup.controllers").write_text(on)
            (self / "cgroup.subtree_control").write_text("")
            if "memory" in on.split():
                (self / "memory.max").write_text("max\n")
                (self / "memory.swap.max").write_text("max\n")

    real_rmdir = os.rmdir

    def rmdir(path):  # the kernel removes a cgroup's files with it
        if Path(path).is_relative_to(root):
            for child in Path(path).iterdir():
                if child.is_file():
                    child.unlink()
        real_rmdir(path)

    real_write = Path.write_text

    def write_text(self, text, *args, **kwargs):  # "+cpu" adds to what is on
        if self.name == "cgroup.subtree_control" and self.is_relative_to(root) and self.exists():
            on = set(self.read_text().split()) | {w.lstrip("+") for w in text.split()}
            text = " ".join(sorted(on))
        return real_write(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(Path, "write_text", write_text)
    monkeypatch.setattr(os, "rmdir", rmdir)
    return root


def _subtree(path: Path) -> set[str]:
    return {w.lstrip("+") for w in path.joinpath("cgroup.subtree_control").read_text().split()}


def test_v2_parent_holds_the_memory_limit_without_swap_and_gives_its_leaf_the_controllers(v2):
    made = cgroups.make_parent("gradebox-1-s-t", 64 << 20, "/gradebox")
    assert made == v2 / "gradebox" / "gradebox-1-s-t"
    assert (made / "memory.max").read_text() == str(64 << 20)
    assert (made / "memory.swap.max").read_text() == "0"
    # cpu is added where the host has it; what was on stays on.
    assert {"memory", "pids", "cpu"} <= _subtree(v2)
    assert {"memory", "pids", "cpu"} <= _subtree(v2 / "gradebox")
    assert {"memory", "pids", "cpu"} <= _subtree(made)


def test_v2_parent_without_the_memory_controller_is_refused(v2):
    for name in ("cgroup.controllers", "cgroup.subtree_control"):  # no memory limit to set
        with open(v2 / name, "w") as f:
            f.write("pids\n")
    assert cgroups.make_parent("gradebox-1-s-t", 1 << 20, "/gradebox") is None
    assert not (v2 / "gradebox" / "gradebox-1-s-t").exists()


def test_oom_is_read_from_v2_events_and_only_the_kill_counts(v2):
    path = v2 / "x"
    path.mkdir()
    (path / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 0\n")
    assert not cgroups.oom_killed(path)  # reached its limit, reclaimed, nobody killed
    (path / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n")
    assert cgroups.oom_killed(path)


def test_a_user_scope_is_not_asked_for_where_it_cannot_help(monkeypatch, v2):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    why = cgroups.enter_user_scope()
    assert why is not None and "user@1000.service" in why


def test_a_user_scope_is_asked_of_the_users_systemd_by_pid(tmp_path, monkeypatch, v2):
    """busctl is given this pid, a scope with Delegate=yes; a refusal is one line."""
    uid = os.getuid() or 1000
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    monkeypatch.setattr(os, "getuid", lambda: uid)
    service = v2 / "user.slice" / f"user-{uid}.slice" / f"user@{uid}.service"
    service.mkdir(parents=True)
    monkeypatch.setattr(cgroups, "user_service", lambda uid=None: service)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv"
    fake = bindir / "busctl"
    fake.write_text(f'#!/bin/sh\necho "$@" > {log}\necho "Access denied" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    why = cgroups.enter_user_scope()
    assert why == "the user's systemd refused a scope: Access denied"
    argv = log.read_text().split()
    assert argv[:2] == ["--user", "--quiet"] and "StartTransientUnit" in argv
    assert argv[argv.index("PIDs") + 3] == str(os.getpid())
    assert argv[argv.index("Delegate") + 2] == "true"


@pytest.mark.parametrize(
    ("help_text", "keeps"),
    [
        ("   --keep                    do not delete the container after it exits\n", True),
        ("      --no-new-keyring       keep the same session key\n", False),  # crun 1.8.1
        ("      --keep-going   not the flag\n", False),
    ],
)
def test_keep_is_what_the_runtime_says_it_supports_not_its_name(tmp_path, help_text, keeps):
    fake = tmp_path / "crun"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\nUsage: crun run [OPTION...]\n{help_text}EOF\n")
    fake.chmod(0o755)
    assert Runtime("crun", str(fake), "test").keeps is keeps
    assert Runtime("crun", str(tmp_path / "missing"), "test").keeps is False


def test_gc_outside_the_delegated_tree_still_looks_in_the_users_service(monkeypatch):
    """A non-root ``gradebox gc`` from a login shell (a session scope of the system's): its
    runners' containers went under user@UID.service, and that is where gc looks."""
    from gradebox.sandbox import oci

    service = Path("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cgroups, "v2_delegated", lambda: None)
    monkeypatch.setattr(cgroups, "user_service", lambda uid=None: service)
    assert oci._cgroup_parent() == f"{str(service)[len('/sys/fs/cgroup') :]}/{oci.CGROUP_PARENT}"
    monkeypatch.setattr(cgroups, "user_service", lambda uid=None: None)
    assert oci._cgroup_parent() == f"/{oci.CGROUP_PARENT}"
