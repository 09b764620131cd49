"""The default limits and hardening switches as plain values: their one source of truth.

The pydantic models a configuration is validated into (``Limits``, ``Security`` in
``sandbox.models``) take every default from here, and a ``SandboxSpec`` built without them
(``gradebox exec``, whose hot path must not pay for pydantic) gets these very objects. The
backends read both alike, by attribute.

Must not import anything beyond the standard library.
"""

from __future__ import annotations

from .._record import Record

TYPE_CHECKING = False

__all__ = ["DEFAULT_LIMITS", "DEFAULT_SECURITY", "LimitValues", "SecurityValues"]


class LimitValues(Record):
    """Resource limits of one container (bytes, cores, counts)."""

    __slots__ = _fields = (
        "memory",  # RAM; swap is disabled (memory = memswap)
        "cpus",
        "pids",
        "output",  # cap on each of stdout and stderr
        "file_size",
        "open_files",
        "tmpfs",  # size of each writable tmpfs (/tmp, HOME)
    )
    _defaults = {
        "memory": 1 << 30,
        "cpus": 1.0,
        "pids": 256,
        "output": 1 << 20,
        "file_size": 256 << 20,
        "open_files": 1024,
        "tmpfs": 64 << 20,
    }
    _frozen = True
    if TYPE_CHECKING:
        memory: int
        cpus: float
        pids: int
        output: int
        file_size: int
        open_files: int
        tmpfs: int


class SecurityValues(Record):
    """Hardening switches; the defaults are the locked-down setting."""

    __slots__ = _fields = (
        "read_only_root",
        "user",  # uid[:gid]; None: 65534:65534, or a non-root invoker's own
        "capabilities",
        "no_new_privileges",
        "init",
    )
    _defaults = {
        "read_only_root": True,
        "user": None,
        "capabilities": (),
        "no_new_privileges": True,
        "init": True,
    }
    _frozen = True
    if TYPE_CHECKING:
        read_only_root: bool
        user: str | None
        capabilities: tuple[str, ...]
        no_new_privileges: bool
        init: bool


DEFAULT_LIMITS = LimitValues()
DEFAULT_SECURITY = SecurityValues()
