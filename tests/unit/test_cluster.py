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
from gradebox.cluster.node import RunSpec
from gradebox.errors import ClusterError
from gradebox.files.workspace import remove_tree
from gradebox.lifecycle.jobs import GradeJob, Record, TestJob, TrialJob, decode, encode
from gradebox.suite import load_suite
from tests.conftest import write


def test_a_bundle_keeps_links_as_links_and_leaves_keys_and_caches_behind(tmp_path):
    src = tmp_path / "src"
    write(src / "suite.yaml", "tests: []\n")
    write(src / "tpl" / "a.txt", "a\n")
    os.symlink("../tpl/a.txt", src / "tpl" / "up-link")  # up and down again, inside
    os.symlink("a.txt", src / "tpl" / "rel-link")
    write(src / ".env", "OPENAI_API_KEY=sk-secret\n")
    write(src / "sub" / ".env.local", "X=1\n")
    write(src / "__pycache__" / "x.pyc", "junk")
    write(src / "out" / "results.jsonl", "{}\n")
    os.mkfifo(src / "fifo")
    dest = unpack(lambda: pack(src, exclude=[src / "out"]), tmp_path / "run" / "bundle")
    assert (dest / "tpl" / "a.txt").read_text() == "a\n"
    assert os.readlink(dest / "tpl" / "up-link") == "../tpl/a.txt"
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

    from gradebox.core.scratch import collect_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    write(tmp_path / "gradebox-ray-0123abcd" / "bundle" / "f", "1\n")
    assert collect_scratch() == [] and (tmp_path / "gradebox-ray-0123abcd").exists()
    assert collect_scratch(everything=True) == [tmp_path / "gradebox-ray-0123abcd"]
    assert not (tmp_path / "gradebox-ray-0123abcd").exists()


def test_a_watchdogs_sweep_takes_its_runners_folders_alone(tmp_path, monkeypatch):
    """The watchdog of a killed runner (perhaps a zombie, still 'alive') sweeps only that
    runner's leftovers: not a live neighbour's, not another dead runner's, not a cluster's."""
    import os
    import tempfile

    from gradebox.core.scratch import collect_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine, live = tmp_path / f"gradebox-{os.getpid()}-a", tmp_path / f"gradebox-{os.getppid()}-b"
    dead, ray = tmp_path / "gradebox-4194304-c", tmp_path / "gradebox-ray-0123abcd"
    for folder in (mine, live, dead, ray):
        write(folder / "f", "1\n")
    assert collect_scratch(owner=os.getpid()) == [mine]
    assert not mine.exists() and live.exists() and dead.exists() and ray.exists()
    assert collect_scratch(owner=os.getpid(), everything=True) == []


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


def _hostile(*members: tuple[str, bytes, str]) -> bytes:
    """A gzipped tar written by hand: (name, type, link name or content) per member."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value.encode()))
                continue
            if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                info.devmajor, info.devminor = 1, 3  # /dev/null's numbers
            info.linkname = value
            tar.addfile(info)
    return buf.getvalue()


FILE = ("ok.txt", tarfile.REGTYPE, "fine\n")


@pytest.mark.parametrize(
    "member",
    [
        ("stolen", tarfile.LNKTYPE, "../secret"),  # a hardlink up into the run folder
        ("stolen", tarfile.LNKTYPE, "{secret}"),  # a hardlink by absolute path
        ("twin", tarfile.LNKTYPE, "ok.txt"),  # even inside: pack never makes one
        ("ghost", tarfile.LNKTYPE, "not/there"),  # a dangling hardlink
        ("null", tarfile.CHRTYPE, ""),
        ("disk", tarfile.BLKTYPE, ""),
        ("pipe", tarfile.FIFOTYPE, ""),
        ("abs", tarfile.SYMTYPE, "/etc/passwd"),
        ("out", tarfile.SYMTYPE, "../secret"),
        ("sub/out", tarfile.SYMTYPE, "../../secret"),
        ("sub/far", tarfile.SYMTYPE, "x/../../.."),
    ],
    ids=["hardlink-up", "hardlink-absolute", "hardlink-inside", "hardlink-dangling",
         "char-device", "block-device", "fifo", "symlink-absolute", "symlink-up",
         "symlink-up-from-a-folder", "symlink-up-through-dots"],
)  # fmt: skip
def test_a_hostile_bundle_is_refused_naming_the_member(tmp_path, member):
    secret = write(tmp_path / "run" / "secret", "host secret\n")
    name, kind, value = member
    data = _hostile(FILE, (name, kind, value.format(secret=secret)))
    dest = tmp_path / "run" / "bundle"
    with pytest.raises(ClusterError, match=f"'{name}'"):
        unpack(lambda: data, dest)
    assert not dest.exists() and not (tmp_path / "run" / "bundle.partial").exists()
    assert secret.read_text() == "host secret\n" and os.stat(secret).st_nlink == 1


def test_a_link_that_escapes_through_another_link_is_refused(tmp_path):
    """Each link alone stays inside by its text; together they climb out of the bundle."""
    write(tmp_path / "run" / "secret", "host secret\n")
    data = _hostile(
        ("here", tarfile.SYMTYPE, "."),
        ("climb", tarfile.SYMTYPE, "here/here/.."),  # textually "here": physically the parent
    )
    with pytest.raises(ClusterError, match="'climb'"):
        unpack(lambda: data, tmp_path / "run" / "bundle")
    assert not (tmp_path / "run" / "bundle").exists()


@pytest.mark.parametrize("name", ["alias/f", "alias"])
def test_nothing_is_written_through_a_link(tmp_path, name):
    data = _hostile(
        ("sub", tarfile.DIRTYPE, ""), ("alias", tarfile.SYMTYPE, "sub/f"),
        (name, tarfile.REGTYPE, "through\n"),
    )  # fmt: skip
    with pytest.raises(ClusterError, match=f"'{name}'"):
        unpack(lambda: data, tmp_path / "run" / "bundle")


def test_a_bundle_of_contained_links_unpacks_as_the_control(tmp_path):
    data = _hostile(
        FILE, ("sub", tarfile.DIRTYPE, ""), ("sub/up", tarfile.SYMTYPE, "../ok.txt"),
        ("here", tarfile.SYMTYPE, "."), ("sub/dangling", tarfile.SYMTYPE, "later/x"),
    )  # fmt: skip
    dest = unpack(lambda: data, tmp_path / "run" / "bundle")
    assert (dest / "sub" / "up").read_text() == "fine\n"
    assert os.readlink(dest / "sub" / "dangling") == "later/x"


def test_a_corrupt_bundle_is_a_cluster_error(tmp_path):
    data = _hostile(FILE, ("big", tarfile.REGTYPE, "x" * 100_000))
    for broken in (data[: len(data) // 2], b"not a tar at all", data[:10] + b"\0" * 50):
        with pytest.raises(ClusterError, match="could not be unpacked"):
            unpack(lambda b=broken: b, tmp_path / "run" / "bundle")


def test_hardlinked_files_travel_as_two_files(tmp_path):
    write(tmp_path / "src" / "a.txt", "same\n")
    os.link(tmp_path / "src" / "a.txt", tmp_path / "src" / "b.txt")
    dest = unpack(lambda: pack(tmp_path / "src"), tmp_path / "run" / "bundle")
    assert (dest / "a.txt").read_text() == (dest / "b.txt").read_text() == "same\n"


@pytest.mark.parametrize("link", ["/etc/passwd", "../../outside.txt"])
def test_a_link_out_of_the_folder_is_refused_when_packing(tmp_path, link):
    write(tmp_path / "outside.txt", "x\n")
    write(tmp_path / "src" / "tpl" / "f", "1\n")
    os.symlink(link, tmp_path / "src" / "tpl" / "out")
    with pytest.raises(ClusterError, match="tpl/out: a link out of"):
        pack(tmp_path / "src")


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


def test_a_run_and_its_jobs_travel_by_pickle(tmp_path):
    spec = RunSpec(run_id="r1", kind="suite", bundle=None, entry="suite.yaml",
                   images={"python": "sha256:" + "0" * 64}, fingerprints={"a": "x"})  # fmt: skip
    assert pickle.loads(pickle.dumps(spec)) == spec
    record = Record(id="p1", input="q", output="a")
    for job in (TestJob("t-01"), GradeJob(3, record), TrialJob(2, record, "echo hi", "sha256:0")):
        assert pickle.loads(pickle.dumps(job)) == job


def test_a_result_crosses_a_process_boundary_unchanged():
    """What a node sends back (JSON text) is read back as the very result it encoded."""
    from gradebox.protocol.models import GraderResult, Status, TestResult

    record = Record(id="p1", input="q", output="a")
    results = [
        (TestJob("t"), TestResult(id="t", status=Status.passed, passed=True, score=1.0)),
        (GradeJob(1, record), GraderResult(name="g", type="script", status=Status.failed,
                                           passed=False, score=0.25, evidence="why")),
        (TrialJob(1, record, "echo", "sha256:0"), record.model_copy(update={"output": "yes"})),
    ]  # fmt: skip
    for job, value in results:
        back = decode(job, encode(job, value))
        assert back == value and type(back) is type(value)


def test_run_target_travels_to_the_nodes(tmp_path):
    """`run --target` reaches each node, which loads the suite with it (else its fingerprints
    differ from the driver's and the node is refused)."""
    import dataclasses

    from gradebox.cluster import start_suite

    class Stub:
        def start(self, **fields):  # type: ignore[no-untyped-def]
            return fields

    path = write(tmp_path / "suite.yaml", "tests:\n  - {id: a, output: x, assert: []}\n")
    plan = type("Plan", (), {"images": {}})()
    fields = start_suite(Stub(), load_suite(path), plan, sandbox="auto",  # type: ignore[arg-type]
                         target="judge")  # fmt: skip
    assert fields["target"] == "judge"
    assert "target" in {f.name for f in dataclasses.fields(RunSpec)}


class ImageEngine:
    """An engine of image ids and tags: saving writes an image's id as its bytes, loading
    reads it back, slowly (workers of a node that did not wait for each other overlap)."""

    def __init__(self, tags: dict[str, str]) -> None:
        self.tags, self.ids, self.loads = dict(tags), set(tags.values()), 0

    def image(self, ref: str) -> dict[str, str]:
        from gradebox.engine import NotFound

        iid = self.tags.get(ref) or (ref if ref in self.ids else None)
        if iid is None:
            raise NotFound(f"no such image: {ref}")
        return {"Id": iid}

    def save_image(self, ref: str, sink) -> None:  # type: ignore[no-untyped-def]
        """A ``docker save`` by id: its config, a layer of several chunks of the test's size,
        a manifest without tags."""
        import io
        import json
        import tarfile

        hex_id = self.image(ref)["Id"][7:]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in (
                (f"{hex_id}.json", b"{}"),
                (f"{hex_id}/layer.tar", hex_id.encode() * 5000),
                ("manifest.json", json.dumps([{"Config": f"{hex_id}.json"}]).encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        sink(buf.getvalue())

    def load_image(self, stream) -> None:  # type: ignore[no-untyped-def]
        import io
        import json
        import tarfile
        import time

        with tarfile.open(fileobj=io.BytesIO(stream.read())) as tar:
            manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        time.sleep(0.2)
        self.ids.update("sha256:" + e["Config"].removesuffix(".json") for e in manifest)
        self.loads += 1

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.tags[f"{repository}:{tag}"] = self.image(image)["Id"]


TINY = {"tiny-a": "sha256:" + "a" * 64, "tiny-b": "sha256:" + "b" * 64}  # in no real lock


def sent_archive(monkeypatch, ids: dict[str, str]) -> tuple[list[bytes], dict]:  # type: ignore[no-untyped-def]
    """The driver's side: ``ids`` saved from an engine holding them, put in small chunks."""
    from gradebox.cluster import image_transfer
    from gradebox.images import qualified

    monkeypatch.setattr(image_transfer, "CHUNK", 4096)
    store: dict[int, bytes] = {}

    def put(chunk: bytes) -> int:
        store[len(store)] = chunk
        return len(store) - 1

    driver = ImageEngine({qualified(n): i for n, i in ids.items()})
    refs, size = image_transfer.put_archive(driver, ids, put)  # type: ignore[arg-type]
    assert len(refs) > 2 and size == sum(len(c) for c in store.values())
    return refs, store


def test_images_a_node_lacks_travel_in_chunks_and_are_loaded_once_per_node(tmp_path, monkeypatch):
    import threading

    from gradebox.cluster.image_transfer import load_once
    from gradebox.images import qualified
    from gradebox.images.archive import IterStream

    refs, store = sent_archive(monkeypatch, TINY)
    node = ImageEngine({})  # holds neither
    verified = []

    def worker() -> None:  # one of the node's worker processes, at its first job
        verified.append(load_once(
            tmp_path / "run" / ".images.lock",
            lambda: qualified("tiny-a") not in node.tags,
            node,  # type: ignore[arg-type]
            lambda: IterStream(map(store.__getitem__, refs)),
            TINY,
        ))  # fmt: skip

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert node.loads == 2  # each image once, by one worker; the others found them
    assert {node.tags[qualified(n)] for n in TINY} == set(TINY.values())
    assert sorted(verified, key=str) == [None, None, None, {"tiny-a": None, "tiny-b": None}]


def test_a_sent_archive_naming_other_ids_is_refused_before_a_byte_is_loaded(tmp_path, monkeypatch):
    from gradebox.cluster.image_transfer import load_once
    from gradebox.errors import ImageError
    from gradebox.images.archive import IterStream

    refs, store = sent_archive(monkeypatch, TINY)
    node = ImageEngine({})
    planned = {**TINY, "tiny-b": "sha256:" + "c" * 64}  # what this node's driver planned
    with pytest.raises(ImageError, match="holds tiny-b with ids other than the ones asked for"):
        load_once(tmp_path / ".images.lock", lambda: True, node,  # type: ignore[arg-type]
                  lambda: IterStream(map(store.__getitem__, refs)), planned)  # fmt: skip
    assert node.loads == 0


def test_a_node_lacking_images_is_told_apart_from_one_holding_other_bytes():
    from gradebox.cluster.node import _image_gaps
    from gradebox.errors import ImageError

    here = {"python": "sha256:" + "1" * 64, "shell": "sha256:" + "9" * 64}

    class Resolver:
        def resolve(self, ref: str) -> str:
            if ref not in here:
                raise ImageError(f"image {ref} is not built on this engine")
            return here[ref]

    planned = {"python": "sha256:" + "1" * 64, "node": "sha256:" + "2" * 64,
               "shell": "sha256:" + "3" * 64, "x/y@sha256:" + "4" * 64: "sha256:" + "4" * 64,
               "build:/s/Dockerfile": "sha256:" + "5" * 64}  # fmt: skip
    lacking, refusals = _image_gaps(planned, Resolver())
    assert lacking == ["node"]  # a name of the lock, not here at all: the driver sends it
    assert len(refusals) == 2
    assert refusals[0].startswith("image shell is 999999999999, the driver's is 333333333333")
    assert refusals[1].startswith("image x/y@sha256:4444") and "is missing" in refusals[1]


class ScriptedCluster:
    """A cluster whose nodes answer the preflight as scripted: by whether the spec they are
    given carries sent images."""

    def __init__(self, before: list[dict], after: list[dict]) -> None:
        self.before, self.after, self.sends = before, after, 0
        self.ray = type("Ray", (), {"put": staticmethod(lambda x: x)})()

    def on_every_node(self, timeout, op, spec=None, run_id=None):  # type: ignore[no-untyped-def]
        if op == "sweep":
            return []
        return [(r["node"], r) for r in (self.after if spec.images_sent else self.before)]

    def slots(self) -> int:
        return 2

    def sizes(self, aside):  # type: ignore[no-untyped-def]
        return None  # unknown: nothing refused up front for its size

    def nodes(self) -> list[dict]:
        reports = self.after if self.sends else self.before
        return [{"NodeID": f"{r['node']}-id", "Resources": {"gradebox": 1}} for r in reports]


def scripted_run(monkeypatch, before: list[dict], after: list[dict]):  # type: ignore[no-untyped-def]
    from gradebox.cluster import driver
    from gradebox.engine import Engine

    cluster = ScriptedCluster(before, after)
    cluster.ray.nodes = cluster.nodes  # type: ignore[attr-defined]

    def put_archive(engine, ids, put):  # type: ignore[no-untyped-def]
        cluster.sends += 1
        cluster.sent_ids = ids
        return [put(b"chunk")], 64 << 20

    monkeypatch.setattr(driver, "put_archive", put_archive)
    monkeypatch.setattr(Engine, "connect", classmethod(lambda cls, *a, **k: None))
    images = {"python": "sha256:" + "1" * 64, "shell": "sha256:" + "3" * 64}
    spec = RunSpec(run_id="r1", kind="suite", bundle=None, entry="suite.yaml", images=images)
    return cluster, driver.RayExecutor(cluster, spec)  # type: ignore[arg-type]


def test_the_driver_sends_the_images_nodes_lack_then_checks_them_again(monkeypatch):
    lacks = {"node": "n2", "problems": ["image python is not here"], "missing": ["python"]}
    fine = {"node": "n1", "problems": [], "sandbox": "oci"}
    cluster, run = scripted_run(monkeypatch, [fine, lacks], [fine, {**fine, "node": "n2"}])
    run.preflight()
    assert cluster.sends == 1 and cluster.sent_ids == {"python": "sha256:" + "1" * 64}
    assert run.spec.images_sent == (b"chunk",) and run.spec_ref is run.spec
    assert run.describe() == "2 nodes (oci on 2), 2 slots; sent image python (64 MiB, 1 chunks)"


def test_a_node_lacking_images_gets_them_while_a_node_with_other_bytes_is_set_aside(monkeypatch):
    lacks = {"node": "n2", "problems": ["image python is not here"], "missing": ["python"]}
    other = {"node": "n3", "problems": ["image shell is 999999999999, the driver's is 33"]}
    cluster, run = scripted_run(monkeypatch, [lacks, other], [{**lacks, "problems": []}, other])
    run.preflight()
    assert cluster.sends == 1  # the lacking node got them; other bytes are never overwritten
    assert run.set_aside == {"n3-id": "image shell is 999999999999, the driver's is 33"}


def test_every_node_refused_stops_the_run_naming_each(monkeypatch):
    other = {"node": "n3", "problems": ["image shell is 999999999999, the driver's is 33"]}
    old = {"node": "n4", "problems": ["gradebox 0.1 here, the driver's is newer"]}
    cluster, run = scripted_run(monkeypatch, [other, old], [])
    with pytest.raises(ClusterError) as info:
        run.preflight()
    assert cluster.sends == 0
    assert "2 problem(s)" in str(info.value) and "no usable node" in str(info.value)
    assert "node n3: image shell is 9999" in str(info.value) and "node n4: gradebox" in str(
        info.value
    )


SIZED = """\
name: sized
defaults: {limits: {memory: 256MiB, cpus: 0.5}}
tests:
  - id: trivial
    output: x
    assert: [{type: contains, value: x}]
  - id: one
    output: x
    assert: [{type: script, command: 'true'}]
  - id: six
    output: x
    assert:
"""


def test_a_tests_request_is_its_containers_limits_at_once(tmp_path):
    """Built-in assertions ask for nothing but the slot; graders run GRADER_THREADS at a
    time, so a test asks for the sum of its largest four (each resource on its own); a target
    runs alone, before them, so the larger phase wins."""
    from gradebox.cluster.sizing import GRADER_THREADS, Need, test_need

    sizes = ((0.25, 512), (0.5, 64), (0.75, 128), (0.1, 32), (0.05, 16), (0.2, 8))
    graders = [
        f"      - {{type: script, command: 'true', limits: {{cpus: {c}, memory: {m}MiB}}}}"
        for c, m in sizes
    ]
    suite = load_suite(write(tmp_path / "s.yaml", SIZED + "\n".join(graders) + "\n"))
    needs = {t.id: test_need(suite, t) for t in suite.tests}
    assert GRADER_THREADS == 4
    assert needs["trivial"] == Need(0.0, 0)
    assert needs["one"] == Need(0.5, 256 << 20)  # the suite's defaults
    # Largest four CPUs 0.75+0.5+0.25+0.2; largest four memories 512+128+64+32 MiB.
    assert needs["six"] == Need(1.7, (512 + 128 + 64 + 32) << 20)
    target = "target: {command: [sh, -c, 'echo x'], limits: {cpus: 3, memory: 128MiB}}\n"
    suite = load_suite(write(tmp_path / "t.yaml", target + SIZED + "\n".join(graders) + "\n"))
    needs = {t.id: test_need(suite, t) for t in suite.tests}
    assert needs["trivial"] == Need(3.0, 128 << 20)
    assert needs["six"] == Need(3.0, (512 + 128 + 64 + 32) << 20)


def test_a_request_becomes_rays_options_and_fits_a_node_by_all_three():
    from gradebox.cluster.sizing import Need, grader_need
    from gradebox.sandbox.defaults import Limits

    need = grader_need(Limits(cpus=1.23456, memory=300 << 20))
    assert need.ray_options() == {"num_cpus": 1.2346, "memory": 300 << 20,
                                  "resources": {"gradebox": 1}}  # fmt: skip
    assert grader_need(None) == Need(1.0, 1 << 30)  # the default limits
    node = {"gradebox": 1, "CPU": 2, "memory": 1 << 30}
    assert need.fits(node)
    assert not need.fits({**node, "gradebox": 0})
    assert not need.fits({**node, "CPU": 1})
    assert not need.fits({**node, "memory": 299 << 20})


def test_a_test_larger_than_every_node_is_one_line_naming_it_and_the_sizes():
    from gradebox.cluster.sizing import Need, too_large

    nodes = [
        {"gradebox": 2, "CPU": 2, "memory": 2 << 30},
        {"gradebox": 1, "CPU": 4, "memory": 1 << 30},
    ]
    needs = {"test a": Need(1, 1 << 30), "test big": Need(3, 2 << 30), "test w": Need(4, 1 << 30)}
    assert too_large(needs, nodes) == [
        "test big asks for 3 CPU and 2 GiB (its containers' limits at once); the largest "
        "node offering `gradebox` has 4 CPU and 1 GiB"
    ]
    assert too_large(needs, []) == []  # no node known: nothing to compare with


class _FakeRay:
    """What ``RayExecutor`` asks of Ray: a task's items, which are ready, the live nodes."""

    class exceptions:  # noqa: N801 (Ray's module's name)
        class RayError(Exception):
            pass

        class RayTaskError(RayError):
            pass

        class WorkerCrashedError(RayError):
            pass

    def __init__(self, node_ids: list[str]) -> None:
        self.node_ids = node_ids
        self.cancelled: list = []

    def get(self, ref):  # type: ignore[no-untyped-def]
        if isinstance(ref, BaseException):  # the task was lost: Ray raises its error
            raise ref
        return ref  # a "ref" here is the item's value

    def wait(self, tasks, num_returns, timeout):  # type: ignore[no-untyped-def]
        # every task's next item is ready, but a task with none (not started, nowhere to)
        ready = [t for t in tasks if getattr(t, "items", True)][:num_returns]
        return ready, [t for t in tasks if t not in ready]

    def cancel(self, task, force):  # type: ignore[no-untyped-def]
        self.cancelled.append(task)

    def put(self, value):  # type: ignore[no-untyped-def]
        return value

    def nodes(self) -> list[dict]:
        return [{"NodeID": i, "Alive": True, "Resources": {"gradebox": 1.0}} for i in self.node_ids]


def _executor(node_ids: list[str]):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from gradebox.cluster.driver import RayExecutor

    ray = _FakeRay(node_ids)
    cluster = SimpleNamespace(ray=ray, nodes=ray.nodes, item=None, scale_up_timeout=1.0)
    spec = RunSpec(run_id="r", kind="suite", bundle=None, entry="s.yaml", images={})
    return RayExecutor(cluster, spec)  # type: ignore[arg-type]


def test_a_node_failing_the_preflight_at_a_job_is_set_aside_and_the_job_goes_elsewhere(caplog):
    from gradebox.cluster.driver import NODE_ID_LABEL

    bad, good = "b" * 56, "a" * 56
    run = _executor([good, bad])
    name = f"{bad[:12]} (127.0.0.1, host)"
    job = TestJob("t-1")
    # It never ran: it goes out again as the same attempt, and not to that node.
    assert run._collect(("refused", "no OCI runtime 'x'"), job, 1, name) == 1
    assert list(run.set_aside) == [bad]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"node {name} fails the preflight and is set aside: no OCI runtime 'x'"]
    assert [n["NodeID"] for n in run.usable()] == [good]
    options = {}
    run.cluster.item = type("T", (), {"options": lambda self, **kw: options.update(kw)})()
    run._task(job)
    assert options["name"] == "t-1" and options["label_selector"] == {NODE_ID_LABEL: f"!in({bad})"}


def test_a_node_whose_jobs_fail_three_times_in_a_row_for_infrastructure_is_drained(caplog):
    from gradebox.cluster.driver import DRAIN_AFTER, MAX_ATTEMPTS
    from gradebox.lifecycle.executor import Done

    flaky, good = "f" * 56, "a" * 56
    run = _executor([good, flaky])
    name = f"{flaky[:12]} (127.0.0.1, host)"
    from gradebox.protocol.models import Status, TestResult

    passed = TestResult(id="t-0", status=Status.passed, passed=True, score=1.0)
    ok = encode(TestJob("t-0"), passed)
    assert DRAIN_AFTER == 3 and MAX_ATTEMPTS == 3
    # Two in a row, then a success: the count starts again.
    for i in range(2):
        assert run._collect(("infra", "engine gone"), TestJob(f"t-{i}"), 1, name) == 2
    assert isinstance(run._collect(("ok", ok), TestJob("t-0"), 1, name), Done)
    assert not run.set_aside
    for i in range(2):
        assert run._collect(("infra", "engine gone"), TestJob(f"t-{i}"), 1, name) == 2
    assert not run.set_aside  # two in a row since the success
    # The third in a row drains it; a job at its last attempt is an error naming the node.
    done = run._collect(("infra", "engine gone"), TestJob("t-9"), MAX_ATTEMPTS, name)
    assert isinstance(done, Done) and done.error == f"node {name}: engine gone"
    assert list(run.set_aside) == [flaky]
    drained = [r.getMessage() for r in caplog.records if "drained" in r.getMessage()]
    assert drained == [
        f"node {name} is drained and is set aside: 3 jobs in a row failed there (last: engine gone)"
    ]


class _Task:
    """A task as the driver holds it (Ray's stream of its items): its node's name, then its
    answer; or Ray's error, from the item at which it was lost."""

    def __init__(self, *items: object) -> None:
        self.items = list(items)

    def __next__(self):  # type: ignore[no-untyped-def]
        return self.items.pop(0)

    def completed(self):  # type: ignore[no-untyped-def]
        return self  # its end: as its next item, here


class _Scheduler:
    """Ray placing each task on the first node its label selector allows: here the flaky
    node, whose worker dies under every task once it started, until it is set aside."""

    def __init__(self, nodes: list[str], crash: str, answer: tuple) -> None:
        self.nodes, self.crash, self.answer = nodes, crash, answer
        self.selector = ""
        self.sent: list[str] = []  # the node each task went to

    def options(self, **kw):  # type: ignore[no-untyped-def]
        from gradebox.cluster.driver import NODE_ID_LABEL

        self.selector = kw.get("label_selector", {}).get(NODE_ID_LABEL, "")
        return self

    def remote(self, spec, job):  # type: ignore[no-untyped-def]
        node = next(n for n in self.nodes if n not in self.selector)
        self.sent.append(node)
        name = f"{node[:12]} (127.0.0.1, host)"
        if node == self.crash:
            return _Task(name, _FakeRay.exceptions.WorkerCrashedError("the worker died"))
        return _Task(name, self.answer)


def test_a_node_that_dies_under_its_jobs_is_drained_and_they_run_elsewhere(caplog):
    """A task lost to its node's (or worker's) death counts against the node it started on,
    once per task, as a job the engine failed under does: three in a row drain it, and each
    job lost there runs again elsewhere, none lost, none twice."""
    from gradebox.cluster.driver import DRAIN_AFTER, MAX_ATTEMPTS
    from gradebox.protocol.models import Status, TestResult

    flaky, good = "f" * 56, "a" * 56
    run = _executor([flaky, good])
    passed = TestResult(id="t", status=Status.passed, passed=True, score=1.0)
    run.cluster.item = ray = _Scheduler([flaky, good], flaky, ("ok", encode(TestJob("t"), passed)))
    jobs = [TestJob(f"t-{i}") for i in range(5)]
    done = list(run.map(jobs, in_flight=DRAIN_AFTER))
    # The three sent there at once are lost, each counted once, and drain it; each lost job
    # goes out again kept off the node it was lost on, so none goes back to it.
    assert list(run.set_aside) == [flaky]
    assert run.failing[flaky[:12]] == ray.sent.count(flaky) == DRAIN_AFTER
    assert set(ray.sent[ray.sent.index(good) :]) == {good}
    drained = [r.getMessage() for r in caplog.records if "drained" in r.getMessage()]
    assert drained == [
        f"node {flaky[:12]} (127.0.0.1, host) is drained and is set aside: "
        "3 jobs in a row failed there (last: WorkerCrashedError)"
    ]
    # Every job recorded once, passed on the good node, within its attempts; no result lost.
    assert sorted(str(d.job) for d in done) == [str(j) for j in jobs]
    assert all(d.error is None and d.value.passed for d in done)
    assert {d.node for d in done} == {f"{good[:12]} (127.0.0.1, host)"}
    assert max(d.attempts for d in done) <= MAX_ATTEMPTS
    assert sum(d.attempts for d in done) == len(ray.sent)  # each task sent is one attempt


def test_a_job_lost_on_a_node_is_retried_on_another_while_one_is_left():
    """A node that flaps (its jobs lost, but never three in a row) is not drained: a job lost
    there goes out again to a healthy node, not back to it for all of its attempts; with no
    other node left it goes back there."""
    from gradebox.protocol.models import Status, TestResult

    flaky, good = "f" * 56, "a" * 56
    run = _executor([flaky, good])
    passed = TestResult(id="t", status=Status.passed, passed=True, score=1.0)
    run.cluster.item = ray = _Scheduler([flaky, good], flaky, ("ok", encode(TestJob("t"), passed)))
    (done,) = run.map([TestJob("t-0")], in_flight=1)
    assert ray.sent == [flaky, good] and not run.set_aside
    assert done.error is None and done.attempts == 2
    assert done.node == f"{good[:12]} (127.0.0.1, host)"
    # The only node: the job goes back to the node it was lost on, up to its attempts.
    alone = _executor([flaky])
    alone.cluster.item = ray = _Scheduler([flaky], flaky, ("ok", None))
    (done,) = alone.map([TestJob("t-1")], in_flight=1)
    assert ray.sent == [flaky] * 3 and "its node was lost 3 times" in done.error


def test_a_retry_kept_off_its_node_goes_back_there_when_the_other_node_dies_before_it_starts(
    monkeypatch,
):
    """Lost on A, the job goes out kept off A; B, the only other node, dies before it starts
    there: the task (which Ray would keep waiting for a node its selector allows) is
    cancelled and the job goes out again, the same attempt, and runs on A. Without that the
    run waits forever: A is usable and large enough, so no scale-up timeout fires."""
    from gradebox.cluster import driver
    from gradebox.protocol.models import Status, TestResult

    monkeypatch.setattr(driver, "STALL_CHECK", 0.0)
    a, b = "f" * 56, "a" * 56
    run = _executor([a, b])
    passed = TestResult(id="t", status=Status.passed, passed=True, score=1.0)
    ray = _Scheduler([a, b], a, ("ok", encode(TestJob("t"), passed)))
    remote = ray.remote

    def scripted(spec, job):  # type: ignore[no-untyped-def]
        task = remote(spec, job)
        if ray.sent[-1] == b:  # B dies as the task reaches it: nothing ever comes from it
            run.ray.node_ids.remove(b)
            ray.nodes.remove(b)
            return _Task()
        ray.crash = None  # A lost only the first task
        return task

    ray.remote, run.cluster.item = scripted, ray
    idle, wait = [], run.ray.wait

    def bounded(tasks, num_returns, timeout):  # type: ignore[no-untyped-def]
        ready, rest = wait(tasks, num_returns, timeout)
        idle.append(not ready)
        assert idle.count(True) < 50, "the run waits forever for a node its task cannot go to"
        return ready, rest

    run.ray.wait = bounded
    (done,) = run.map([TestJob("t-0")], in_flight=1)
    assert ray.sent == [a, b, a] and len(run.ray.cancelled) == 1 and not run.set_aside
    assert done.error is None and done.value.passed and done.attempts == 2
    assert done.node == f"{a[:12]} (127.0.0.1, host)"


def test_a_job_never_lost_is_sent_without_asking_ray_for_its_nodes():
    """Every job is sent through ``_kept_off``; one never lost avoids no node, so asking Ray
    for its nodes (a GCS call each) for each of a 10,000-test run's jobs is work for nothing."""
    run = _executor(["a" * 56, "b" * 56])
    asked = []
    run.cluster.nodes = lambda: asked.append(1) or []
    assert run._kept_off(TestJob("t-0"), ()) == []
    assert not asked


def test_a_task_lost_before_it_started_counts_against_no_node():
    """Its first item is already Ray's error: no node told, none blamed; it goes out again."""
    run = _executor(["a" * 56])
    lost = _FakeRay.exceptions.WorkerCrashedError("the worker died")
    assert run._started(lost) is None
    assert run._collect(lost, TestJob("t-0"), 1, None) == 2
    assert not run.failing and not run.set_aside


def test_a_run_folder_another_user_could_write_is_refused_before_anything_is_put_in_it(
    monkeypatch, tmp_path
):
    """The node's run folder sits in the shared temp folder: one made ahead under the run's
    name (here world-writable, as another local user's would be to us) is refused, and
    neither the bundle nor the images' lock goes into it."""
    from gradebox.cluster import node

    monkeypatch.setattr(node.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(node, "_watched", lambda: None)
    spec = RunSpec(run_id="r-shared", kind="suite", bundle=None, entry="suite.yaml", images={})
    planted = node.run_dir(spec.run_id)
    planted.mkdir()
    planted.chmod(0o777)
    with pytest.raises(node.NodeRefused, match="not its own: .* may be written by others"):
        node._Context(spec)
    assert list(planted.iterdir()) == []
