"""Counts the assertions in the workspace's test file and reports a partial score."""

import json
import os
import pathlib

workspace = pathlib.Path(os.environ["EVALUATE_WORKSPACE"])
payload = json.loads(pathlib.Path(os.environ["EVALUATE_GRADER_INPUT"]).read_text())

lines = (workspace / "assertions.txt").read_text().splitlines()
passed = sum(1 for line in lines if line.startswith("ok"))
print(
    json.dumps(
        {
            "name": "my-custom-check",
            "passed": passed / len(lines) >= 0.5,
            "score": round(passed / len(lines), 2),
            "evidence": f"{passed} of {len(lines)} assertions passed",
            "kind": "code",
        }
    )
)
