"""How long hostile grader output takes to judge, and how long it stalls other threads.

Each case is a stdout a grader could print (a script grader, exit 0) or an answer a judge
model could give; it is judged in a worker thread while a ticker thread measures its longest
gap (a parse that holds the interpreter lock freezes every other test of the run). Every case
runs in its own process with a time limit, so a quadratic parse shows as ``>limit``.

Usage: hostile_output.py [SIZE_KIB ...] [--limit SECONDS]   (default: 1024 KiB, 60 s)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import threading
import time
from collections.abc import Callable

CASES: dict[str, Callable[[int], str]] = {
    "escaped quotes": lambda n: '"' + '\\"' * (n // 2),
    "escaped quotes after {": lambda n: '{"a": "' + '\\"' * (n // 2),
    "deep nesting [": lambda n: "[" * n,
    'deep nesting {"a":': lambda n: '{"a":' * (n // 5),
    "{ lines": lambda n: "{\n" * (n // 2),
    '{"a":[ lines': lambda n: '{"a":[\n' * (n // 7),
    "one long line": lambda n: "{" + "x" * (n - 2) + "}",
    "long debug, result": lambda n: "d" * (n - 20) + '\n{"pass": false}',
    "many small objects": lambda n: '{"a": 1}\n' * (n // 9),
    "invisible chars": lambda n: "\u200b" * (n // 3) + '{"pass": false}',
}


def _judge(text: str, kind: str) -> None:
    if kind == "llm":
        from gradebox.graders.llm import parse_verdict

        parse_verdict(text, [])
        return
    from gradebox.graders.verdict import judge
    from gradebox.sandbox.base import Limits, RunOutcome

    judge("script", "g", RunOutcome(exit_code=0, stdout=text.encode()), timeout=60,
          limits=Limits())  # fmt: skip


def _one(case: str, size: int, kind: str, out: multiprocessing.Queue) -> None:
    text = CASES[case](size)
    _judge("", kind)  # imports done before the clock starts
    gaps = [0.0]
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps[0] = max(gaps[0], now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.01)
    started = time.perf_counter()
    _judge(text, kind)
    took = time.perf_counter() - started
    done.set()
    ticker.join()
    out.put((took, gaps[0]))


def measure(case: str, size: int, kind: str, limit: float) -> tuple[float | None, float | None]:
    queue: multiprocessing.Queue = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_one, args=(case, size, kind, queue))
    proc.start()
    proc.join(limit)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return None, None
    return queue.get() if not queue.empty() else (None, None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[1024])
    parser.add_argument("--limit", type=float, default=60.0)
    args = parser.parse_args()
    rows = []
    for kind in ("script", "llm"):
        for case in CASES:
            for kib in args.sizes:
                took, stall = measure(case, kib * 1024, kind, args.limit)
                row = {"kind": kind, "case": case, "KiB": kib,
                       "ms": None if took is None else round(took * 1000, 1),
                       "stall_ms": None if stall is None else round(stall * 1000, 1)}  # fmt: skip
                rows.append(row)
                shown = f">{args.limit:g}s" if took is None else f"{row['ms']} ms"
                print(f"{kind:6} {case:26} {kib:5} KiB  {shown:>12}  stall {row['stall_ms']} ms",
                      flush=True)  # fmt: skip
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
