"""The sandbox interface: run one command in a fresh, isolated environment, then destroy it.

A backend takes a ``SandboxSpec`` (image, command, mounts, stdin, limits, timeout) and returns a
``RunOutcome``, a flat record in which timeout, OOM and output overflow are fields, not
exceptions. Backends raise only for infrastructure faults (``EngineError``). Every backend must
pass the conformance checks in ``gradebox.sandbox.self_check``.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from .defaults import DEFAULT_LIMITS, DEFAULT_SECURITY, LimitValues, SecurityValues

if TYPE_CHECKING:
    import socket

    from .models import Limits, Security

__all__ = [
    "ImageSource",
    "Limits",
    "Mount",
    "Prepared",
    "RunOutcome",
    "Sandbox",
    "SandboxSpec",
    "Security",
    "register_sandbox",
    "registered",
]


def default_user() -> str:
    """Never root. Mirror a non-root invoker so files it must later delete stay its own."""
    uid, gid = os.getuid(), os.getgid()
    return "65534:65534" if uid == 0 else f"{uid}:{gid}"


@dataclass(frozen=True)
class Mount:
    """A host path bound into the container at ``target`` (read-only unless said)."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class SandboxSpec:
    """Everything needed to run one command once. ``image`` is an immutable image id."""

    image: str
    command: list[str]
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    stdin: bytes | None = None
    timeout: float = 60.0
    # The validated models (``Limits``, ``Security``), or the plain defaults they share.
    limits: Limits | LimitValues = DEFAULT_LIMITS
    security: Security | SecurityValues = DEFAULT_SECURITY
    network: str = "none"
    labels: dict[str, str] = field(default_factory=dict)
    name: str = "grader"
    # Called once the container runs and before the command is released, with a ``Started``:
    # the model proxy listens on the container's own loopback.
    on_start: Callable[[Started], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Started:
    """What ``SandboxSpec.on_start`` is given: the host pid of the container's first process,
    and ``listen(port)``, a listening socket on 127.0.0.1:port of the container's own network
    namespace (made however this backend and this user can: see ``door.py``)."""

    pid: int
    listen: Callable[[int], socket.socket]


@dataclass
class RunOutcome:
    """What happened. ``exit_code`` is None when the process never ran or never exited.

    ``signal`` is set only when the runtime itself saw the process die of that signal (then
    ``exit_code`` is 128 + signal); a process that chose to exit with 137 has ``signal`` None.
    ``start_error`` is set by the backend when the command could not be started at all; a
    grader cannot set it by printing anything.
    """

    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    timed_out: bool = False
    oom_killed: bool = False
    start_error: str | None = None
    duration_ms: int = 0
    signal: int | None = None

    @property
    def output_truncated(self) -> bool:
        return bool(self.stdout_dropped or self.stderr_dropped)


class ImageSource(Protocol):
    """Turns image references (names, pinned references, ``{build: ...}``) into the ids a
    backend runs, checked against the lock when locked. ``Sandbox.images()`` gives one."""

    def resolve(self, ref: Any, source_dir: Path | None = None) -> str: ...


class Prepared(ABC):
    """A sandbox made ready before its input exists; executed once, then destroyed."""

    backend: str = "?"  # the backend that runs it (one may hand a spec to another)

    @abstractmethod
    def execute(self, stdin: bytes | None = None) -> RunOutcome:
        """Release the command with ``stdin``; its timeout starts now. Destroys afterwards."""

    @abstractmethod
    def discard(self) -> None:
        """Destroy without running (the test failed early, or the run was interrupted)."""


class _Deferred(Prepared):
    """For backends with nothing to do ahead of time: everything happens at execute."""

    def __init__(self, box: Sandbox, spec: SandboxSpec) -> None:
        self.box, self.spec = box, spec
        self.backend = box.name

    def execute(self, stdin: bytes | None = None) -> RunOutcome:
        from dataclasses import replace

        return self.box.run(replace(self.spec, stdin=stdin))

    def discard(self) -> None:
        pass


class Sandbox(ABC):
    """A place to run untrusted commands. Subclasses register with ``@register_sandbox``.

    Example::

        with get_sandbox("docker") as box:
            outcome = box.run(SandboxSpec(image=box.resolve_image("gradebox/shell"),
                                          command=["echo", "hi"]))
            assert outcome.stdout == b"hi\\n"
    """

    name: ClassVar[str]
    isolated: ClassVar[bool] = True

    @abstractmethod
    def run(self, spec: SandboxSpec) -> RunOutcome:
        """Run ``spec`` in a fresh environment and destroy it before returning."""

    def prepare(self, spec: SandboxSpec, *, warm: bool = True) -> Prepared:
        """Get ready to run ``spec`` before its input exists (``warm``: as far as possible).

        Example::

            ready = box.prepare(spec)      # while the agent still works
            outcome = ready.execute(b"{}")  # input known: runs now, then destroyed
        """
        return _Deferred(self, spec)

    @abstractmethod
    def resolve_image(self, ref: str) -> str:
        """An image reference -> the immutable id that ``SandboxSpec.image`` takes."""

    def images(
        self,
        *,
        locked: bool = False,
        build_network: bool = False,
        lock: Any = None,
        build: bool = False,
    ) -> ImageSource:
        """The run's image resolution for this backend (lock-aware, builds included);
        ``lock``: check against this lock instead of ``images/images.lock.json``; ``build``:
        a grader's own Dockerfile may be built (the operator allowed ``build``).

        Example::

            images = box.images(locked=True)
            spec = SandboxSpec(image=images.resolve("python"), command=["true"])
        """
        raise NotImplementedError(f"the {self.name} backend resolves no images")

    def leftovers(self) -> list[str]:
        """Environments this process created that still exist (should always be empty)."""
        return []

    def close(self) -> None:
        """Destroy anything this process still has running. Safe to call twice."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_BACKENDS: dict[str, Callable[[], Sandbox]] = {}


def __getattr__(name: str) -> Any:
    # The pydantic models load on first use: the hot path of `gradebox exec` never needs them.
    if name in ("Limits", "Security"):
        from . import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_sandbox(name: str) -> Callable[[type[Sandbox]], type[Sandbox]]:
    def deco(cls: type[Sandbox]) -> type[Sandbox]:
        cls.name = name
        _BACKENDS[name] = cls
        return cls

    return deco


def registered() -> dict[str, Callable[[], Sandbox]]:
    """Backends registered so far (``gradebox.sandbox.get_sandbox`` loads the known ones)."""
    return dict(_BACKENDS)
