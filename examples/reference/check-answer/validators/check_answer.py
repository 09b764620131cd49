"""Passes when the agent's final answer contains 42."""

import json
import sys

payload = json.load(sys.stdin)
answer = payload.get("output") or ""
found = "42" in answer
print(
    json.dumps(
        {
            "pass": found,
            "score": 1.0 if found else 0.0,
            "reason": "1/1 checks passed" if found else "0/1 checks passed",
            "checks": [
                {
                    "text": "Answer contains the correct value (42)",
                    "pass": found,
                    "reason": "42 is in the answer" if found else "42 is not in the answer",
                }
            ],
        }
    )
)
