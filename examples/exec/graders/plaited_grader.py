#!/usr/bin/env -S gradebox exec -- python3
"""A plaited grader (spawned by its path, the record on stdin). The line above is the one
change that sandboxes it: it was `#!/usr/bin/env python3`."""

import json
import sys

data = json.load(sys.stdin)
hit = (data.get("hint") or "").lower() in data["output"].lower()
print(json.dumps({"pass": hit, "score": 1.0 if hit else 0.0, "reasoning": "contains hint"}))
