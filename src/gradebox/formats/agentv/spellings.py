"""AgentV's spellings of assertion types mapped onto ours before anything validates them.

AgentV v4's schema takes ``code_grader``, ``llm_grader``, ``is_json``, ``field_accuracy``,
``token_usage``, ``execution_metrics`` and ``tool_trajectory`` beside the hyphenated names;
``graders.entries`` (and the suite schema) name each kind once, hyphenated. A name whose
hyphenated form no kind takes is left alone: it may be a custom assertion's file name.
"""

from __future__ import annotations

from typing import Any

from ...graders.assertion import refused_types
from ...graders.entries import known_types

__all__ = ["our_spellings"]


def our_spellings(entries: Any) -> Any:
    """An ``assert`` list with each type (children of groups too) spelt as ours."""
    if not isinstance(entries, list):
        return entries
    names = known_types() | refused_types()
    return [_entry(e, names) for e in entries]


def _entry(entry: Any, names: set[str]) -> Any:
    if not isinstance(entry, dict):
        return entry
    kind = entry.get("type")
    if isinstance(kind, str) and "_" in kind and kind not in names:
        hyphenated = kind.replace("_", "-")
        if hyphenated in names:
            entry = {**entry, "type": hyphenated}
    if isinstance(entry.get("assert"), list):  # assert-set, composite: their children
        entry = {**entry, "assert": [_entry(c, names) for c in entry["assert"]]}
    return entry
