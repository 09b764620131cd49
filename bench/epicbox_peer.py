"""The peer: epicbox 1.1.0 running the same trivial grader on the same image.

Runs in its own venv (bench/.venv-epicbox: epicbox needs docker<7, urllib3<2, requests<2.32)
and prints {"median_ms": ...} on stdout. Usage: epicbox_peer.py IMAGE N
"""

import json
import statistics
import sys
import time

import epicbox

TRIVIAL = b"""import json, sys
payload = json.load(sys.stdin)
print(json.dumps({"pass": "42" in payload["output"], "score": 1.0}))
"""


def main() -> None:
    image, n = sys.argv[1], int(sys.argv[2])
    # The same user and network policy as gradebox's defaults; epicbox has no read-only root
    # with writable tmpfs, so it runs with a writable root (its default).
    epicbox.configure(
        profiles=[epicbox.Profile("python", image, user="65534", network_disabled=True)]
    )
    payload = json.dumps({"output": "The answer is 42."}).encode()
    files = [{"name": "main.py", "content": TRIVIAL}]
    limits = {"cputime": 5, "memory": 256, "realtime": 30}
    times = []
    for _ in range(n + 1):
        t = time.perf_counter()
        result = epicbox.run("python", "python3 main.py", files=files, limits=limits, stdin=payload)
        times.append(time.perf_counter() - t)
        assert result["exit_code"] == 0 and b'"pass": true' in result["stdout"], result
    print(json.dumps({"median_ms": statistics.median(times[1:]) * 1000}))


if __name__ == "__main__":
    main()
