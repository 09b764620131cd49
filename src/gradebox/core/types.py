"""Small validated value types shared by the configuration models: durations and byte sizes."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ByteSize,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from .duration import _DURATION, format_duration, parse_duration
from .scores import passing_threshold
from .sizes import format_bytes

__all__ = [
    "MAX_BYTES",
    "Bytes",
    "Duration",
    "Threshold",
    "format_bytes",
    "format_duration",
    "parse_duration",
]


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": _DURATION.pattern, "examples": ["500ms", "60s"]}),
]
"""Seconds, written with a unit in configuration files."""

MAX_BYTES = (1 << 63) - 1  # an int64: the largest count an engine's and Ray's fields hold

Bytes = Annotated[
    ByteSize,
    Field(le=MAX_BYTES),
    PlainSerializer(lambda v: format_bytes(int(v)), return_type=str),
    WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "examples": ["1GiB"]}]}
    ),
]
"""A byte count: an integer or a string such as ``512MiB`` / ``1GB``."""

Threshold = Annotated[
    float,
    # ge, not gt: 0 is refused by passing_threshold, which says why; the schema says above 0.
    Field(ge=0, le=1, allow_inf_nan=False, json_schema_extra={"exclusiveMinimum": 0}),
    AfterValidator(passing_threshold),
]
"""A score from 0 to 1 that passes an answer; one every score reaches is refused
(``core.scores``: it would pass every answer)."""
