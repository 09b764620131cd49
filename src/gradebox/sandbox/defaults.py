"""Limits and privileges, declared once: ``HARDENING``, every protection of a grader's container.

From its rows come the plain records ``Limits`` and ``Security`` every backend runs on, their
pydantic edge and JSON Schema (``sandbox.models``), the privileges a configuration asks for
(``hardening.privileges_of``), the rlimits and cgroups both backends set, and the table in
docs/security.md (``make schemas``; a test fails when it differs). Standard library only.
"""

from __future__ import annotations

from ..core.record import Record
from ..core.sizes import format_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CGROUPS",
    "DEFAULT_LIMITS",
    "DEFAULT_SECURITY",
    "HARDENING",
    "PRIVILEGES",
    "Limits",
    "Protection",
    "Security",
    "hardening_table",
    "write_hardening_table",
    "rlimits",
]

# What an `allow` (a suite's, or `--allow` from whoever runs gradebox) lets graders relax.
PRIVILEGES = {
    "root": "run as uid 0 (security.user)",
    "capabilities": "add Linux capabilities back (security.capabilities)",
    "network": "a network beyond loopback (network: bridge); also for image builds",
    "writable-root": "a writable root filesystem (security.read_only_root: false)",
    "privilege-escalation": "setuid programs may gain privileges (no_new_privileges: false)",
    "limits": "resource limits above the defaults (limits.*)",
    "build": "build its own Dockerfile (image: {build: ...}), whose RUN steps run as root "
    "with capabilities on the engine",
}


class Protection(Record):
    """One row of the hardening table. ``shown``: the default as the table reads (``{}``: the
    ``default`` in its ``unit``); ``key``: the setting that overrides it (``limits.NAME`` is a
    field of ``Limits``); ``bound``: a floor (a pattern for a user), as pydantic spells it;
    ``allow``: the privilege needed to relax it (raise a limit), None: anyone may."""

    __slots__ = _fields = ("row", "shown", "engine", "key", "default", "unit", "bound",
                           "allow", "help", "override", "rlimit", "cgroup")  # fmt: skip
    _defaults = dict.fromkeys(_fields[3:])
    _frozen = True

    @property
    def group(self) -> str:
        return self.key.partition(".")[0] if self.key and "." in self.key else ""

    @property
    def name(self) -> str:
        return self.key.rpartition(".")[2]

    def cells(self) -> list[str]:
        value = {"bytes": format_bytes, "cores": lambda n: f"{n:g} core"}.get(self.unit, str)
        override = self.override or (f"`{self.key}`" if self.key else "—")
        return [
            self.row,
            self.shown.replace("{}", value(self.default)),
            self.engine or "—",
            override,
            f"`{self.allow}`" if self.allow else "—",
        ]


# A user as the engine and the runtime read it: decimal numbers only ("00", "+0", "0_0",
# "root" or 4294967296 would each be uid 0 to one of them, and none is "0" to a check of the
# spelling).
USER = r"^(0|[1-9][0-9]{0,8})(:(0|[1-9][0-9]{0,8}))?$"  # below 2**32: 2**32 is 0 to crun
# Zero is "no limit" to the engine (Memory=0, a tmpfs's size=0), and lowering a limit asks
# for no privilege: memory and tmpfs have floors (memory the engine's own, 6 MiB).

P = Protection
HARDENING = (
    P("network", "none: only `lo`, no routes", "`NetworkMode=none`", key="network",
      override="`network: bridge`", allow="network"),
    P("root filesystem", "read-only", "`ReadonlyRootfs`", key="security.read_only_root",
      default=True, unit="on/off", allow="writable-root", help="root filesystem mounted read-only"),
    P("writable scratch", "tmpfs `/tmp` and `$HOME=/home/grader`, {} each, noexec,nosuid,nodev "
      "(`/dev/shm` too), alike on both backends", "`Tmpfs`", key="limits.tmpfs", default=64 << 20,
      unit="bytes", bound=("gt", 0), allow="limits",
      help="size of each writable tmpfs (/tmp, HOME)"),
    P("capabilities", "all dropped", "`CapDrop=ALL`", key="security.capabilities", default=(),
      unit="names", allow="capabilities", override="`security.capabilities` (added back)",
      help="capabilities added back after dropping ALL"),
    P("privilege escalation", "blocked", "`no-new-privileges`", key="security.no_new_privileges",
      default=True, unit="on/off", allow="privilege-escalation",
      help="setuid programs cannot gain privileges"),
    P("user", "`65534:65534` (nobody); the invoking uid:gid when gradebox runs as non-root",
      "`User`", key="security.user", unit="uid[:gid]", allow="root", bound=("pattern", USER),
      help="uid[:gid] to run as; default 65534:65534 (nobody), or the invoking user's uid:gid "
      "when gradebox itself runs as non-root"),
    P("processes", "{}", "`PidsLimit`", key="limits.pids", default=256, unit="count",
      bound=("ge", 8), allow="limits", cgroup="pids",
      help="processes and threads in the container"),
    P("memory", "{}, no swap", "`Memory = MemorySwap`", key="limits.memory", default=1 << 30,
      unit="bytes", bound=("ge", 6 << 20), allow="limits", cgroup="memory",
      help="RAM; swap is disabled (memory = memswap)"),
    P("CPU", "{}", "`NanoCpus`", key="limits.cpus", default=1.0, unit="cores", bound=("gt", 0),
      allow="limits", cgroup="cpu", help="CPU cores (fractional allowed)"),
    P("file size", "{}", "`ulimit fsize`", key="limits.file_size", default=256 << 20, unit="bytes",
      allow="limits", rlimit="fsize", help="largest file a process may write"),
    P("open files", "{}", "`ulimit nofile`", key="limits.open_files", default=1024, unit="count",
      bound=("ge", 16), allow="limits", rlimit="nofile", help="open file descriptors per process"),
    P("core dumps", "off", "`ulimit core=0`", default=0, rlimit="core"),
    P("zombies", "reaped by an init as PID 1: the host's tini, bound as an execute-only copy, so "
      "the kernel makes it non-dumpable (no ptrace, `/proc/1/mem` or `/proc/1/environ` from the "
      "grader); it reports on a channel of its own, never on the grader's stdout",
      "bind (`Init`, silent, where the host has no tini)", key="security.init", default=True,
      unit="on/off", help="an init as PID 1 that reaps zombies"),
    P("system calls", "our seccomp allow-list, the same on both backends (below)",
      "`SecurityOpt seccomp=<json>`"),
    P("output", "{} each of stdout (head kept; the grader is stopped past it) and stderr (tail "
      "kept)", "read through the attach stream; log driver `none`", key="limits.output",
      default=1 << 20, unit="bytes", allow="limits", help="cap on each of stdout and stderr"),
    P("Docker socket", "never mounted", None),
    P("timeout", "the whole container is SIGKILLed (children ignoring SIGTERM too)",
      "host deadline", key="timeout"),
    P("workspace writes", "targets and `rw` graders write into a tmpfs of 1 GiB and 100,000 files "
      "that the host never merges back", "host mount, bind", key="workspace",
      override="`workspace.max_size`, `max_files`"),
    P("payload privacy", "scratch folders 0700; the payload file 0400, owned by the sandbox user",
      None),
    P("environment", "exactly what gradebox sets: the SDK's proxy settings from "
      "`~/.docker/config.json` are not passed on", "`use_config_proxy=False`", key="env"),
    P("image build", "none: a named, pinned image", None, key="image",
      override="`image: {build: ...}`", allow="build"),
)  # fmt: skip
del P

CGROUPS = tuple(p.cgroup for p in HARDENING if p.cgroup)  # the controllers limits are set in
RLIMITS = tuple(p for p in HARDENING if p.rlimit)


class _Settings(Record):
    """A group of ``HARDENING``'s settings as a frozen record (pydantic validates into it)."""

    __slots__ = ()
    _frozen = True
    _rows: tuple[Protection, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = tuple(p.name for p in cls._rows)
        cls._defaults = {p.name: p.default for p in cls._rows}

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from .models import edge_schema  # pydantic: only where a configuration is validated

        return edge_schema(cls, handler)


class Limits(_Settings):
    """Resource limits of one grader container (bytes, cores, counts)."""

    _rows = tuple(p for p in HARDENING if p.group == "limits")
    __slots__ = tuple(p.name for p in _rows)


class Security(_Settings):
    """Hardening switches; the defaults are the locked-down setting."""

    _rows = tuple(p for p in HARDENING if p.group == "security")
    __slots__ = tuple(p.name for p in _rows)


DEFAULT_LIMITS = Limits()
DEFAULT_SECURITY = Security()


def rlimits(limits: Limits) -> list[tuple[str, int]]:
    """(name, value) of each rlimit a container gets: a limit's, or a fixed one (core)."""
    return [(p.rlimit, int(getattr(limits, p.name) if p.key else p.default)) for p in RLIMITS]


def hardening_table() -> str:
    """``HARDENING`` as the Markdown table docs/security.md shows."""
    head = ["protection", "default", "engine setting", "override", "relaxed only with `allow`"]
    rows = [head, ["---"] * len(head), *(p.cells() for p in HARDENING)]
    return "".join(f"| {' | '.join(cells)} |\n" for cells in rows).replace("| --- ", "|---")


def write_hardening_table(path: str) -> None:
    """Replace the hardening table in ``path`` (docs/security.md) with ours."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| protection |"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    with open(path, "w", encoding="utf-8") as f:
        f.writelines([*lines[:start], hardening_table(), *lines[end:]])
