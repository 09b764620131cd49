"""Issue 43's scaling check: N nodes of a local Ray cluster against one node's rate, N = 1, 2,
4, 8 (the goal: at least 0.8 N times one node's tests/s).

The graders sleep (`sleep S` on the host backend: no container, next to no CPU), so what is
measured is what `--ray` adds and whether it scales (the driver's executor, Ray's dispatch,
a node's `jobs.run_job`, recording), not this machine's two cores, which eight nodes' worth
of real graders would saturate at once. Each node is a `ray start` worker of one local
cluster (tests/ray_cluster.py: its own processes, temp dir and $TMPDIR, on loopback) offering
the same slots; nodes are added between the rounds (1, then 2, 4, 8), and each round runs
`rounds` tests per slot, so a slot runs as many graders whatever N is. The driver keeps every
slot busy (`--workers` defaults to the cluster's slots).

Two rates per round. *Run*: tests / the run's own duration (`summary.json`: from the first
test sent to the last recorded; the driver's start and the preflight left out, as they are
paid once). It includes each node's worker processes starting (Ray starts them per run: each
imports Ray and gradebox, ~1-2 s of CPU), which on real machines each node pays on its own
cores, in parallel, but here every node pays on the same two. *Steady*: once the first
N x slots tests have finished (every slot has run one, so every worker process is up), the
tests finished after that over the time they took.

    python bench/ray_scaling.py [--sleep 5] [--slots 2] [--rounds 6] [--json]
    python bench/run.py --only scaling
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODES = (1, 2, 4, 8)


def _suite(path: Path, tests: int, sleep: float) -> Path:
    grader = f"[{{type: script, command: [sleep, '{sleep:g}']}}]"
    body = "".join(f"  - id: t{i:04d}\n    output: x\n    assert: {grader}\n" for i in range(tests))
    path.write_text(f"name: scaling\ntests:\n{body}")
    return path


def _run(suite: Path, out: Path, address: str) -> tuple[dict, list[float]]:
    cmd = [sys.executable, "-m", "gradebox", "run", str(suite), "--out", str(out),
           "--sandbox", "host", "--ray", address]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    if summary["passed"] != summary["total"]:
        raise RuntimeError(f"{out}: {summary['total'] - summary['passed']} tests did not pass")
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return summary, sorted(datetime.fromisoformat(r["finished_at"]).timestamp() for r in results)


def _steady(finished: list[float], warm: int) -> float:
    """Tests/s after the first ``warm`` tests finished: the rate with every worker up."""
    return (len(finished) - warm) / (finished[-1] - finished[warm - 1])


class CpuMeter:
    """CPU seconds the cluster's processes used while a round ran: each process's user and
    system time sampled every 0.2 s (a worker of a run ends with it, so its last sample
    stands for it), less what each had when the round began."""

    def __init__(self, cluster: object) -> None:
        self.cluster, self.seen, self.start = cluster, {}, {}
        self.stop = threading.Event()
        self.start = self._sample()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _sample(self) -> dict[int, float]:
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for pid in self.cluster.pids():  # type: ignore[attr-defined]
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
        return out

    def _watch(self) -> None:
        while not self.stop.wait(0.2):
            self.seen.update(self._sample())

    def used(self) -> float:
        self.stop.set()
        self.thread.join()
        return sum(t - self.start.get(pid, 0.0) for pid, t in self.seen.items())


def bench_scaling(root: Path, sleep: float, slots: int, rounds: int) -> dict[str, object]:
    """Tests/s on 1, 2, 4, 8 nodes, and each against N times one node's."""
    sys.path.insert(0, str(ROOT))
    from tests.ray_cluster import LocalRay

    rows: list[dict[str, float]] = []
    load: list[float] = []
    with LocalRay(workers=1, slots=slots) as cluster:
        for n in NODES:
            for i in range(cluster.workers, n):  # grow the one cluster to n worker nodes
                cluster.add_worker(i)
            cluster.workers = n
            tests = n * slots * rounds
            suite = _suite(root / f"suite-{n}.yaml", tests, sleep)
            meter, before = CpuMeter(cluster), resource.getrusage(resource.RUSAGE_CHILDREN)
            summary, finished = _run(suite, root / f"out-{n}", cluster.address)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            driver = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            nodes = meter.used()
            load.append(os.getloadavg()[0])
            rows.append({"nodes": n, "slots": n * slots, "tests": tests,
                         "duration_s": summary["duration_s"],
                         "tests_per_s": tests / summary["duration_s"],
                         "steady_per_s": _steady(finished, n * slots),
                         "driver_cpu_ms_per_test": 1000 * driver / tests,
                         "cluster_cpu_ms_per_test": 1000 * nodes / tests})  # fmt: skip
    for key in ("tests_per_s", "steady_per_s"):
        one = rows[0][key]
        for row in rows:
            row[f"{key}_of_ideal"] = row[key] / one / row["nodes"]
    ideal = slots / sleep  # one node's ceiling: every slot always sleeping
    return {"sleep_s": sleep, "slots_per_node": slots, "rounds": rounds,
            "one_node_ceiling_per_s": ideal, "rows": rows,
            "load_average": max(load), "cpus": os.cpu_count()}  # fmt: skip


def table(result: dict[str, object]) -> str:
    """The Markdown table docs/cluster.md quotes."""
    lines = [
        "| nodes N | slots | tests | run | run tests/s | of N x 1 node | steady tests/s "
        "| of N x 1 node | CPU ms/test: driver, cluster |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:  # type: ignore[attr-defined]
        lines.append(
            f"| {r['nodes']} | {r['slots']} | {r['tests']} | {r['duration_s']:.1f} s "
            f"| {r['tests_per_s']:.2f} | {r['tests_per_s_of_ideal']:.0%} "
            f"| {r['steady_per_s']:.2f} | {r['steady_per_s_of_ideal']:.0%} "
            f"| {r['driver_cpu_ms_per_test']:.0f}, {r['cluster_cpu_ms_per_test']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each grader sleeps")
    parser.add_argument("--slots", type=int, default=2, help="gradebox slots per node")
    parser.add_argument("--rounds", type=int, default=6, help="tests per slot in each round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gradebox-scaling-") as where:
        result = bench_scaling(Path(where), args.sleep, args.slots, args.rounds)
    result["bench_s"] = time.monotonic() - started
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(table(result))
    print(
        f"\ngraders sleep {args.sleep:g} s; {args.slots} slots per node (one node's ceiling "
        f"{result['one_node_ceiling_per_s']:.2f} tests/s); {result['cpus']} CPUs, load "
        f"average up to {result['load_average']:.1f}; {result['bench_s']:.0f} s in all"
    )


if __name__ == "__main__":
    main()
