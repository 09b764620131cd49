"""gradebox benchmarks: `make bench`. Everything measured in one run, ratios side by side.

grade-cold      one trivial program grader, N times, a fresh container each (create, start,
                run, remove) vs the same script as a bare host subprocess; medians.
latency-warm    200 sequential trivial graders through containers started ahead of their input
                (prepare while the previous one runs, release when the input exists): the time
                from input to result, vs bare; and the wall time per grader of the whole stream.
throughput      trivial graders through `batch` (containers prepared ahead of free slots):
                graders per second at 1, 2, 4 and 8 workers (100 each), then 500 at the best.
suite           a 200-test suite, one trivial script grader per test, Docker backend vs the host
                backend (bare subprocesses through the same runner), 1 and 4 workers.
functional      a pytest grader over a 30-test project, 20 runs: warm container vs bare pytest.
peer            epicbox 1.1.0 (own venv) running the same trivial grader on the same image.
memory          runner peak RSS on a 1,000-test suite vs a 100-test one (workspaces, diffs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gradebox import Payload, get_sandbox, load_grader, run_grader
from gradebox.batch import Record, grade_records
from gradebox.graders.custom import grader_for_file
from gradebox.graders.run import prepare_grader
from gradebox.images import ImageResolver
from gradebox.runner import RunOptions, run_suite
from gradebox.suite import load_suite

HERE = Path(__file__).resolve().parent
say = Console(stderr=True).print

PROGRAM = """import json, os
payload = json.load(open(os.environ["EVALUATE_GRADER_INPUT"]))
print(json.dumps({"passed": "42" in payload["output"], "score": 1.0}))
"""
SCRIPT = """import json, sys
d = json.load(sys.stdin)
print(json.dumps({"pass": "42" in (d.get("output") or ""), "score": 1.0}))
"""


def ms(seconds: float) -> float:
    return seconds * 1000


def _program(root: Path) -> tuple[Path, Path]:
    (root / "ws").mkdir(exist_ok=True)
    (root / "trivial.py").write_text(PROGRAM)
    (root / "grader.yaml").write_text("type: program\nprogram: python3\nargs: [trivial.py]\n")
    return root / "grader.yaml", root / "ws"


def bare_times(root: Path, n: int) -> list[float]:
    payload = Payload(output="The answer is 42.")
    (root / "input.json").write_bytes(payload.to_wire())
    env = {
        **os.environ,
        "EVALUATE_GRADER_INPUT": str(root / "input.json"),
        "EVALUATE_WORKSPACE": str(root / "ws"),
    }
    times = []
    for _ in range(n):
        t = time.perf_counter()
        out = subprocess.run(
            ["python3", str(root / "trivial.py")],
            env=env,
            capture_output=True,
            cwd=root / "ws",
            check=True,
        )
        times.append(time.perf_counter() - t)
        assert json.loads(out.stdout)["passed"]
    return times


def bench_cold(root: Path, n: int) -> dict[str, float]:
    grader_file, ws = _program(root)
    grader = load_grader(grader_file)
    payload = Payload(output="The answer is 42.")
    bare = statistics.median(bare_times(root, n))
    times = []
    with get_sandbox() as box:
        run_grader(grader, payload, ws, box)
        for _ in range(n):
            t = time.perf_counter()
            assert run_grader(grader, payload, ws, box).passed
            times.append(time.perf_counter() - t)
    boxed = statistics.median(times)
    return {"bare_ms": ms(bare), "gradebox_ms": ms(boxed), "added_ms": ms(boxed - bare)}


def bench_warm(root: Path, n: int) -> dict[str, float]:
    grader_file, ws = _program(root)
    grader = load_grader(grader_file)
    payload = Payload(output="The answer is 42.")
    bare = statistics.median(bare_times(root, n))
    latency = []
    with get_sandbox() as box:
        images = ImageResolver(box.engine)
        nxt = prepare_grader(grader, ws, box, images=images)
        t0 = time.perf_counter()
        for i in range(n):
            ready, nxt = (
                nxt,
                (prepare_grader(grader, ws, box, images=images) if i + 1 < n else None),
            )
            t = time.perf_counter()
            assert ready.run(payload).passed
            latency.append(time.perf_counter() - t)
        wall = (time.perf_counter() - t0) / n
        box.drain()
    warm = statistics.median(latency)
    return {
        "bare_ms": ms(bare),
        "release_ms": ms(warm),
        "added_ms": ms(warm - bare),
        "wall_per_grader_ms": ms(wall),
    }


def bench_throughput(root: Path, n: int, workers: int) -> float:
    (root / "s.py").write_text(SCRIPT)
    grader = grader_for_file(root / "s.py")
    records = [(i, Record(id=str(i), output="42")) for i in range(1, n + 1)]
    (root / "ws").mkdir(exist_ok=True)
    with get_sandbox() as box:
        images = ImageResolver(box.engine)
        images.resolve("python")
        t = time.perf_counter()
        graded = grade_records(
            records, grader, box, images, out=None, workspace=root / "ws", workers=workers
        )
        rate = n / (time.perf_counter() - t)
    assert all(g.pass_ for g in graded)
    return rate


class _HostImages:
    def resolve(self, ref: object, source: object = None) -> str:
        return "host"


def bench_suite(root: Path, n: int, workers: int, backend: str) -> float:
    (root / "trivial.py").write_text(SCRIPT)
    tests = "".join(
        f"  - id: t{i:04d}\n    output: answer 42\n    assert:\n"
        f"      - {{type: script, command: [python3, trivial.py]}}\n"
        for i in range(n)
    )
    (root / "suite.yaml").write_text(f"name: bench\ntests:\n{tests}")
    suite = load_suite(root / "suite.yaml")
    with get_sandbox(backend) as box:
        images = _HostImages() if backend == "host" else ImageResolver(box.engine)
        t = time.perf_counter()
        summary = run_suite(
            suite, box, images, RunOptions(root / f"out-{backend}-{workers}", workers=workers)
        )
        elapsed = time.perf_counter() - t
    assert summary.passed == n, summary
    return n / elapsed


def bench_functional(root: Path, runs: int) -> dict[str, float]:
    project = root / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (project / "test_calc.py").write_text(
        "from calc import add\n\n"
        + "".join(
            f"def test_add_{i}():\n    assert add({i}, {i}) == {2 * i}\n\n" for i in range(30)
        )
    )
    argv = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    bare = []
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run(
            argv,
            cwd=project,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        bare.append(time.perf_counter() - t)
        assert "30 passed" in out.stdout, out.stdout
    (root / "pytest.yaml").write_text(f"type: script\ncommand: {json.dumps(argv)}\n")
    grader = load_grader(root / "pytest.yaml")
    warm = []
    with get_sandbox() as box:
        images = ImageResolver(box.engine)
        for _ in range(runs):
            ready = prepare_grader(grader, project, box, images=images)
            time.sleep(0.3)  # the agent still working; the container waits
            t = time.perf_counter()
            result = ready.run(Payload(output="done"))
            warm.append(time.perf_counter() - t)
            assert result.passed and "30 passed" in result.evidence, result
    b, w = statistics.median(bare), statistics.median(warm)
    return {"bare_ms": ms(b), "gradebox_ms": ms(w), "ratio": w / b}


def bench_peer(
    root: Path, n: int, gradebox_cold_ms: float, gradebox_warm_ms: float
) -> dict[str, float] | None:
    venv = HERE / ".venv-epicbox" / "bin" / "python"
    if not venv.exists():
        say("peer: bench/.venv-epicbox missing (make bench creates it); skipped")
        return None
    with get_sandbox() as box:
        image = box.resolve_image("gradebox/python:latest")
    out = subprocess.run(
        [str(venv), str(HERE / "epicbox_peer.py"), image, str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    epic = json.loads(out.stdout.strip().splitlines()[-1])["median_ms"]
    return {
        "epicbox_ms": epic,
        "cold_ratio": epic / gradebox_cold_ms,
        "warm_ratio": epic / gradebox_warm_ms,
    }


MEMORY_CHILD = """
import resource, sys, tempfile, pathlib
from gradebox.runner import RunOptions, run_suite
from gradebox.suite import load_suite
from gradebox.sandbox import get_sandbox
from gradebox.images import ImageResolver
n = int(sys.argv[1]); holder = tempfile.TemporaryDirectory(); root = pathlib.Path(holder.name)
(root / "tpl").mkdir(); (root / "tpl" / "f.txt").write_text("x\\n" * 100)
tests = "".join(f"  - id: t{i:05d}\\n    output: answer {i}\\n    assert:\\n"
                f"      - {{type: contains, value: answer}}\\n      - {{type: is-json}}\\n"
                for i in range(n))
(root / "s.yaml").write_text(f"workspace:\\n  template: ./tpl\\ntests:\\n{tests}")
with get_sandbox() as box:
    run_suite(load_suite(root / "s.yaml"), box, ImageResolver(box.engine),
              RunOptions(root / "out", workers=4))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_memory() -> dict[str, float]:
    rss = {}
    for n in (100, 1000):
        out = subprocess.run(
            [sys.executable, "-c", MEMORY_CHILD, str(n)], capture_output=True, text=True, check=True
        )
        rss[n] = int(out.stdout.strip().splitlines()[-1]) / 1024
    return {"rss_100_mib": rss[100], "rss_1000_mib": rss[1000], "growth": rss[1000] / rss[100] - 1}


def main() -> None:
    # Bare subprocesses find python3 on PATH; make it this interpreter, not a slow shim
    # (pyenv's adds ~90 ms per start), so the host side is the fastest honest baseline.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts (a smoke run)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    q = args.quick
    r: dict[str, object] = {}

    scratch = tempfile.TemporaryDirectory(prefix="gradebox-bench-")  # removed at exit
    counter = iter(range(1_000_000))

    def tmp() -> Path:
        path = Path(scratch.name) / str(next(counter))
        path.mkdir()
        return path

    say("grade-cold…")
    r["cold"] = cold = bench_cold(tmp(), 10 if q else 50)
    say("latency-warm…")
    r["warm"] = warm = bench_warm(tmp(), 20 if q else 200)
    say("throughput sweep…")
    sweep = {w: bench_throughput(tmp(), 20 if q else 100, w) for w in (1, 2, 4, 8)}
    best = max(sweep, key=lambda w: sweep[w])
    r["throughput"] = {
        "sweep": sweep,
        "best_workers": best,
        "graders_per_s": bench_throughput(tmp(), 50 if q else 500, best),
    }
    say("suite…")
    r["suite"] = {
        f"{b}_w{w}": bench_suite(tmp(), 40 if q else 200, w, b)
        for w in (1, 4)
        for b in ("host", "docker")
    }
    say("functional…")
    r["functional"] = bench_functional(tmp(), 5 if q else 20)
    say("peer…")
    r["peer"] = bench_peer(tmp(), 10 if q else 50, cold["gradebox_ms"], warm["release_ms"])
    say("memory…")
    r["memory"] = bench_memory()

    if args.json:
        print(json.dumps(r, indent=2))
        return
    table = Table(title="gradebox bench (one run, this machine)")
    for col in ("benchmark", "measure", "baseline", "gradebox", "result", "target"):
        table.add_column(col)
    table.add_row(
        "grade-cold",
        "median per grader",
        f"{cold['bare_ms']:.0f} ms bare",
        f"{cold['gradebox_ms']:.0f} ms",
        f"+{cold['added_ms']:.0f} ms",
        "-",
    )
    table.add_row(
        "latency-warm",
        "input -> result, median",
        f"{warm['bare_ms']:.0f} ms bare",
        f"{warm['release_ms']:.0f} ms",
        f"+{warm['added_ms']:.0f} ms",
        "<= +50 ms",
    )
    table.add_row(
        "", "wall per grader, sequential", "", f"{warm['wall_per_grader_ms']:.0f} ms", "", ""
    )
    tp = r["throughput"]
    sweep_text = ", ".join(f"{w}w {v:.1f}/s" for w, v in tp["sweep"].items())  # type: ignore[index]
    table.add_row(
        "throughput",
        f"graders/s at {tp['best_workers']} workers",  # type: ignore[index]
        sweep_text,
        f"{tp['graders_per_s']:.1f}/s",
        "",
        ">= 20/s",
    )  # type: ignore[index]
    su = r["suite"]
    for w in (1, 4):
        h, d = su[f"host_w{w}"], su[f"docker_w{w}"]  # type: ignore[index]
        table.add_row(
            f"suite ({w} workers)", "tests/s", f"{h:.1f}/s host", f"{d:.1f}/s", f"{h / d:.1f}x", "-"
        )
    fn = r["functional"]
    table.add_row(
        "functional",
        "pytest, 30 tests, median",
        f"{fn['bare_ms']:.0f} ms bare",  # type: ignore[index]
        f"{fn['gradebox_ms']:.0f} ms",
        f"{fn['ratio']:.2f}x",
        "<= 1.10x",
    )  # type: ignore[index]
    if r["peer"]:
        pe = r["peer"]
        table.add_row(
            "peer",
            "epicbox / gradebox",
            f"{pe['epicbox_ms']:.0f} ms epicbox",  # type: ignore[index]
            f"{cold['gradebox_ms']:.0f} cold / {warm['release_ms']:.0f} warm ms",
            f"{pe['cold_ratio']:.2f}x / {pe['warm_ratio']:.2f}x",
            ">= 2x",
        )  # type: ignore[index]
    me = r["memory"]
    table.add_row(
        "memory",
        "peak RSS 100 -> 1000 tests",
        f"{me['rss_100_mib']:.0f} MiB",  # type: ignore[index]
        f"{me['rss_1000_mib']:.0f} MiB",
        f"{me['growth']:+.0%}",
        "within 20%",
    )  # type: ignore[index]
    Console().print(table)
    Console().print(
        f"Best worker count here: {tp['best_workers']} "  # type: ignore[index]
        f"(export GRADEBOX_WORKERS={tp['best_workers']} to make it the default)."
    )  # type: ignore[index]


if __name__ == "__main__":
    main()
