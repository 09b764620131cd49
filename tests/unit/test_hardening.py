from pathlib import Path

from gradebox.sandbox.base import Limits, Mount, Security
from gradebox.sandbox.hardening import host_config, run_as


def test_defaults_are_locked_down():
    hc = host_config(Limits(), Security(), "none", ())
    assert hc["NetworkMode"] == "none"
    assert hc["ReadonlyRootfs"] is True
    assert hc["CapDrop"] == ["ALL"] and hc["CapAdd"] is None
    assert hc["SecurityOpt"] == ["no-new-privileges:true"]
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


def test_limits_map_one_to_one():
    limits = Limits(memory="512MiB", cpus=0.5, pids=64, file_size="1MiB", open_files=64)
    hc = host_config(limits, Security(capabilities=["NET_BIND_SERVICE"]), "bridge", ())
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
