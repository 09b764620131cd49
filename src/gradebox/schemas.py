"""JSON Schemas generated from the wire and configuration models (``gradebox schemas``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from .atomic import write_atomic
from .graders.config import ProgramGrader, ScriptGrader
from .protocol import (
    GraderOutput,
    GraderResult,
    InlinePayload,
    InlineResult,
    Payload,
    RunSummary,
    TestResult,
)
from .suite import SuiteFile

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


def schema_documents() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema document."""
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
        docs[f"{name}.schema.json"] = schema
    return docs


def write_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, doc in schema_documents().items():
        path = directory / filename
        write_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
