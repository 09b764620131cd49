"""The pydantic edge of ``Limits`` and ``Security``: models made from ``defaults.HARDENING`` that
validate a configuration into those plain records, dump them as configuration reads (``512
MiB``) and give the JSON Schemas their ``Limits`` and ``Security``. Nothing declared here."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import core_schema

from ..core.types import Bytes

__all__ = ["edge_model", "edge_schema"]

# Cores a limit may ask for: finite, and few enough that every engine's and Ray's integer
# form of them (NanoCpus, a CFS quota, Ray's 1/10000ths) holds (inf was an OverflowError).
MAX_CORES = 65536
Cores = Annotated[float, Field(allow_inf_nan=False, le=MAX_CORES)]

# A unit of sandbox.defaults -> the type a configuration writes it as.
TYPES: dict[str | None, Any] = {
    "bytes": Bytes, "cores": Cores, "count": int, "on/off": bool, "names": list[str],
    "uid[:gid]": str | None,
}  # fmt: skip


@cache
def edge_model(record: type) -> type[BaseModel]:
    """The strict pydantic model of ``record``'s fields: types, defaults, floors, help."""
    fields: dict[str, Any] = {}
    for row in record._rows:
        default = {"default_factory": list} if row.default == () else {"default": row.default}
        bound = dict([row.bound]) if row.bound else {}
        if bound and row.unit == "bytes":  # its JSON Schema is Bytes' own: the floor said there
            key = {"ge": "minimum", "gt": "exclusiveMinimum"}[row.bound[0]]
            bound["json_schema_extra"] = {key: row.bound[1]}
        fields[row.name] = (TYPES[row.unit], Field(**default, **bound, description=row.help))
    return create_model(  # type: ignore[call-overload,no-any-return]
        record.__name__, __config__=ConfigDict(extra="forbid"), __doc__=record.__doc__, **fields
    )


def edge_schema(record: type, handler: Any) -> core_schema.CoreSchema:
    """The core schema pydantic uses for ``record``: its model, then the plain record (which a
    caller may also pass as it is)."""
    model = edge_model(record)
    checked = handler.generate_schema(model)

    def plain(m: BaseModel) -> Any:
        return record(**{r.name: _plain(r.unit, getattr(m, r.name)) for r in record._rows})

    into = core_schema.no_info_after_validator_function(plain, checked)
    return core_schema.no_info_before_validator_function(
        lambda v: v.as_dict() if isinstance(v, record) else v,
        into,
        serialization=core_schema.plain_serializer_function_ser_schema(
            lambda r: model.model_validate(r.as_dict()), return_schema=checked
        ),
    )


def _plain(unit: str | None, value: Any) -> Any:
    if unit == "bytes":
        return int(value)
    return tuple(value) if isinstance(value, list) else value
