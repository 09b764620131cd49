"""The cluster's pure parts: the bundle a job carries, and the portable fingerprint a node
checks its copy of the suite with. (The cluster itself: tests/docker/test_ray.py.)"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import tarfile
from pathlib import Path

import pytest

from gradebox.cluster.bundle import common_root, pack, unpack
from gradebox.cluster.driver import suite_paths
from gradebox.cluster.node import Job
from gradebox.errors import ClusterError
from gradebox.suite import load_suite
from gradebox.workspace import remove_tree
from tests.conftest import write


def test_a_bundle_keeps_links_as_links_and_leaves_keys_and_caches_behind(tmp_path):
    src = tmp_path / "src"
    write(src / "suite.yaml", "tests: []\n")
    write(src / "tpl" / "a.txt", "a\n")
    os.symlink("/etc/passwd", src / "tpl" / "abs-link")  # a template may hold any link
    os.symlink("a.txt", src / "tpl" / "rel-link")
    write(src / ".env", "OPENAI_API_KEY=sk-secret\n")
    write(src / "sub" / ".env.local", "X=1\n")
    write(src / "__pycache__" / "x.pyc", "junk")
    write(src / "out" / "results.jsonl", "{}\n")
    os.mkfifo(src / "fifo")
    dest = unpack(lambda: pack(src, exclude=[src / "out"]), tmp_path / "run" / "bundle")
    assert (dest / "tpl" / "a.txt").read_text() == "a\n"
    assert os.readlink(dest / "tpl" / "abs-link") == "/etc/passwd"
    assert os.readlink(dest / "tpl" / "rel-link") == "a.txt"
    for gone in (".env", "sub/.env.local", "__pycache__", "out", "fifo"):
        assert not os.path.lexists(dest / gone), gone
    assert not any(p.name.endswith(".complete") for p in dest.rglob("*"))  # beside, not in


def test_a_bundle_is_unpacked_once_per_node(tmp_path):
    write(tmp_path / "src" / "f", "1\n")
    data = pack(tmp_path / "src")
    dest = unpack(lambda: data, tmp_path / "run" / "bundle")
    (dest / "f").write_text("changed by the first\n")

    def fetch() -> bytes:
        raise AssertionError("a node that has the files does not fetch them again")

    assert (unpack(fetch, dest) / "f").read_text() == "changed by the first\n"


def test_a_bundle_of_a_tree_nested_deeper_than_the_recursion_limit(tmp_path):
    deep = tmp_path / "src"
    path = deep
    path.mkdir()
    for _ in range(1500):  # deeper than Python's recursion limit
        path = path / "d"
        path.mkdir()
    (path / "leaf").write_text("x\n")
    try:
        with tarfile.open(fileobj=io.BytesIO(pack(deep)), mode="r:gz") as tar:
            assert "/".join(["d"] * 1500 + ["leaf"]) in tar.getnames()
    finally:
        remove_tree(deep)  # pytest's own clean-up recurses


def test_a_suite_spanning_the_whole_machine_is_refused_naming_the_path(tmp_path):
    with pytest.raises(
        ClusterError, match=r"/etc: the suite reaches this far, so its files span /;"
    ):
        common_root([tmp_path / "suite.yaml", Path("/etc")])


def test_gc_all_removes_a_killed_drivers_run_folders(tmp_path, monkeypatch):
    import tempfile

    from gradebox.scratch import collect_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    write(tmp_path / "gradebox-ray-0123abcd" / "bundle" / "f", "1\n")
    assert collect_scratch() == [] and (tmp_path / "gradebox-ray-0123abcd").exists()
    assert collect_scratch(everything=True) == [tmp_path / "gradebox-ray-0123abcd"]
    assert not (tmp_path / "gradebox-ray-0123abcd").exists()


def test_a_bundle_over_its_limit_is_refused_naming_the_folder(tmp_path):
    write(tmp_path / "big" / "blob", "x" * 4096)
    with pytest.raises(ClusterError, match=r"big: the files a cluster job needs pass"):
        pack(tmp_path / "big", limit=1024)


def test_a_bundle_that_writes_outside_its_folder_is_refused(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(ClusterError, match="could not be unpacked"):
        unpack(buf.getvalue, tmp_path / "run" / "bundle")
    assert not (tmp_path / "run" / "escaped").exists()


SUITE = """
name: s
workspace: {template: ./tpl}
tests:
  - id: a
    output: x
    assert: [{type: script, command: [python3, ../shared/g.py]}]
"""


def test_a_suite_reaching_past_its_folder_takes_that_folder_along(tmp_path):
    write(tmp_path / "shared" / "g.py", "print('ok')\n")
    write(tmp_path / "suite" / "tpl" / "f", "1\n")
    (tmp_path / ".gradebox").mkdir()  # the project's root: graders may reach ../shared/
    suite = load_suite(write(tmp_path / "suite" / "suite.yaml", SUITE))
    paths = suite_paths(suite)
    assert (tmp_path / "shared" / "g.py").resolve() in {p.resolve() for p in paths}
    assert tmp_path / "suite" / "tpl" in paths
    assert common_root(paths) == tmp_path


def test_the_portable_fingerprint_is_the_same_for_every_copy(tmp_path):
    write(tmp_path / "one" / "shared" / "g.py", "print('ok')\n")
    (tmp_path / "one" / ".gradebox").mkdir()
    write(tmp_path / "one" / "suite" / "tpl" / "f", "1\n")
    write(tmp_path / "one" / "suite" / "suite.yaml", SUITE)
    shutil.copytree(tmp_path / "one", tmp_path / "two")
    a = load_suite(tmp_path / "one" / "suite" / "suite.yaml")
    b = load_suite(tmp_path / "two" / "suite" / "suite.yaml")
    ta, tb = a.tests[0], b.tests[0]
    assert a.fingerprint(ta, portable=True) == b.fingerprint(tb, portable=True)
    (tmp_path / "two" / "shared" / "g.py").write_text("print('changed')\n")
    b = load_suite(tmp_path / "two" / "suite" / "suite.yaml")
    assert a.fingerprint(ta, portable=True) != b.fingerprint(b.tests[0], portable=True)


def test_a_job_travels_by_pickle(tmp_path):
    job = Job(run_id="r1", kind="suite", bundle=None, entry="suite.yaml",
              images={"python": "sha256:" + "0" * 64}, fingerprints={"a": "x"})  # fmt: skip
    assert pickle.loads(pickle.dumps(job)) == job
