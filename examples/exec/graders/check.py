"""An AgentV-style script grader: the payload on stdin, the workspace at workspace_path."""

import json
import os
import sys

payload = json.load(sys.stdin)
workspace = payload.get("workspace_path") or os.environ.get("EVALUATE_WORKSPACE", ".")
answer = open(os.path.join(workspace, "answer.txt")).read().strip()
passed = answer == "42" and "42" in (payload.get("output") or "")
print(json.dumps({"pass": passed, "score": 1.0 if passed else 0.0,
                  "reason": f"workspace says {answer!r}"}))
