import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from gradebox.sandbox.base import Limits, Mount, SandboxSpec, Security
from gradebox.sandbox.hardening import host_config, run_as
from gradebox.sandbox.init import INIT_PATH
from gradebox.sandbox.oci_config import runtime_config
from gradebox.sandbox.seccomp import seccomp_profile


def test_defaults_are_locked_down():
    hc = host_config(Limits(), Security(), "none", ())
    assert hc["NetworkMode"] == "none"
    assert hc["ReadonlyRootfs"] is True
    assert hc["CapDrop"] == ["ALL"] and hc["CapAdd"] is None
    assert hc["SecurityOpt"][0] == "no-new-privileges:true"
    seccomp = [o for o in hc["SecurityOpt"] if o.startswith("seccomp=")]
    assert len(seccomp) == 1  # ours, never the engine's default profile
    assert json.loads(seccomp[0].removeprefix("seccomp=")) == seccomp_profile()
    assert hc["Memory"] == hc["MemorySwap"] == 1 << 30  # no swap
    assert hc["NanoCpus"] == 1_000_000_000
    assert hc["PidsLimit"] == 256
    assert hc["Init"] is True and hc["Privileged"] is False
    assert hc["LogConfig"]["Type"] == "none"
    ulimits = {u["Name"]: u["Soft"] for u in hc["Ulimits"]}
    assert ulimits == {"fsize": 256 << 20, "nofile": 1024, "core": 0}
    assert set(hc["Tmpfs"]) == {"/tmp", "/home/grader"}
    assert "size=67108864" in hc["Tmpfs"]["/tmp"]
    assert not any("docker.sock" in b for b in hc["Binds"])
    # With an init of our own (it reports on a channel of its own) the engine adds none.
    assert host_config(Limits(), Security(), "none", (), own_init=True)["Init"] is False


def test_limits_map_one_to_one():
    limits = Limits(memory=512 << 20, cpus=0.5, pids=64, file_size=1 << 20, open_files=64)
    hc = host_config(limits, Security(capabilities=("NET_BIND_SERVICE",)), "bridge", ())
    assert hc["Memory"] == hc["MemorySwap"] == 512 << 20
    assert hc["NanoCpus"] == 500_000_000 and hc["PidsLimit"] == 64
    assert hc["CapAdd"] == ["NET_BIND_SERVICE"] and hc["NetworkMode"] == "bridge"


def test_mounts_and_modes():
    hc = host_config(
        Limits(),
        Security(),
        "none",
        (Mount(Path("/a"), "/w"), Mount(Path("/b"), "/x", read_only=False)),
    )
    assert hc["Binds"] == ["/a:/w:ro", "/b:/x:rw"]


def test_never_root_by_default():
    assert run_as(Security()) != "0" and not run_as(Security()).startswith("0:")
    assert run_as(Security(user="1234:1234")) == "1234:1234"


def test_our_init_replaces_the_engines():
    """The Docker backend binds the sealed tini itself (in ``mounts``); the engine adds its own
    (readable, so traceable, and silent) only where there is none."""
    sealed = Mount(Path("/cache/init/tini-0123"), INIT_PATH)
    hc = host_config(Limits(), Security(), "none", (sealed,), own_init=True)
    assert hc["Init"] is False and f"{sealed.source}:{INIT_PATH}:ro" in hc["Binds"]
    off = host_config(Limits(), Security(init=False), "none", ())
    assert off["Init"] is False and not any(INIT_PATH in b for b in off["Binds"])
    assert host_config(Limits(), Security(), "none", ())["Init"] is True  # no sealed copy


def test_both_backends_mount_scratch_alike():
    """/tmp and $HOME: the same flags on Docker and OCI (noexec, nosuid, nodev), and /dev/shm
    noexec on OCI as Docker mounts it."""
    hc = host_config(Limits(), Security(), "none", ())
    spec = SandboxSpec(image="sha256:" + "0" * 64, command=["true"])
    oci = runtime_config(spec, rootfs=Path("/r"), cgroup="/g", init_source=None)
    by_dest = {m["destination"]: set(m["options"]) for m in oci["mounts"]}
    for dest in ("/tmp", "/home/grader"):
        docker = set(hc["Tmpfs"][dest].split(","))
        assert {"noexec", "nosuid", "nodev"} <= docker, dest
        assert docker - {"rw"} == by_dest[dest], dest
    assert {"noexec", "nosuid", "nodev"} <= by_dest["/dev/shm"]


def test_the_init_is_sealed_execute_only_once_per_content(tmp_path, monkeypatch):
    import os
    import stat

    from gradebox.sandbox.init import sealed_init

    monkeypatch.setenv("GRADEBOX_CACHE", str(tmp_path / "cache"))
    tini = tmp_path / "tini-static"
    tini.write_bytes(b"\x7fELF pretend tini")
    sealed = sealed_init(tini)
    assert sealed is not None and sealed.read_bytes() == tini.read_bytes()
    assert stat.S_IMODE(os.stat(sealed).st_mode) == 0o111  # never readable: non-dumpable
    again = os.stat(sealed).st_ino
    assert sealed_init(tini) == sealed and os.stat(sealed).st_ino == again  # reused
    os.chmod(sealed, 0o755)  # someone loosened it: it is sealed again
    assert stat.S_IMODE(os.stat(sealed_init(tini)).st_mode) == 0o111
    tini.write_bytes(b"\x7fELF a newer tini")  # an upgrade: a copy of its own
    os.utime(tini, ns=(1, 1))
    newer = sealed_init(tini)
    assert newer is not None and newer != sealed and newer.read_bytes() == b"\x7fELF a newer tini"
    monkeypatch.setenv("GRADEBOX_CACHE", str(tini / "not-a-folder"))
    assert sealed_init(tini) is None  # no copy can be made: the caller falls back


# Each of these is uid 0 to the engine (Docker reads "00" and "+0" as numbers) or to the
# runtime (the OCI config's user is int(uid): "0_0" too; 2**32 wraps to 0 in crun).
ROOT_SPELLINGS = ["00", "+0", "0_0", " 0", "root", "4294967296", "\u0660"]


@pytest.mark.parametrize("user", ROOT_SPELLINGS)
def test_every_spelling_of_root_asks_for_root(user):
    from gradebox.sandbox.hardening import privileges_of

    assert privileges_of(Security(user=user)) == ["root"]
    assert privileges_of(Security(user=f"{user}:1000")) == ["root"]
    assert privileges_of(Security(user="1000:0")) == []  # a gid 0 alone is no root


@pytest.mark.parametrize("user", ROOT_SPELLINGS)
def test_a_configuration_writes_a_user_as_numbers(user):
    from gradebox.graders.config import ScriptGrader

    with pytest.raises(ValidationError, match="security.user"):
        ScriptGrader.model_validate({"command": ["true"], "security": {"user": user}})
    for fine in ("0", "0:0", "1000", "1000:1000", None):
        ScriptGrader.model_validate({"command": ["true"], "security": {"user": fine}})


@pytest.mark.parametrize(("name", "value"), [("memory", 0), ("memory", "1MiB"), ("tmpfs", 0)])
def test_a_limit_is_never_lowered_to_none(name, value):
    """0 is "no limit" to the engine (Memory=0, a tmpfs of size=0), and no privilege is asked
    to lower a limit: a floor keeps a lowered limit a limit."""
    from gradebox.graders.config import ScriptGrader

    with pytest.raises(ValidationError, match=f"limits.{name}"):
        ScriptGrader.model_validate({"command": ["true"], "limits": {name: value}})
