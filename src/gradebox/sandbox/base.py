"""The sandbox interface: run one command in a fresh, isolated environment, then destroy it.

A backend takes a ``SandboxSpec`` (image, command, mounts, stdin, limits, timeout) and returns a
``RunOutcome``, a flat record in which timeout, OOM and output overflow are fields, not
exceptions. Backends raise only for infrastructure faults (``EngineError``). Every backend must
pass the conformance checks in ``gradebox.sandbox.self_check``.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod

from ..core.record import Record
from .defaults import DEFAULT_LIMITS, DEFAULT_SECURITY, Limits, Security

# Not `from typing import ...`: typing costs `gradebox exec`'s hot path ~3 ms, for annotations.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any, ClassVar, Protocol
else:
    Protocol = object

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


class Mount(Record):
    """A host path bound into the container at ``target`` (read-only unless said)."""

    __slots__ = _fields = ("source", "target", "read_only")
    _defaults = {"read_only": True}
    _frozen = True
    if TYPE_CHECKING:
        source: Path
        target: str
        read_only: bool


class SandboxSpec(Record):
    """Everything needed to run one command once. ``image`` is an immutable image id.

    ``limits`` and ``security``: the records of ``sandbox.defaults``. ``on_start`` is called
    once the container runs and before the command is released, with a ``Started``: the model
    proxy listens on the container's own loopback (left out of == and repr)."""

    __slots__ = _fields = (
        "image",
        "command",
        "workdir",
        "env",
        "mounts",
        "stdin",
        "timeout",
        "limits",
        "security",
        "network",
        "labels",
        "name",
        "on_start",
    )
    _defaults = {
        "workdir": "/",
        "mounts": (),
        "stdin": None,
        "timeout": 60.0,
        "limits": DEFAULT_LIMITS,
        "security": DEFAULT_SECURITY,
        "network": "none",
        "name": "grader",
        "on_start": None,
    }
    _factories = {"env": dict, "labels": dict}
    _uncompared = ("on_start",)
    _frozen = True
    if TYPE_CHECKING:
        image: str
        command: list[str]
        workdir: str
        env: dict[str, str]
        mounts: tuple[Mount, ...]
        stdin: bytes | None
        timeout: float
        limits: Limits
        security: Security
        network: str
        labels: dict[str, str]
        name: str
        on_start: Callable[[Started], None] | None


class Started(Record):
    """What ``SandboxSpec.on_start`` is given: the host pid of the container's first process,
    and ``listen(port)``, a listening socket on 127.0.0.1:port of the container's own network
    namespace (made however this backend and this user can: see ``door.py``)."""

    __slots__ = _fields = ("pid", "listen")
    _frozen = True
    if TYPE_CHECKING:
        pid: int
        listen: Callable[[int], socket.socket]


class RunOutcome(Record):
    """What happened. ``exit_code`` is None when the process never ran or never exited.

    ``signal`` is set only when the runtime itself saw the process die of that signal (then
    ``exit_code`` is 128 + signal); a process that chose to exit with 137 has ``signal`` None.
    ``start_error`` is set by the backend when the command could not be started at all; a
    grader cannot set it by printing anything.
    """

    __slots__ = _fields = (
        "exit_code",
        "stdout",
        "stderr",
        "stdout_dropped",
        "stderr_dropped",
        "timed_out",
        "oom_killed",
        "start_error",
        "duration_ms",
        "signal",
    )
    _defaults = {
        "stdout": b"",
        "stderr": b"",
        "stdout_dropped": 0,
        "stderr_dropped": 0,
        "timed_out": False,
        "oom_killed": False,
        "start_error": None,
        "duration_ms": 0,
        "signal": None,
    }
    if TYPE_CHECKING:
        exit_code: int | None
        stdout: bytes
        stderr: bytes
        stdout_dropped: int
        stderr_dropped: int
        timed_out: bool
        oom_killed: bool
        start_error: str | None
        duration_ms: int
        signal: int | None

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
        return self.box.run(self.spec.replace(stdin=stdin))

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

    # The default: images from the Docker engine's store (``self.engine``), which docker runs
    # and oci unpacks (the very same ids); a backend without them overrides both.
    engine: Any = None
    _lock: threading.Lock
    _resolver: ImageSource | None = None

    def resolve_image(self, ref: str) -> str:
        """An image reference -> the immutable id that ``SandboxSpec.image`` takes."""
        if ref.startswith("sha256:") and len(ref) == 71:
            return ref
        return self.images().resolve(ref)

    def images(
        self,
        *,
        locked: bool = False,
        build_network: bool = False,
        lock: Any = None,
        build: bool = False,
    ) -> ImageSource:
        """The run's image resolution for this backend (lock-aware, builds included);
        ``lock``: check against this lock instead of ``images.lock.json``; ``build``:
        a grader's own Dockerfile may be built (the operator allowed ``build``).

        Example::

            images = box.images(locked=True)
            spec = SandboxSpec(image=images.resolve("python"), command=["true"])
        """
        if self.engine is None:  # a backend with no engine's store has images of its own, or none
            raise NotImplementedError(f"{type(self).__name__} has no engine: it resolves no images")
        from ..images import ImageResolver  # lazy: the engine's images, off exec's path

        if locked or build_network or lock is not None or build:
            return ImageResolver(
                self.engine, locked=locked, build_network=build_network, lock=lock, build=build
            )
        with self._lock:
            if self._resolver is None:
                self._resolver = ImageResolver(self.engine)
            return self._resolver

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


def register_sandbox(name: str) -> Callable[[type[Sandbox]], type[Sandbox]]:
    def deco(cls: type[Sandbox]) -> type[Sandbox]:
        cls.name = name
        _BACKENDS[name] = cls
        return cls

    return deco


def registered() -> dict[str, Callable[[], Sandbox]]:
    """Backends registered so far (``gradebox.sandbox.get_sandbox`` loads the known ones)."""
    return dict(_BACKENDS)
