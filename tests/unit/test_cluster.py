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
        sink(self.image(ref)["Id"].encode() * 5000)  # several chunks of the test's size

    def load_image(self, stream) -> None:  # type: ignore[no-untyped-def]
        import time

        data = stream.read()
        time.sleep(0.2)
        self.ids.add(data[:71].decode())
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

    from gradebox.cluster.image_transfer import ChunkStream, load_once
    from gradebox.images import qualified

    refs, store = sent_archive(monkeypatch, TINY)
    node = ImageEngine({})  # holds neither
    verified = []

    def worker() -> None:  # one of the node's worker processes, at its first job
        verified.append(load_once(
            tmp_path / "run" / ".images.lock",
            lambda: qualified("tiny-a") not in node.tags,
            node,  # type: ignore[arg-type]
            lambda: ChunkStream(refs, store.__getitem__),
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
    from gradebox.cluster.image_transfer import ChunkStream, load_once
    from gradebox.errors import ImageError

    refs, store = sent_archive(monkeypatch, TINY)
    node = ImageEngine({})
    planned = {**TINY, "tiny-b": "sha256:" + "c" * 64}  # what this node's driver planned
    with pytest.raises(ImageError, match="holds tiny-b with ids other than the ones asked for"):
        load_once(tmp_path / ".images.lock", lambda: True, node,  # type: ignore[arg-type]
                  lambda: ChunkStream(refs, store.__getitem__), planned)  # fmt: skip
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


def scripted_run(monkeypatch, before: list[dict], after: list[dict]):  # type: ignore[no-untyped-def]
    from gradebox.cluster import driver
    from gradebox.engine import Engine

    cluster = ScriptedCluster(before, after)

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


def test_nothing_is_sent_while_another_node_is_refused_and_every_node_is_named(monkeypatch):
    lacks = {"node": "n2", "problems": ["image python is not here"], "missing": ["python"]}
    other = {"node": "n3", "problems": ["image shell is 999999999999, the driver's is 33"]}
    cluster, run = scripted_run(monkeypatch, [lacks, other], [])
    with pytest.raises(ClusterError) as info:
        run.preflight()
    assert cluster.sends == 0
    assert "2 problem(s)" in str(info.value) and "node n2: image python" in str(info.value)
    assert "node n3: image shell is 9999" in str(info.value)
