"""Which OCI runtime the oci backend drives (sandbox/runtime.py), and how it is named."""

from __future__ import annotations

import os

import pytest

from gradebox.cli import _command
from gradebox.sandbox import runtime


@pytest.fixture
def which(monkeypatch):
    """Pretend these programs are (or are not) installed."""
    installed: dict[str, str] = {}
    monkeypatch.setattr(runtime, "which", lambda name: installed.get(name))
    monkeypatch.delenv("GRADEBOX_RUNTIME", raising=False)
    return installed


def test_auto_prefers_crun_and_covers_the_hybrid_mount(which, monkeypatch):
    which.update(crun="/usr/bin/crun", runc="/usr/sbin/runc", unshare="/usr/bin/unshare")
    monkeypatch.setattr(runtime, "hybrid_v2", lambda: True)
    chosen = runtime.choose()
    assert (chosen.name, chosen.binary, chosen.hide_v2) == ("crun", "/usr/bin/crun", True)
    assert "hybrid" in chosen.why
    argv = chosen.one_shot([chosen.binary, "delete", "x"])
    assert argv[:4] == ["unshare", "-m", "--propagation", "slave"]
    assert argv[-3:] == ["/usr/bin/crun", "delete", "x"]
    assert runtime.UNIFIED in argv[argv.index("-c") + 1]


def test_auto_on_a_plain_host_runs_crun_as_it_is(which, monkeypatch):
    which.update(crun="/usr/bin/crun", runc="/usr/sbin/runc")
    monkeypatch.setattr(runtime, "hybrid_v2", lambda: False)
    chosen = runtime.choose()
    assert chosen.name == "crun" and not chosen.hide_v2
    assert chosen.one_shot(["/usr/bin/crun", "kill"]) == ["/usr/bin/crun", "kill"]


def test_auto_falls_back_to_runc_and_says_why(which, monkeypatch):
    which.update(runc="/usr/sbin/runc")
    monkeypatch.setattr(runtime, "hybrid_v2", lambda: True)
    chosen = runtime.choose()
    assert chosen.name == "runc" and not chosen.hide_v2
    assert "crun is not installed" in chosen.why
    # A hybrid host without unshare(1): crun could not run there.
    which.update(crun="/usr/bin/crun")
    assert runtime.choose().name == "runc"
    assert "unshare" in runtime.choose().why


def test_a_runtime_named_outright_is_used_as_named(which, monkeypatch):
    which.update(crun="/usr/bin/crun", runc="/usr/sbin/runc")
    monkeypatch.setattr(runtime, "hybrid_v2", lambda: False)
    monkeypatch.setenv("GRADEBOX_RUNTIME", "runc")
    assert runtime.choose().name == "runc"
    assert runtime.choose("crun").name == "crun"  # the argument wins over the environment


def test_each_runtime_keeps_its_own_state():
    r = runtime.Runtime("runc", "/usr/sbin/runc", "")
    c = runtime.Runtime("crun", "/usr/bin/crun", "")
    # runc's keeps the name earlier versions used: gc still finds what they left.
    assert r.state_dir("/run/gradebox") == "/run/gradebox/runtime"
    assert c.state_dir("/run/gradebox") == "/run/gradebox/runtime-crun"


@pytest.mark.parametrize("value", ["crun", "runc", "auto", "/bin/sh"])
def test_runtime_option_accepts_names_and_programs(value):
    assert runtime.checked(value) == value


@pytest.mark.parametrize("value", ["kata", "", "bin/crun", "/nonexistent/crun", "/etc/passwd"])
def test_runtime_option_refuses_anything_else_in_one_line(value):
    with pytest.raises(ValueError, match="unknown OCI runtime") as info:
        runtime.checked(value)
    assert "\n" not in str(info.value)


def test_hybrid_is_read_from_the_unified_mount(tmp_path, monkeypatch):
    unified = tmp_path / "unified"
    unified.mkdir()
    monkeypatch.setattr(runtime, "UNIFIED", str(unified))
    monkeypatch.setattr(runtime.os.path, "exists", lambda p: False if p.endswith(
        "/sys/fs/cgroup/cgroup.controllers") else os.path.lexists(p))  # fmt: skip
    assert not runtime.hybrid_v2()  # no cgroup2 mount there
    (unified / "cgroup.controllers").write_text("\n")
    assert not runtime.hybrid_v2()  # cgroup2 with no controller: crun takes it
    (unified / "cgroup.controllers").write_text("hugetlb\n")
    assert runtime.hybrid_v2()


def test_the_root_runtime_option_takes_a_value_before_the_command():
    # The watchdog is forked for the command named, not for --runtime's value.
    assert _command(["--runtime", "crun", "run", "suite.yaml"]) == "run"
    assert _command(["--debug", "--runtime", "runc", "exec", "--", "true"]) == "exec"
    assert _command(["--runtime", "crun"]) is None


def test_auto_looks_for_the_runtime_once(monkeypatch):
    """``auto`` checks the OCI backend and names its runtime from one choice (each choice
    looks up programs and reads cgroup files: ~0.2 ms, on every ``gradebox exec``)."""
    from gradebox.sandbox import auto_reason, oci, userns

    calls: list[str | None] = []

    def choose(wanted=None):
        calls.append(wanted)
        return runtime.Runtime("runc", "/bin/sh", "runc: a stand-in")

    monkeypatch.setattr(oci, "choose_runtime", choose)
    monkeypatch.setattr(oci, "init_binary", lambda: "/bin/sh")
    monkeypatch.setattr(userns, "missing", lambda: None)
    monkeypatch.setattr(oci, "rootless_cgroups", lambda engine=None: None)
    chosen, why = auto_reason()
    assert chosen == "oci" and why.startswith("runc: a stand-in")
    assert calls == [None]


@pytest.mark.parametrize("command", ["validate", "exec"])
def test_a_runtime_named_in_the_environment_is_checked_as_the_option_is(tmp_path, command):
    """$GRADEBOX_RUNTIME with a typo (`crnu`) fell back to the docker backend (for `exec`
    without a word) where `--runtime crnu` is refused: both are one line, exit 2 (exec's own
    failure, 125, for exec), nothing run. Control: a known name goes through."""
    import subprocess
    import sys

    tmp_path.chmod(0o755)  # exec's current folder: open to the sandbox user
    (tmp_path / "suite.yaml").write_text(
        "tests:\n  - {id: t, output: x, assert: [{type: equals, value: x}]}\n"
    )
    argv = {"validate": ["validate", "suite.yaml", "--sandbox", "host"],
            # (--max-calls 0 is refused after the runtime: exec's control starts nothing)
            "exec": ["exec", "--max-calls", "0", "--", "true"]}[command]  # fmt: skip

    def cli(value: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GRADEBOX_RUNTIME": value}
        return subprocess.run([sys.executable, "-m", "gradebox", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    bad = cli("crnu")
    assert bad.returncode == (125 if command == "exec" else 2), bad.stderr
    assert "$GRADEBOX_RUNTIME: unknown OCI runtime 'crnu'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    good = cli("runc")
    if command == "exec":
        assert good.returncode == 125 and "--max-calls" in good.stderr, good.stderr
    else:
        assert good.returncode == 0, good.stderr


def test_which_never_looks_in_the_current_folder(tmp_path, monkeypatch):
    from gradebox.core import programs as _programs

    (tmp_path / "crun").write_text("#!/bin/sh\n")
    (tmp_path / "crun").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    for path in (":/nonexistent", "/nonexistent:", ".:/nonexistent", "bin/..:/nonexistent"):
        monkeypatch.setenv("PATH", path)
        assert _programs.which("crun") is None, path
        assert _programs.search_path() == ["/nonexistent"]
        _programs.absolute_path()
        assert os.environ["PATH"] == "/nonexistent"
    monkeypatch.setenv("PATH", ":.")
    _programs.absolute_path()
    assert os.environ["PATH"] == _programs.FALLBACK
