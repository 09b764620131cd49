"""``gradebox doctor``'s rules without the host: rows from images' status and lock, the exit
code, KVM, the engine's fix, the backend row, the cgroup mode (the real command on this host:
tests/docker/test_doctor.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradebox.cli import machine as dr
from gradebox.images import ImageStatus, Lock, LockEntry


def _status(name: str, iid: str | None, up_to_date: bool = True) -> ImageStatus:
    inputs = "sha256:in" if up_to_date else "sha256:old"
    return ImageStatus(name, f"gradebox/{name}:latest", iid, 1, inputs if iid else None,
                       "sha256:in")  # fmt: skip


def _id(c: str) -> str:
    return "sha256:" + c * 64


def test_every_image_verified_is_ok():
    statuses = [_status("base", _id("b")), _status("python", _id("p"))]
    lock = Lock(images={"base": LockEntry(id=_id("b")), "python": LockEntry(id=_id("p"))})
    rows = dr.image_checks(statuses, lock, {"base": None, "python": None})
    assert [(r.name, r.state) for r in rows] == [("image base", "ok"), ("image python", "ok")]
    assert "verified against the lock" in rows[1].detail
    assert dr.kept(rows)


def test_a_missing_or_replaced_image_is_missing_with_its_fix():
    statuses = [_status("base", None), _status("python", _id("q")), _status("shell", None)]
    lock = Lock(images={"python": LockEntry(id=_id("p"))})
    problems = {"python": f"is {_id('q')[7:19]}, the lock says {_id('p')[7:19]}"}
    rows = {r.name: r for r in dr.image_checks(statuses, lock, problems)}
    assert rows["image base"].state == "missing"
    assert rows["image base"].fix == "gradebox images build"  # the base: bootstrapped
    assert rows["image shell"].fix == "gradebox images build shell"
    assert rows["image python"].state == "missing"
    assert "the lock says" in rows["image python"].detail
    assert rows["image python"].fix == "review it, then gradebox images lock"
    assert not dr.kept(list(rows.values()))


def test_an_image_the_lock_lacks_is_optional_unless_runs_are_locked():
    statuses = [_status("node", _id("n"))]
    lock = Lock(images={"python": LockEntry(id=_id("p"))})
    problems = {"python": None}
    (row, locked_elsewhere) = dr.image_checks(statuses, lock, problems)
    assert (row.state, row.fix) == ("optional", "gradebox images lock")
    assert "locked, not in the definitions" in locked_elsewhere.detail
    assert locked_elsewhere.state == "ok"
    (row, _) = dr.image_checks(statuses, lock, problems, locked=True)  # CI=true: --locked
    assert row.state == "missing"


def test_without_a_lock_built_images_are_ok_and_stale_ones_optional():
    rows = dr.image_checks([_status("python", _id("p")), _status("node", _id("n"), False)],
                           None, None)  # fmt: skip
    assert [r.state for r in rows] == ["ok", "optional"]
    assert "out of date with its definitions" in rows[1].detail
    assert rows[1].fix == "gradebox images build node && gradebox images lock"


def test_kvm_absent_or_not_kvm(tmp_path):
    row = dr.kvm("u", device=str(tmp_path / "kvm"))
    assert (row.state, row.detail) == ("info", f"no {tmp_path / 'kvm'}")
    fake = tmp_path / "not-kvm"
    fake.write_text("")
    row = dr.kvm("u", device=str(fake))
    assert "answers no KVM API" in row.detail and row.fix is None


@pytest.mark.parametrize("mode,fix", [(0o660, "sudo usermod -aG {group} alice"),
                                      (0o600, "sudo chmod 0666 {device}")])  # fmt: skip
def test_kvm_not_this_users(tmp_path, monkeypatch, mode, fix):
    import grp

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied")

    fake = tmp_path / "kvm"
    fake.write_text("")
    fake.chmod(mode)
    group = grp.getgrgid(fake.stat().st_gid).gr_name
    monkeypatch.setattr(os, "open", refused)
    row = dr.kvm("alice", device=str(fake))
    # A group of root's gives nobody else the device: only opening it does.
    expected = fix if fake.stat().st_gid != 0 else "sudo chmod 0666 {device}"
    assert row.fix == expected.format(group=group, device=fake)
    assert row.state == "info"  # not a promise of gradebox's


def test_the_engines_fix_says_which_step_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    sock = tmp_path / "docker.sock"
    sock.write_text("")
    monkeypatch.setattr(dr.os, "access", lambda path, mode: False)
    assert dr.engine_fix("alice", str(sock)) == "sudo usermod -aG docker alice (then log in again)"
    monkeypatch.setattr(dr, "which", lambda name: None)
    monkeypatch.setattr(dr.os.path, "exists", lambda path: False)
    assert dr.engine_fix("alice", str(sock)) == "sudo apt-get install -y docker.io"
    monkeypatch.setattr(dr, "which", lambda name: "/usr/bin/dockerd")
    assert dr.engine_fix("alice", str(sock)) == "sudo systemctl start docker"
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
    assert "DOCKER_HOST" in dr.engine_fix("alice")


@pytest.mark.parametrize(
    "picked,env,state",
    [("oci", None, "ok"), ("docker", None, "optional"), ("oci", "host", "missing"),
     ("oci", "docker", "ok")],
)  # fmt: skip
def test_the_backend_row(monkeypatch, picked, env, state):
    import gradebox.sandbox

    monkeypatch.setattr(gradebox.sandbox, "auto_reason", lambda: (picked, "because"))
    if env:
        monkeypatch.setenv("GRADEBOX_SANDBOX", env)
    else:
        monkeypatch.delenv("GRADEBOX_SANDBOX", raising=False)
    row = dr._backend(engine=True)
    assert row.state == state
    assert "because" in row.detail
    if env == "host":
        assert row.fix == "unset GRADEBOX_SANDBOX"
    if env == "docker":
        assert row.detail.startswith("GRADEBOX_SANDBOX=docker (auto would pick oci")


def test_a_runtimes_version_is_its_first_line(tmp_path):
    prog = tmp_path / "crun"
    prog.write_text("#!/bin/sh\necho 'crun version 1.8.1'\necho 'commit: abc'\n")
    prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    assert dr.version_of(str(prog)) == "crun version 1.8.1"
    assert dr.version_of(str(tmp_path / "none")).startswith("does not run")


@pytest.mark.parametrize("layout", ["v2", "hybrid", "hybrid-empty", "v1"])
def test_the_cgroup_mode(tmp_path, monkeypatch, layout):
    from gradebox.sandbox import cgroups, runtime

    unified = tmp_path / "unified"
    if layout.startswith("hybrid"):
        unified.mkdir()
        (unified / "cgroup.procs").write_text("")
    monkeypatch.setattr(cgroups, "unified", lambda: layout == "v2")
    monkeypatch.setattr(runtime, "UNIFIED", str(unified))
    monkeypatch.setattr(runtime, "hybrid_v2", lambda: layout == "hybrid")
    monkeypatch.setattr(cgroups, "v1_hierarchies", lambda: [Path("/sys/fs/cgroup/memory")])
    mode = dr.cgroup_mode()
    assert mode.split()[0] == layout.split("-")[0]
    assert ("crun runs where it is covered" in mode) == (layout == "hybrid")


@pytest.mark.parametrize("missing", [False, True])
def test_the_command_exits_1_when_a_piece_is_missing(monkeypatch, missing):
    from gradebox.cli.app import app

    rows = [dr.Check("engine", "ok", "Docker 27"), dr.Check("KVM", "info", "no /dev/kvm")]
    if missing:
        rows.append(dr.Check("init", "missing", "no tini", "apt-get install -y tini"))
    monkeypatch.setattr(dr, "diagnose", lambda: rows)
    done = CliRunner().invoke(app, ["doctor", "--json"])
    assert done.exit_code == (1 if missing else 0), done.output
    doc = json.loads(done.stdout)
    assert doc["ok"] is not missing
    assert [c["name"] for c in doc["checks"]] == [r.name for r in rows]
    assert set(doc["checks"][0]) == {"name", "state", "detail", "fix"}
    human = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "200"})
    assert human.exit_code == done.exit_code
    assert ("apt-get install -y tini" in human.stdout) == missing
    assert ("every promise can be kept here" in human.stdout) != missing


@pytest.mark.parametrize("mounts", [True, False])
def test_the_workspace_quota_is_the_promise_a_non_root_runner_does_not_keep(monkeypatch, mounts):
    from gradebox.files import workspace

    monkeypatch.setattr(workspace, "quota_mounts", lambda: mounts)
    row = dr._quota()
    assert row.state == ("ok" if mounts else "missing")
    assert (row.fix is None) == mounts


def test_docker_picked_with_no_engine_is_missing(monkeypatch):
    import gradebox.sandbox

    monkeypatch.delenv("GRADEBOX_SANDBOX", raising=False)
    monkeypatch.setattr(gradebox.sandbox, "auto_reason", lambda: ("docker", "no cgroups"))
    assert dr._backend(engine=False).state == "missing"
    monkeypatch.setattr(gradebox.sandbox, "auto_reason", lambda: ("oci", "as root"))
    assert dr._backend(engine=False).state == "ok"  # the engine's own row says it is missing
