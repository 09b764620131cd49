"""``Limits`` and ``Security`` as validated configuration (pydantic), with the defaults of
``sandbox.defaults``: one source of truth for the values, one for the validation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .._types import Bytes
from .defaults import DEFAULT_LIMITS as _L
from .defaults import DEFAULT_SECURITY as _S

__all__ = ["Limits", "Security"]


class Limits(BaseModel):
    """Resource limits of one grader container. Every default is documented in the README."""

    model_config = ConfigDict(extra="forbid")

    memory: Bytes = Field(default=_L.memory, description="RAM; swap is disabled (memory = memswap)")
    cpus: float = Field(default=_L.cpus, gt=0, description="CPU cores (fractional allowed)")
    pids: int = Field(default=_L.pids, ge=8, description="processes and threads in the container")
    output: Bytes = Field(default=_L.output, description="cap on each of stdout and stderr")
    file_size: Bytes = Field(default=_L.file_size, description="largest file a process may write")
    open_files: int = Field(
        default=_L.open_files, ge=16, description="open file descriptors per process"
    )
    tmpfs: Bytes = Field(default=_L.tmpfs, description="size of each writable tmpfs (/tmp, HOME)")


class Security(BaseModel):
    """Hardening switches; the defaults are the locked-down setting."""

    model_config = ConfigDict(extra="forbid")

    read_only_root: bool = Field(
        default=_S.read_only_root, description="root filesystem mounted read-only"
    )
    user: str | None = Field(
        default=_S.user,
        description="uid[:gid] to run as; default 65534:65534 (nobody), or the invoking "
        "user's uid:gid when gradebox itself runs as non-root",
    )
    capabilities: list[str] = Field(
        default_factory=lambda: list(_S.capabilities),
        description="capabilities added back after dropping ALL",
    )
    no_new_privileges: bool = _S.no_new_privileges
    init: bool = Field(default=_S.init, description="an init as PID 1 that reaps zombies")
