"""The default limits and hardening switches as plain values: their one source of truth.

The pydantic models a configuration is validated into (``Limits``, ``Security`` in
``sandbox.models``) take every default from here, and a ``SandboxSpec`` built without them
(``gradebox exec``, whose hot path must not pay for pydantic) gets these very objects. The
backends read both alike, by attribute.

Must not import anything beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_LIMITS", "DEFAULT_SECURITY", "LimitValues", "SecurityValues"]


@dataclass(frozen=True)
class LimitValues:
    """Resource limits of one container (bytes, cores, counts)."""

    memory: int = 1 << 30  # RAM; swap is disabled (memory = memswap)
    cpus: float = 1.0
    pids: int = 256
    output: int = 1 << 20  # cap on each of stdout and stderr
    file_size: int = 256 << 20
    open_files: int = 1024
    tmpfs: int = 64 << 20  # size of each writable tmpfs (/tmp, HOME)


@dataclass(frozen=True)
class SecurityValues:
    """Hardening switches; the defaults are the locked-down setting."""

    read_only_root: bool = True
    user: str | None = None  # uid[:gid]; None: 65534:65534, or a non-root invoker's own
    capabilities: tuple[str, ...] = field(default=())
    no_new_privileges: bool = True
    init: bool = True


DEFAULT_LIMITS = LimitValues()
DEFAULT_SECURITY = SecurityValues()
