"""Sandboxes: run one command in a fresh, isolated, hardened environment, then destroy it.

Backends: ``oci`` (the OCI runtime, runc, on unpacked image roots: near-bare speed), ``docker``
(the Docker Engine), and ``host`` (no isolation, for comparisons only). Third-party backends
register under the ``gradebox.sandboxes`` entry-point group.

May import: core, protocol, engine, images, files.
"""

from __future__ import annotations

import importlib
import os

from ..core import settings
from ..core.log import LazyLogger
from ..errors import ConfigError, GradeboxError
from ._shared import LazyEngine
from .base import Mount, RunOutcome, Sandbox, SandboxSpec, registered
from .defaults import Limits, Security

__all__ = [
    "BACKENDS",
    "LazyEngine",
    "Limits",
    "Mount",
    "RunOutcome",
    "Sandbox",
    "SandboxSpec",
    "Security",
    "auto_reason",
    "choose_backend",
    "collect_garbage",
    "get_sandbox",
]

log = LazyLogger("gradebox.sandbox")  # logging loads on first use: not on exec's path

# Known backends by name -> the module that registers it, imported only when asked for.
BACKENDS = {
    "oci": "gradebox.sandbox.oci",
    "docker": "gradebox.sandbox.docker",
    "host": "gradebox.sandbox.host",
}
CHOICES = ("auto", *BACKENDS)


def choose_backend(name: str | None = None) -> str:
    """The backend a command runs on: ``name``, else ``$GRADEBOX_SANDBOX``, else ``auto``.

    ``auto`` is the fastest backend that keeps every promise here: ``oci`` where the OCI
    runtime can run with every limit (as root; or rootless, in a user namespace, where this
    user has cgroups for the limits: see docs/non-root.md), else ``docker``. It logs which
    and why (``auto_reason``)."""
    wanted = (name or settings.current().sandbox or "auto").strip().lower()
    if wanted != "auto":
        return wanted
    chosen, why = auto_reason()
    log.info("sandbox: %s (%s)", chosen, why)
    return chosen


def auto_reason() -> tuple[str, str]:
    """What ``auto`` picks on this machine for this user, and why."""
    from .oci import choose_runtime, oci_usable  # lazy: a backend loads when one is chosen

    chosen = choose_runtime()
    why = oci_usable(runtime=chosen)
    if why is None:
        from .slots import slots_unusable  # lazy: a backend loads when one is chosen

        runtime = chosen.why
        if slots_unusable(chosen.name, os.geteuid() != 0) is None:
            runtime += ", cgroup slots made ahead"
        if os.geteuid() == 0:
            return "oci", f"{runtime}, as root: the fastest backend, every limit kept"
        from .cgroups import scope_entered  # lazy: subprocess (~5 ms), off exec's path

        where = f" (a delegated scope of its systemd: {scope_entered[0]})" if scope_entered else ""
        return "oci", (
            f"{runtime}, rootless in a user namespace, limits in this user's cgroups{where}"
        )
    return "docker", f"the OCI backend cannot keep every promise here: {why}"


def get_sandbox(name: str | None = None) -> Sandbox:
    """A sandbox backend by name (see ``choose_backend``).

    Example::

        with get_sandbox("docker") as box:
            out = box.run(SandboxSpec(image=box.resolve_image("gradebox/shell"),
                                      command=["echo", "hi"]))
    """
    chosen = choose_backend(name)
    factory = registered().get(chosen)
    if factory is None and chosen in BACKENDS:
        importlib.import_module(BACKENDS[chosen])
        factory = registered().get(chosen)
    if factory is None:
        factory = _entry_point(chosen)
    if factory is None:
        raise ConfigError(
            f"unknown sandbox {chosen!r}; known: {', '.join(CHOICES)}", field="--sandbox"
        )
    return factory()


def _entry_point(name: str):  # type: ignore[no-untyped-def]
    from importlib.metadata import entry_points  # lazy: ~30 ms, for a plugin backend only

    for ep in entry_points(group="gradebox.sandboxes"):
        if ep.name == name:
            return ep.load()
    return None


def collect_garbage(
    everything: bool = False,
    engine_timeout: float = 120.0,
    need_engine: bool = True,
    owner: int | None = None,
) -> list[str]:
    """Remove the containers of every backend whose runner is gone (or all, ``everything``;
    only the runner ``owner``'s, gone or not, with ``owner``):
    the OCI runtime's first (their workspaces are mounts in scratch folders), then the Docker
    engine's. Their names (an id where a container has none). ``need_engine=False``: no
    engine reachable here is no error (nothing of ours ran on it)."""
    # lazy: both backends and the engine (tenacity; the Docker SDK on connect) for a sweep only
    from . import oci
    from ._engine import Engine
    from .docker import collect_garbage as docker_garbage

    removed = oci.collect_garbage(everything=everything, owner=owner)
    try:
        engine = Engine.connect(timeout=engine_timeout)
        gone = docker_garbage(engine, everything=everything, owner=owner)
    except GradeboxError:
        if need_engine:
            raise
        return removed
    return removed + [c["Names"][0].lstrip("/") if c.get("Names") else c["Id"][:12] for c in gone]
