"""Other harnesses' suite files, read as they are written and mapped onto our suite model.

``detect_format`` tells them apart by shape; ``load_suite`` (in ``gradebox.suite``) calls the
right reader. Everything after loading (sandbox, baseline, reports, resume) is shared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["FORMATS", "detect_format"]

FORMATS = ("gradebox", "agentv")

# Keys only an AgentV eval file has at its top level (today's form and the earlier one).
_AGENTV_KEYS = {
    "prompts", "providers", "evalcases", "assertions", "execution", "environment",
    "default_test", "evaluate_options", "scenarios", "extensions", "suite", "env",
    "threshold", "timeout_seconds", "$schema", "dataset", "category", "tags", "input",
    "governance", "derived_metrics", "nunjucks_filters", "output_path", "input_files",
}  # fmt: skip
_AGENTV_TEST_KEYS = {"vars", "input_messages", "expected_messages", "assertions", "execution",
                     "expected_outcome", "conversation_id", "options"}  # fmt: skip


def detect_format(path: Path, data: Any) -> str:
    """``agentv`` when the file has the shape of an AgentV eval file, else ``gradebox``."""
    if path.suffix == ".jsonl" or re.search(r"\.eval\.ya?ml$", path.name, re.I):
        return "agentv"  # AgentV's own names for eval files
    if not isinstance(data, dict):
        return "gradebox"
    if _AGENTV_KEYS & set(data):
        return "agentv"
    if isinstance(data.get("target"), str) or isinstance(data.get("tests"), str):
        return "agentv"
    workspace = data.get("workspace")
    if isinstance(workspace, dict) and "hooks" in workspace:
        return "agentv"
    if isinstance(workspace, dict) and any(
        isinstance(r, dict) and ("repo" in r or isinstance(r.get("source"), dict))
        for r in workspace.get("repos") or []
    ):
        return "agentv"
    tests = data.get("tests")
    if isinstance(tests, list):
        for test in tests:
            if isinstance(test, str) or (isinstance(test, dict) and "include" in test):
                return "agentv"
            if isinstance(test, dict) and _AGENTV_TEST_KEYS & set(test):
                return "agentv"
            if isinstance(test, dict) and any(
                isinstance(a, dict) and "metric" in a for a in test.get("assert") or []
            ):
                return "agentv"
    return "gradebox"
