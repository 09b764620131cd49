"""`--ray` on a real local Ray cluster: a head and two worker nodes, each its own processes,
temp dir and $TMPDIR, each offering `gradebox` slots. Never skipped: without Ray or an engine
these fail."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from gradebox.images import qualified
from gradebox.sandbox.labels import LABEL_OWNER, parse_owner
from tests.conftest import write
from tests.executor_conformance import CHECKS, normalised
from tests.ray_cluster import LocalRay

pytestmark = pytest.mark.docker

GRADER = """\
import json, os, sys, time
d = json.load(sys.stdin)
time.sleep(float(d["metadata"].get("sleep", 0)))
ok = d["output"] == "good" and os.path.exists(os.environ["EVALUATE_WORKSPACE"] + "/a.txt")
sys.exit(0 if ok else 1)
"""


def make_suite(root: Path, n: int, sleep: float = 0.0, bad: tuple[int, ...] = ()) -> Path:
    """n tests, each graded in a container by a grader file next to the suite, over a
    template: both must travel to the nodes."""
    write(root / "g.py", GRADER)
    write(root / "tpl" / "a.txt", "from the template\n")
    lines = ["name: spread", "workspace: {template: ./tpl}", "tests:"]
    for i in range(n):
        lines += [
            f"  - id: t-{i:02d}",
            f"    output: {'bad' if i in bad else 'good'}",
            f"    metadata: {{sleep: {sleep}}}",
            "    assert: [{type: script, command: [python3, g.py]}]",
        ]
    return write(root / "suite.yaml", "\n".join(lines) + "\n")


def gradebox(*args: object, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradebox", *map(str, args)],
                          capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]  # fmt: skip


def start(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gradebox", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def results(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate, timeout: float = 120):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition never held")


def containers_left(cluster: LocalRay, engine) -> list[str]:  # type: ignore[no-untyped-def]
    """This cluster's containers still there, and no one else's (other runs share the
    machine): its nodes keep their OCI state in a folder of the cluster's own, and a Docker
    container is the cluster's when its owner is one of the cluster's processes."""
    pids = set(cluster.pids())
    found = [c["Names"][0] for c in engine.containers({LABEL_OWNER: None})
             if (parse_owner(c["Labels"][LABEL_OWNER]) or ("", 0))[1] in pids]  # fmt: skip
    for folder in (cluster.oci_state / "runtime", cluster.oci_state / "bundles"):
        if folder.is_dir():
            found += [p.name for p in folder.iterdir() if p.name.startswith("gradebox-")]
    return found


def scratch_left(cluster: LocalRay) -> list[str]:
    """Gradebox files in any node's $TMPDIR (the run's folder, per-test scratch)."""
    return [str(p) for p in cluster.base.glob("*-tmp/gradebox-*")]


@pytest.fixture(scope="module")
def cluster() -> LocalRay:  # type: ignore[misc]
    keys = {"JUDGE_KEY": "k-on-the-node"}  # set where `ray start` runs: keys never travel
    with LocalRay(workers=2, slots=2, worker_env={0: keys, 1: keys}) as c:
        yield c


class RayHarness:
    """The executor conformance checks' harness for ``RayExecutor``: this process is the
    driver (as `gradebox run --ray` is), the cluster's nodes run the jobs."""

    def __init__(self, cluster: LocalRay, engine) -> None:  # type: ignore[no-untyped-def]
        from gradebox.cluster import RayCluster
        from gradebox.sandbox import get_sandbox

        self.cluster, self.engine = cluster, engine
        self.ray = RayCluster(cluster.address)
        self.box = get_sandbox()
        self.images = self.box.images()

    def for_suite(self, suite_file: Path):  # type: ignore[no-untyped-def]
        from gradebox.cluster import start_suite
        from gradebox.suite import load_suite
        from gradebox.suite.plan import plan_suite

        suite = load_suite(suite_file)
        plan = plan_suite(suite, self.images, set())
        return start_suite(self.ray, suite, plan, sandbox="auto")

    def for_grader(self, grader_file: Path, images: tuple[str, ...]):  # type: ignore[no-untyped-def]
        from gradebox.cluster import start_grader

        ids = {ref: self.images.resolve(ref) for ref in images}
        return start_grader(self.ray, grader_file, ids, sandbox="auto")

    def image_id(self, name: str) -> str:
        return self.images.resolve(name)

    def left(self) -> list[str]:
        return containers_left(self.cluster, self.engine)

    def close(self) -> None:
        import ray

        self.box.close()
        ray.shutdown()


@pytest.fixture
def ray_driver(cluster, engine):  # type: ignore[no-untyped-def]
    harness = RayHarness(cluster, engine)
    yield harness
    harness.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_ray_executor(check, ray_driver, tmp_path):  # type: ignore[no-untyped-def]
    check(ray_driver, tmp_path)


def test_results_are_the_same_locally_and_on_the_cluster(ray_driver, tmp_path):
    """One suite run twice, on this machine's threads and on the cluster's nodes: every
    result is the same but for when and where it ran."""
    from gradebox.drivers.runner import RunOptions, run_suite
    from gradebox.suite import load_suite

    path = make_suite(tmp_path / "suite", 6, bad=(1, 4))
    suite = load_suite(path)
    local = run_suite(suite, ray_driver.box, ray_driver.images,
                      RunOptions(out_dir=tmp_path / "local"))  # fmt: skip
    with ray_driver.for_suite(path) as executor:
        remote = run_suite(suite, ray_driver.box, ray_driver.images,
                           RunOptions(out_dir=tmp_path / "ray"), executor=executor)  # fmt: skip
    a, b = results(tmp_path / "local"), results(tmp_path / "ray")
    assert len(a) == 6 and normalised(a) == normalised(b)
    assert {r["node"] for r in b} - {None} and all(r.get("node") is None for r in a)
    assert (local.passed, local.failed, local.errored) == (remote.passed, remote.failed,
                                                           remote.errored) == (4, 2, 0)  # fmt: skip


def test_fifty_tests_spread_over_both_workers_each_recorded_once(tmp_path, cluster, engine):
    suite = make_suite(tmp_path / "suite", 50, bad=(7, 31))
    out = tmp_path / "out"
    p = gradebox("run", suite, "--ray", cluster.address, "--out", out, "--junit",
                 tmp_path / "junit.xml", "--json")  # fmt: skip
    assert p.returncode == 1, p.stderr  # two fail on purpose; nothing errored
    assert "ray: 2 nodes (oci on 2), 4 slots" in p.stderr
    got = results(out)
    ids = Counter(r["id"] for r in got)
    assert len(got) == 50 and set(ids.values()) == {1}
    assert {r["id"] for r in got if r["status"] == "failed"} == {"t-07", "t-31"}
    assert all(r["status"] == "passed" for r in got if r["id"] not in ("t-07", "t-31"))
    nodes = Counter(r["node"] for r in got)
    assert len(nodes) == 2, nodes  # both workers ran tests
    assert all(r["attempts"] == 1 for r in got)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nodes"] == dict(nodes) and summary["total"] == 50
    # In flight: the cluster's 4 slots, and at least 64 (an autoscaler's demand).
    assert summary["passed"] == 48 and summary["workers"] == 64
    cases = ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    assert len(list(cases)) == 50
    assert containers_left(cluster, engine) == [] and scratch_left(cluster) == []


def test_filter_and_resume_on_the_cluster(tmp_path, cluster):
    suite = make_suite(tmp_path / "suite", 12)
    out = tmp_path / "out"
    p = gradebox("run", suite, "--ray", cluster.address, "--out", out, "--filter", "t-0*")
    assert p.returncode == 0, p.stderr
    assert sorted(r["id"] for r in results(out)) == [f"t-{i:02d}" for i in range(10)]
    p = gradebox("run", suite, "--ray", cluster.address, "--resume", out, "--json")
    assert p.returncode == 0, p.stderr
    got = results(out)
    assert sorted(r["id"] for r in got) == [f"t-{i:02d}" for i in range(12)]
    assert json.loads(p.stdout)["summary"]["reused"] == 10


def test_batch_and_trials_on_the_cluster(tmp_path, cluster):
    grader = write(tmp_path / "g" / "judge.py", (
        "import json, sys\nd = json.load(sys.stdin)\n"
        "print(json.dumps({'pass': 'yes' in d['output'], 'score': 1.0 if 'yes' in d['output'] "
        "else 0.0, 'reasoning': 'checked'}))\n"
    ))  # fmt: skip
    records = write(tmp_path / "records.jsonl", "".join(
        json.dumps({"id": f"p{i % 3}", "input": "q", "output": "yes" if i % 2 else "no"}) + "\n"
        for i in range(8)
    ))  # fmt: skip
    out = tmp_path / "graded.jsonl"
    p = gradebox("batch", records, "--grader", grader, "--out", out, "--ray", cluster.address)
    assert p.returncode == 1, p.stderr  # the "no" answers fail
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(g["line"] for g in graded) == list(range(1, 9))
    assert [g["pass"] for g in sorted(graded, key=lambda g: g["line"])] == [
        i % 2 == 1 for i in range(8)
    ]
    p = gradebox("trials", records, "--grader", grader, "-k", "2", "--target", "echo yes",
                 "--target-image", "shell", "--ray", cluster.address, "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["overall"]["pass_rate"] == 1.0 and report["overall"]["trials"] == 16


LLM_SUITE = """
name: judged
tests:
""" + "".join(
    f"  - {{id: q{i}, input: 'question {i}', output: 'answer {i}', assert: [Is correct]}}\n"
    for i in range(6)
)


def test_llm_graders_call_the_model_from_the_nodes_with_the_nodes_keys(tmp_path, cluster):
    from tests.fake_models import FakeModel

    suite = write(tmp_path / "suite" / "suite.yaml", LLM_SUITE)
    targets = tmp_path / "suite" / ".gradebox" / "targets.yaml"
    with FakeModel() as fake:
        # A target no grader uses needs no key on the nodes.
        write(targets, "default_grader: judge\ntargets:\n  - {name: judge, model: m, "
                       f"base_url: '{fake.base_url}', api_key_env: JUDGE_KEY}}\n"
                       "  - {name: spare, model: m, api_key_env: UNUSED_KEY}\n")  # fmt: skip
        out = tmp_path / "out"
        p = gradebox("run", suite, "--ray", cluster.address, "--out", out, "--no-cache")
        assert p.returncode == 0, p.stderr
        assert len(fake.requests) == 6
        assert {h.get("authorization") for h in fake.headers} == {"Bearer k-on-the-node"}
        summary = json.loads((out / "summary.json").read_text())
        assert summary["passed"] == 6 and summary["usage"]["calls"] == 6
        # A key no node has: every node is refused before any model is called.
        targets.write_text(targets.read_text().replace("JUDGE_KEY", "OTHER_KEY"))
        p = gradebox("run", suite, "--ray", cluster.address, "--out", tmp_path / "o2")
        assert p.returncode == 4
        lines = [line for line in p.stderr.splitlines() if "the model keys OTHER_KEY" in line]
        assert len(lines) == 2 and len(fake.requests) == 6, p.stderr


def test_a_test_larger_than_every_node_is_refused_before_anything_runs(tmp_path, cluster):
    """Each test asks Ray for its graders' limits: 3 cores fit no node of 2 (one line)."""
    suite = write(tmp_path / "suite" / "suite.yaml", (
        "name: big\nallow: [limits]\ntests:\n"
        "  - {id: small, output: x, assert: [{type: script, command: 'true'}]}\n"
        "  - {id: huge, output: x, assert: [{type: script, command: 'true', "
        "limits: {cpus: 3}}]}\n"
    ))  # fmt: skip
    p = gradebox("run", suite, "--ray", cluster.address, "--out", tmp_path / "out")
    assert p.returncode == 4, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        "gradebox: error: test huge asks for 3 CPU and 1 GiB (its containers' limits at "
        "once); the largest node offering `gradebox` has 2 CPU and 2 GiB; nothing ran"
    )
    assert results(tmp_path / "out") == []


def test_ctrl_c_cancels_remote_work_and_leaves_nothing_on_any_node(tmp_path, cluster, engine):
    suite = make_suite(tmp_path / "suite", 12, sleep=60)
    out = tmp_path / "out"
    proc = start("run", suite, "--ray", cluster.address, "--out", out)
    try:
        # Every slot busy: each node has graders sleeping in containers.
        wait_for(lambda: len(containers_left(cluster, engine)) >= 4, timeout=120)
    except AssertionError:
        proc.kill()
        raise
    t = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert time.monotonic() - t < 60
    assert results(out) == []  # nothing finished, nothing recorded
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True
    assert containers_left(cluster, engine) == []
    assert scratch_left(cluster) == []


def _owner_pid(name: str) -> int:
    return int(name.lstrip("/").split("-")[1])


def test_a_worker_process_killed_with_sigkill_leaves_nothing_of_its_own(tmp_path, cluster, engine):
    """A worker's watchdog (a new interpreter: a Ray worker runs threads) removes what the
    worker started the moment it dies; else its graders sleep on, past the timeout only the
    worker enforced, until the run's end sweeps them."""
    suite = make_suite(tmp_path / "suite", 4, sleep=60)
    proc = start("run", suite, "--ray", cluster.address, "--out", tmp_path / "out")
    try:
        wait_for(lambda: len(containers_left(cluster, engine)) >= 2, timeout=120)
        owners = {_owner_pid(n) for n in containers_left(cluster, engine)}
        for pid in owners:
            os.kill(pid, signal.SIGKILL)
        t = time.monotonic()
        wait_for(lambda: not {_owner_pid(n) for n in containers_left(cluster, engine)} & owners,
                 timeout=20)  # fmt: skip
        assert time.monotonic() - t < 10
        theirs = tuple(f"/gradebox-{pid}-" for pid in owners)
        wait_for(lambda: not [p for p in scratch_left(cluster) if any(t in p for t in theirs)],
                 timeout=10)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    assert containers_left(cluster, engine) == []


def test_a_node_whose_workers_die_under_its_tests_is_drained(tmp_path, cluster, engine):
    """Each task tells its node as it starts: a worker killed under a test there (as a crash
    or the OOM killer would) counts against that node, once per test; three in a row drain
    it. Each lost test runs again, and every test is recorded once."""
    from gradebox.cluster.driver import DRAIN_AFTER

    suite = make_suite(tmp_path / "suite", 10, sleep=2)
    out = tmp_path / "out"
    proc = start("run", suite, "--ray", cluster.address, "--out", out)
    killed: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while len(killed) < DRAIN_AFTER and proc.poll() is None and time.monotonic() < deadline:
            # w1's workers with a test's containers up: each is past its start.
            running = {_owner_pid(n) for n in containers_left(cluster, engine)}
            for pid in sorted(running & set(cluster.pids("w1")) - killed)[:1]:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert len(killed) == DRAIN_AFTER and proc.returncode == 0, err
    drained = [line for line in err.splitlines() if "is drained" in line]
    assert len(drained) == 1, err
    assert drained[0].endswith("3 jobs in a row failed there (last: WorkerCrashedError)")
    got = results(out)
    assert Counter(r["id"] for r in got) == Counter(f"t-{i:02d}" for i in range(10))
    assert all(r["status"] == "passed" for r in got)
    assert sum(r["attempts"] - 1 for r in got) == err.count("its node was lost") == DRAIN_AFTER
    assert containers_left(cluster, engine) == [] and scratch_left(cluster) == []


def test_a_worker_killed_mid_run_loses_and_doubles_nothing(tmp_path, engine):
    suite = make_suite(tmp_path / "suite", 16, sleep=2, bad=(3,))
    out = tmp_path / "out"
    with LocalRay(workers=2, slots=2) as c:
        proc = start("run", suite, "--ray", c.address, "--out", out)
        try:
            wait_for(lambda: len(results(out)) >= 2)
            # w1 runs tests right now (every slot is busy): lose it as a machine is lost.
            assert c.kill("w1") > 0
            _, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
        assert proc.returncode == 1, err  # t-03 fails on purpose; nothing errored
        got = results(out)
        assert Counter(r["id"] for r in got) == Counter(f"t-{i:02d}" for i in range(16))
        again = [r for r in got if r["attempts"] == 2]
        assert again, "the killed node had tests in flight: they were run again"
        survivor = {r["node"] for r in again}
        assert len(survivor) == 1 and all(r["status"] != "error" for r in got)
        assert "sending it again" in err
        assert containers_left(c, engine) == []
        # The lost machine's disk is its own; every live node is clean.
        assert [p for p in scratch_left(c) if "/w1-tmp/" not in p] == []


def test_a_node_joining_late_is_checked_and_a_run_left_without_nodes_stops(tmp_path, engine):
    with LocalRay(workers=1, slots=2) as c:
        # A node that joins after the preflight, without a runtime: it meets the preflight at
        # its first test, is set aside with one line, and its tests run on the good node.
        suite = make_suite(tmp_path / "a", 12, sleep=3)  # ~18 s of work: the node joins in ~10
        out = tmp_path / "out-a"
        proc = start("run", suite, "--ray", c.address, "--out", out, "--sandbox", "oci",
                     "--workers", "4")  # fmt: skip
        try:
            wait_for(lambda: len(results(out)) >= 1)
            c.add_worker(1, {"GRADEBOX_RUNTIME": "/nonexistent/runc"}, slots=2)
            _, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        got = results(out)
        assert Counter(r["id"] for r in got) == Counter(f"t-{i:02d}" for i in range(12))
        assert all(r["status"] == "passed" and r["attempts"] == 1 for r in got)
        assert len({r["node"] for r in got}) == 1  # the good node's
        aside = [line for line in err.splitlines() if "is set aside" in line]
        assert len(aside) == 1 and "no OCI runtime" in aside[0], err
        assert all(r["node"].split()[0] not in aside[0] for r in got)
        c.kill("w1")
        # Every node lost: the run stops (exit 4) and keeps what finished, once each.
        suite = make_suite(tmp_path / "b", 8, sleep=3)
        out = tmp_path / "out-b"
        proc = start("run", suite, "--ray", c.address, "--out", out, "--max-in-flight", "2",
                     "--scale-up-timeout", "3s")  # fmt: skip
        try:
            wait_for(lambda: len(results(out)) >= 1)
            c.kill("w0")
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 4, err
        assert "waiting up to 3 s for a node offering gradebox" in err
        last = err.strip().splitlines()[-1]
        assert "no usable node offers `gradebox` any more (waited 3 s" in last, err
        kept = Counter(r["id"] for r in results(out))
        assert kept and set(kept.values()) == {1}
        summary = json.loads((out / "summary.json").read_text())
        assert summary["not_run"] == 8 - len(kept)
    # No node was left to sweep: the lost machines' own gc (the harness's, as the cluster
    # stopped) removed theirs.
    assert c.left_at_stop == []


@pytest.fixture
def other_engine(tmp_path):  # type: ignore[no-untyped-def]
    """A second, real Docker engine, as another machine has: its own store, in its own network
    namespace (so it cannot touch this host's bridge). Its `gradebox/python` is other bytes."""
    base = Path(f"/tmp/gbx-d2-{os.getpid()}")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    (base / "daemon.json").write_text("{}")  # not the host's daemon.json: a store of its own
    sock = base / "docker.sock"
    log = open(base / "log", "w")  # noqa: SIM115
    daemon = subprocess.Popen(
        ["unshare", "--net", "dockerd", "--config-file", str(base / "daemon.json"),
         "--data-root", str(base / "data"), "--exec-root", str(base / "exec"),
         "--pidfile", str(base / "pid"), "-H", f"unix://{sock}", "--bridge=none",
         "--iptables=false", "--ip6tables=false", "--storage-driver=vfs"],
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        env = {**os.environ, "DOCKER_HOST": f"unix://{sock}"}
        wait_for(lambda: subprocess.run(["docker", "info"], env=env, capture_output=True,
                                        check=False).returncode == 0, timeout=60)  # fmt: skip
        write(base / "img" / "marker", "not the locked image\n")
        tar = base / "img.tar"
        subprocess.run(["tar", "-C", str(base / "img"), "-cf", str(tar), "."], check=True)
        subprocess.run(["docker", "import", str(tar), qualified("python")], env=env,
                       check=True, capture_output=True)  # fmt: skip
        yield f"unix://{sock}"
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def test_nodes_with_other_images_no_engine_or_no_runtime_are_set_aside_and_the_run_goes_on(
    tmp_path, engine, other_engine
):
    suite = make_suite(tmp_path / "suite", 4)
    out = tmp_path / "out"
    env = {
        1: {"DOCKER_HOST": other_engine},
        2: {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
        3: {"GRADEBOX_RUNTIME": "/nonexistent/runc"},
    }
    with LocalRay(workers=4, slots=1, worker_env=env) as c:
        p = gradebox("run", suite, "--ray", c.address, "--out", out, "--sandbox", "oci")
        assert p.returncode == 0, p.stderr
        lines = [line for line in p.stderr.splitlines() if "is set aside" in line]
        assert len(lines) == 3, p.stderr  # one line per bad node; the good node is not named
        image = next(line for line in lines if "image python" in line)
        assert "the driver's is" in image and "`gradebox images load ARCHIVE` on this node" in image
        assert any("cannot reach the Docker engine" in line for line in lines)
        assert any("no OCI runtime '/nonexistent/runc'" in line for line in lines)
        assert "ray: 1 nodes (oci on 1), 1 slots, 3 set aside" in p.stderr
        got = results(out)
        assert sorted(r["id"] for r in got) == [f"t-{i:02d}" for i in range(4)]
        assert all(r["status"] == "passed" for r in got)
        # No test ran on a node set aside.
        nodes = {r["node"].split()[0] for r in got}
        assert len(nodes) == 1 and not any(n in line for n in nodes for line in lines)
        assert containers_left(c, engine) == [] and scratch_left(c) == []


def test_no_cluster_at_the_address_is_one_line_at_once(tmp_path):
    suite = make_suite(tmp_path / "suite", 1)
    t = time.monotonic()
    p = gradebox("run", suite, "--ray", "127.0.0.1:1", "--out", tmp_path / "out")
    assert p.returncode == 4 and time.monotonic() - t < 30
    assert (
        p.stderr.strip()
        .splitlines()[-1]
        .startswith("gradebox: error: cannot reach a Ray cluster at '127.0.0.1:1'")
    )
