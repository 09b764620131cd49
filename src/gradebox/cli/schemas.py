"""JSON Schemas generated from the wire and configuration models (``gradebox schemas``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from ..core.atomic import write_atomic
from ..graders.assertion import refused_types
from ..graders.config import ProgramGrader, ScriptGrader
from ..graders.entries import known_types
from ..protocol.models import (
    GraderOutput,
    GraderResult,
    InlinePayload,
    InlineResult,
    Payload,
    RunSummary,
    TestResult,
)
from ..suite import SuiteFile

__all__ = ["SCHEMAS", "schema_documents", "write_schemas"]

SCHEMAS: dict[str, Any] = {
    "payload": Payload,
    "grader-output": GraderOutput,
    "result": GraderResult,
    "grader": ProgramGrader | ScriptGrader,
    "test-result": TestResult,
    "run-summary": RunSummary,
    "suite": SuiteFile,
    "inline-grader-input": InlinePayload,
    "inline-grader-result": InlineResult,
}


def schema_documents(custom_assertions: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema document.

    ``custom_assertions``: the names of a project's custom assertions; the suite schema then
    takes those and no other type, so an editor flags a misspelt one. Without them, any name
    that is not a built-in kind may be a custom assertion."""
    docs = {}
    for name, model in SCHEMAS.items():
        schema = TypeAdapter(model).json_schema(by_alias=True)
        ref = schema.get("$ref", "")
        if ref.startswith("#/$defs/") and len(schema) == 2:
            # A recursive model (a result with children) comes back as a bare $ref: put the
            # model itself at the top, so the document reads like the others.
            schema = {**schema["$defs"][ref.removeprefix("#/$defs/")], "$defs": schema["$defs"]}
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"gradebox/{name}.schema.json",
            **schema,
        }
        if name == "suite":
            _custom_types(schema, custom_assertions)
        docs[f"{name}.schema.json"] = schema
    return docs


def _custom_types(schema: dict[str, Any], names: list[str] | None) -> None:
    """A custom assertion's ``type``: the project's names, or any name that no kind takes
    and that the loader does not refuse by name (``g-eval``, ...)."""
    custom = schema["$defs"]["CustomEntry"]["properties"]["type"]
    if names is None:
        custom["not"] = {"enum": sorted(known_types() | refused_types())}
    else:
        custom["enum"] = sorted(set(names) - known_types())


def write_schemas(directory: Path, custom_assertions: list[str] | None = None) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, doc in schema_documents(custom_assertions).items():
        path = directory / filename
        write_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
