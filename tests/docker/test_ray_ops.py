"""`--ray` on an autoscaling cluster that starts with no worker node (Ray's fake multi-node
provider, ``min_workers: 0``): the tests' pending tasks scale it up; and the same cluster driven
through Ray's job API (`ray job submit`), each task named after its test. One cluster for the
module: starting one costs tens of seconds on this machine. Never skipped."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.docker.test_ray import containers_left, gradebox, make_suite, results, scratch_left
from tests.ray_cluster import RAY, AutoscalingRay

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def autoscaling():  # type: ignore[no-untyped-def]
    with AutoscalingRay(slots=2, max_workers=2, dashboard=True) as c:
        yield c


def test_a_cluster_of_zero_workers_is_scaled_up_by_the_tests_and_runs_each_once(
    tmp_path, autoscaling, engine
):
    assert autoscaling.alive_nodes(gradebox_only=True) == 0  # min_workers: 0, nothing asked yet
    suite = make_suite(tmp_path / "suite", 10, sleep=1, bad=(4,))
    out = tmp_path / "out"
    p = gradebox("run", suite, "--ray", autoscaling.address, "--out", out,
                 "--scale-up-timeout", "240s", "--json")  # fmt: skip
    assert p.returncode == 1, p.stderr  # t-04 fails on purpose; nothing errored
    assert "ray: no node offers `gradebox` yet: the tests' demand may start one" in p.stderr
    assert "waiting up to 240 s for a node offering gradebox" in p.stderr
    got = results(out)
    assert Counter(r["id"] for r in got) == Counter(f"t-{i:02d}" for i in range(10))
    assert {r["id"] for r in got if r["status"] != "passed"} == {"t-04"}
    assert all(r["node"] and r["attempts"] == 1 for r in got)
    assert autoscaling.alive_nodes(gradebox_only=True) >= 1  # what the demand started
    assert containers_left(autoscaling, engine) == [] and scratch_left(autoscaling) == []


def test_ray_job_submit_runs_gradebox_on_the_cluster_with_results_on_shared_storage(
    tmp_path, autoscaling
):
    """`ray job submit -- gradebox run ... --ray auto --out SHARED`: the entrypoint runs on
    the head (RAY_ADDRESS set: `auto` finds the cluster); the results land in the shared
    folder (this machine's filesystem stands for it); each task bears its test's id."""
    suite = make_suite(tmp_path / "suite", 4)
    shared = tmp_path / "shared" / "run-1"
    entry = [sys.executable, "-m", "gradebox", "run", str(suite), "--ray", "auto", "--out",
             str(shared), "--scale-up-timeout", "240s"]  # fmt: skip
    # The head's job agent may still be starting (the dashboard answers first): Ray says
    # "No available agent ... try again later" and nothing was submitted, so try again.
    deadline = time.monotonic() + 120
    while True:
        job = subprocess.run(
            [RAY, "job", "submit", "--address", autoscaling.dashboard_url, "--", *entry],
            capture_output=True, text=True, timeout=600, check=False,
            env=autoscaling._env("submit", {}),
        )  # fmt: skip
        if "No available agent" not in job.stderr or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "succeeded" in job.stdout, job.stdout
    got = results(shared)
    assert sorted(r["id"] for r in got) == [f"t-{i:02d}" for i in range(4)]
    assert all(r["status"] == "passed" for r in got)
    assert json.loads((shared / "summary.json").read_text())["passed"] == 4
    # Ray's state API (the dashboard's) lists the run's tasks by their tests' ids.
    code = (
        "import sys; from ray.util.state import list_tasks; "
        "print('\\n'.join(sorted({t.name for t in list_tasks(address=sys.argv[1], "
        "filters=[('func_or_class_name', '=', 'run_item')], limit=1000)})))"
    )
    names: set[str] = set()
    deadline = time.monotonic() + 60  # the state API catches up with finished tasks
    while time.monotonic() < deadline and not {f"t-{i:02d}" for i in range(4)} <= names:
        proc = subprocess.run([sys.executable, "-c", code, autoscaling.dashboard_url],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=autoscaling._env("probe", {}))  # fmt: skip
        names = set(proc.stdout.split())
        time.sleep(2)
    assert {f"t-{i:02d}" for i in range(4)} <= names, proc.stderr
