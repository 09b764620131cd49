"""gradebox benchmarks: `make bench`. Ratios side by side, measured in one run.

grade-latency: the same trivial program grader run N times through gradebox (a fresh
hardened container each) and as a bare host subprocess; median time per grader of each.

suite-throughput: a 200-test suite, one trivial script grader per test, run by the same
runner with the Docker backend and with the host backend (bare subprocesses, no isolation),
at 1 and 4 workers; tests per second of each and the ratio.
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

TRIVIAL = """import json, os
payload = json.load(open(os.environ["EVALUATE_GRADER_INPUT"]))
print(json.dumps({"passed": "42" in payload["output"], "score": 1.0}))
"""


def _fixture(root: Path) -> tuple[Path, Path]:
    (root / "ws").mkdir()
    (root / "trivial.py").write_text(TRIVIAL)
    (root / "grader.yaml").write_text("type: program\nprogram: python3\nargs: [trivial.py]\n")
    return root / "grader.yaml", root / "ws"


def bench_grade(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        grader_file, ws = _fixture(Path(tmp))
        grader = load_grader(grader_file)
        payload = Payload(input="q", output="The answer is 42.")
        input_file = Path(tmp) / "input.json"
        input_file.write_bytes(payload.to_wire())

        bare = []
        env = {
            **os.environ,
            "EVALUATE_GRADER_INPUT": str(input_file),
            "EVALUATE_WORKSPACE": str(ws),
        }
        for _ in range(n):
            t = time.perf_counter()
            out = subprocess.run(
                [sys.executable, str(Path(tmp) / "trivial.py")],
                env=env,
                capture_output=True,
                cwd=ws,
                check=True,
            )
            bare.append(time.perf_counter() - t)
            assert json.loads(out.stdout)["passed"]

        boxed = []
        with get_sandbox() as box:
            run_grader(grader, payload, ws, box)  # warm the image cache
            for _ in range(n):
                t = time.perf_counter()
                result = run_grader(grader, payload, ws, box)
                boxed.append(time.perf_counter() - t)
                assert result.passed, result
    b, g = statistics.median(bare) * 1000, statistics.median(boxed) * 1000
    return {"bare_ms": b, "gradebox_ms": g, "ratio": g / b, "added_ms": g - b}


class _HostImages:
    """The host backend has no images."""

    def resolve(self, ref: object, source: object = None) -> str:
        return "host"


def bench_suite(n: int, workers: int, backend: str) -> float:
    from gradebox.images import ImageResolver
    from gradebox.runner import RunOptions, run_suite
    from gradebox.suite import load_suite

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "trivial.py").write_text(
            "import json, sys\nd = json.load(sys.stdin)\n"
            "print(json.dumps({'pass': 'answer' in d['output'], 'score': 1.0}))\n"
        )
        tests = "".join(
            f"  - id: t{i:04d}\n    output: answer {i}\n    assert:\n"
            f"      - {{type: script, command: [python3, trivial.py]}}\n"
            for i in range(n)
        )
        (root / "suite.yaml").write_text(f"name: bench\ntests:\n{tests}")
        suite = load_suite(root / "suite.yaml")
        with get_sandbox(backend) as box:
            images = _HostImages() if backend == "host" else ImageResolver(box.engine)
            t = time.perf_counter()
            summary = run_suite(suite, box, images, RunOptions(root / "out", workers=workers))
            elapsed = time.perf_counter() - t
        assert summary.passed == n, summary
    return n / elapsed


def main() -> None:
    # Bare subprocesses find python3 on PATH; make it this interpreter, not a slow shim
    # (pyenv's adds ~90 ms per start), so the host side is the fastest honest baseline.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=50, help="graders per side")
    parser.add_argument("--tests", type=int, default=200, help="tests in the suite benchmark")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    console = Console(stderr=True)
    console.print(f"grade-latency: {args.n} trivial graders each way…")
    grade = bench_grade(args.n)
    suite: dict[str, float] = {}
    for workers in (1, 4):
        for backend in ("host", "docker"):
            console.print(f"suite-throughput: {args.tests} tests, {backend}, {workers} workers…")
            suite[f"{backend}_w{workers}"] = bench_suite(args.tests, workers, backend)
    if args.json:
        print(json.dumps({"grade_latency": grade, "suite_tests_per_s": suite}, indent=2))
        return
    table = Table(title="gradebox bench")
    for col in ("benchmark", "bare subprocess", "gradebox", "ratio", "added per grader"):
        table.add_column(col, justify="right")
    table.add_row(
        f"grade-latency (n={args.n}, median)",
        f"{grade['bare_ms']:.1f} ms",
        f"{grade['gradebox_ms']:.1f} ms",
        f"{grade['ratio']:.1f}x",
        f"{grade['added_ms']:.1f} ms",
    )
    for workers in (1, 4):
        host, boxed = suite[f"host_w{workers}"], suite[f"docker_w{workers}"]
        table.add_row(
            f"suite-throughput ({args.tests} tests, {workers} workers)",
            f"{host:.1f} tests/s",
            f"{boxed:.1f} tests/s",
            f"{host / boxed:.1f}x",
            f"{(1 / boxed - 1 / host) * 1000:.0f} ms/test",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
