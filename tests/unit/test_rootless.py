"""Rootless pieces without an engine: the id mapping, subordinate ranges, what `auto` says."""

from pathlib import Path

import pytest

from gradebox.core import subids
from gradebox.sandbox import userns
from gradebox.sandbox.rootfs import RootfsCache


def _covers(ranges):
    inside = [c + i for c, _, n in ranges for i in range(n)]
    outside = [h + i for _, h, n in ranges for i in range(n)]
    return inside, outside


@pytest.mark.parametrize("own", [1, 1000, 1001, 65534, 65535, 70000])
def test_the_mapping_keeps_the_runners_id_and_maps_the_rest_to_subordinates(own):
    ranges = userns._ranges(own, 100000)
    inside, outside = _covers(ranges)
    assert len(set(inside)) == len(inside) and len(set(outside)) == len(outside)
    assert (own, own, 1) in ranges  # the grader (the runner's uid) is itself on the host
    assert set(range(65535)) - {own} <= set(inside)  # every id an image uses, nobody too
    others = [h for h in outside if h != own]
    assert all(100000 <= h < 100000 + 65535 for h in others)  # never another real user
    assert dict((c, h) for c, h, _ in ranges)[0] == 100000  # the image's root is a subordinate


def test_subordinate_ranges_are_read_by_name_or_uid(tmp_path, monkeypatch):
    f = tmp_path / "subuid"
    f.write_text("other:200000:65536\nme:100000:65536\n1234:300000:100\n")
    monkeypatch.setattr(subids, "user_name", lambda: "me")
    monkeypatch.setattr(subids.os, "getuid", lambda: 4242)
    assert subids.subordinate(str(f), 4242) == (100000, 65536)
    assert subids.subordinate(str(f), 1234) is None  # too small a range
    assert subids.subordinate(str(tmp_path / "missing"), 4242) is None


def test_the_prerequisite_names_the_user_and_the_packages():
    line = subids.prerequisite("alice")
    assert "uidmap" in line and "mmdebstrap" in line
    assert line.endswith("alice") and "--add-subuids" in line and "--add-subgids" in line


def test_auto_says_why_it_falls_back(monkeypatch):
    from gradebox.sandbox import auto_reason, oci

    monkeypatch.setattr(
        oci, "oci_usable", lambda engine=None, runtime=None: "no cgroups for the limits"
    )
    chosen, why = auto_reason()
    assert chosen == "docker" and "no cgroups for the limits" in why
    monkeypatch.setattr(oci, "oci_usable", lambda engine=None, runtime=None: None)
    assert auto_reason()[0] == "oci"


def test_rootless_cache_entries_are_never_root_s(tmp_path):
    mapping = userns.IdMap(((0, 100000, 65536),), ((0, 100000, 65536),))
    digest = "ab" * 32
    root_dir = RootfsCache(None, root=tmp_path)._dir(f"sha256:{digest}")
    user_dir = RootfsCache(None, root=tmp_path, mapping=mapping)._dir(f"sha256:{digest}")
    assert root_dir == Path(tmp_path) / "rootfs" / digest
    assert user_dir != root_dir and user_dir.name.startswith(digest + "-u")


def test_the_oci_mapping_is_what_newuidmap_is_given():
    m = userns.IdMap(((0, 100000, 1001), (1001, 1001, 1)), ((0, 100000, 1),))
    assert m.oci()["uidMappings"][1] == {"containerID": 1001, "hostID": 1001, "size": 1}
