"""The protocol's wire formats read and written by hand, for ``gradebox grade``'s lean path.

``protocol`` is the contract: its pydantic models define every format. This module gives the
same answers without importing pydantic, for the values it can vouch for, and raises
``Unsure`` for anything else, so that the caller asks the model instead (a fallback, never a
second opinion): a payload (``payload_dump``) and our result as ``--json`` prints it
(``result_json``). ``tests/unit/test_wire.py`` holds
each to its model, value by value and byte for byte.

Standard library only.
"""

from __future__ import annotations

import json
import math

from ..core.json_bounds import clean_text

TYPE_CHECKING = False  # not typing's: the lean path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["RESULT_FIELDS", "Unsure", "payload_dump", "result_json"]


class Unsure(Exception):
    """This value is one the hand reading does not vouch for: the model decides."""


# -- the payload (protocol.Payload) ----------------------------------------------------------

# Payload's fields in its order, each with its default as model_dump gives it. The few read
# here by hand; any other field (trace_summary, token_usage: nested models) given a value
# other than null is left to the model.
_STR = ("output", "criteria", "start_time", "end_time", "file_changes", "workspace_path",
        "output_path", "hint")  # fmt: skip
_NUMBER = ("cost_usd", "duration_ms")
# Fields that hold a JSON value as it is: the types each takes (or null).
_TAKES = {"trace": dict, "config": dict, "stimulus": dict, "trajectory": (list, dict)}
_NESTED = ("trace_summary", "token_usage")  # null only
PAYLOAD_FIELDS = (
    "input", "input_files", "output", "expected_output", "messages", "criteria", "trace",
    "trace_summary", "token_usage", "cost_usd", "duration_ms", "start_time", "end_time",
    "file_changes", "workspace_path", "output_path", "metadata", "config", "hint",
    "trajectory", "stimulus",
)  # fmt: skip
_LIST_DEFAULT = ("input", "input_files", "expected_output", "messages")


def payload_dump(data: dict[str, Any]) -> dict[str, Any]:
    """``Payload.model_validate(data).model_dump(mode="json")``, for a payload parsed from
    JSON (``json_bounds.load_json``); ``Unsure`` for anything the model might read otherwise
    (a number given as a string, a nested model, a message that is no object...)."""
    out: dict[str, Any] = {}
    for key in PAYLOAD_FIELDS:
        given = key in data
        value = data.get(key)
        if key in ("input", "expected_output"):
            role = "user" if key == "input" else "assistant"
            if value is None:
                out[key] = []
            elif isinstance(value, str):
                out[key] = [{"role": role, "content": value}]
            elif isinstance(value, list):
                out[key] = [
                    _message({"role": role, "content": v} if isinstance(v, str) else v)
                    for v in value
                ]
            else:
                raise Unsure(key)
        elif key == "messages":
            if not given:
                out[key] = []
            elif isinstance(value, list):
                out[key] = [_message(v) for v in value]
            else:
                raise Unsure(key)
        elif key == "input_files":
            if not given:
                out[key] = []
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                out[key] = list(value)
            else:
                raise Unsure(key)
        elif key == "metadata":
            if not given:
                out[key] = {}
            elif isinstance(value, dict):
                out[key] = value
            else:
                raise Unsure(key)
        elif value is None:
            out[key] = None
        elif key in _STR and isinstance(value, str):
            out[key] = value
        elif key in _NUMBER and _plain_number(value):
            out[key] = float(value)
        elif isinstance(value, _TAKES.get(key, ())):
            out[key] = value
        else:
            raise Unsure(key)
    for key, value in data.items():  # unknown fields are kept, after the declared ones
        if key not in out:
            out[key] = value
    return out


def _plain_number(value: object) -> bool:
    # An int the model turns into the same float; bools and strings are the model's to read.
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= 1 << 53
    return isinstance(value, float) and math.isfinite(value)


def _message(value: object) -> dict[str, Any]:
    """``Message``: ``role`` (a string), ``content`` (anything, default null), the rest kept."""
    if not isinstance(value, dict) or not isinstance(value.get("role"), str):
        raise Unsure("message")
    rest = {k: v for k, v in value.items() if k not in ("role", "content")}
    return {"role": value["role"], "content": value.get("content"), **rest}


# -- our result (protocol.GraderResult) ------------------------------------------------------

# GraderResult's fields in its order, with the defaults model_dump gives (test_wire.py holds
# this list to the model's).
RESULT_FIELDS: tuple[tuple[str, Any], ...] = (
    ("name", None), ("type", "program"), ("status", None), ("passed", None),
    ("score", None), ("evidence", ""), ("checks", []), ("details", None),
    ("exit_code", None), ("duration_ms", 0), ("image", None), ("timed_out", False),
    ("oom_killed", False), ("output_truncated", False), ("stdout_tail", None),
    ("stderr_tail", None), ("privileges", []), ("backend", None), ("weight", None),
    ("negated", False), ("required", None), ("children", []), ("usage", None),
    ("raw_response", None), ("warnings", []), ("calls", []),
)  # fmt: skip
_CHECK_FIELDS = ("text", "passed", "score", "evidence")


def result_json(fields: dict[str, Any]) -> str:
    """``GraderResult(**fields).model_dump_json(indent=2)``, for the fields a grader run
    gives (``graders.verdict.verdict``, plus image, backend, privileges); ``Unsure`` for a
    value whose JSON the two encoders could spell differently (a float in exponent form, a
    number past 64 bits) or a field the lean path never fills."""
    known = {k for k, _ in RESULT_FIELDS}
    if not fields.keys() <= known or fields.get("usage") is not None or fields.get("children"):
        raise Unsure("fields")
    doc: dict[str, Any] = {}
    for key, default in RESULT_FIELDS:
        value = fields.get(key, default)
        if key == "score":
            value = float(value)
        elif key == "checks":
            value = [
                {
                    f: (float(c[f]) if f == "score" and c[f] is not None else c.get(f))
                    for f in _CHECK_FIELDS
                }
                for c in value
            ]
        elif key == "image" and value is not None:
            value = {"ref": value["ref"], "id": value["id"]}
        doc[key] = value
    _plain(doc)
    return json.dumps(doc, indent=2, ensure_ascii=False)


def _plain(value: object) -> None:
    """Refuse what Python's ``json`` and pydantic's serialiser may write differently."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str):
                    raise Unsure("key")
                stack.append(sub)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, float):
            # Both write the shortest round-trip digits; they differ in exponent form
            # (1e-05 and 1e-5), in NaN and infinity (pydantic: null).
            if not math.isfinite(item) or (item and not 1e-4 <= abs(item) < 1e15):
                raise Unsure("float")
        elif isinstance(item, int):
            if abs(item) >= 1 << 63:
                raise Unsure("int")
        elif isinstance(item, str):
            # Lone surrogates (cleaned here everywhere else): the model's to write.
            if item != clean_text(item):
                raise Unsure("text")
        else:
            raise Unsure(type(item).__name__)
