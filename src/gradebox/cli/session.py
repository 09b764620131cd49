"""One command's session: what every command that runs graders is given, built once.

A command parses its options into a session, calls one library function with the sandbox,
privileges, image resolver and model targets it hands out, and gives the result to its
output (human or ``--json``). Every default comes from ``settings``; the watchdog is the
process's (``cli.main``), around every command alike.

``gradebox exec`` and ``grade``'s lean path (``cli.exec``, ``cli.grade_lean``) run before
typer, rich and pydantic exist, and take their choices from here too (which sandbox, which
privileges, ``--locked``, the image resolver, the lock's pin, the info line), not from
copies: this module loads the standard library and what exec stands on anyway
(``core.settings``, ``sandbox``); the typer commands' output layer (``_common.Output``: rich
and pydantic) is built on first use.
"""

from __future__ import annotations

import sys
from functools import cached_property
from pathlib import Path

# The backends' functions are read when called, so that a test may stand in for them.
from .. import sandbox as backends
from ..core import settings
from ..errors import ConfigError
from ..sandbox.defaults import PRIVILEGES

TYPE_CHECKING = False  # not typing's: exec's hot path imports this module (~10 ms)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

__all__ = ["CommandSession", "checked_allow", "locked_image_id"]


def checked_allow(allow: Iterable[str] | None) -> set[str]:
    """The privileges ``--allow`` names; an unknown one is a ``ConfigError`` (a typo must not
    silently allow nothing, or everything)."""
    allowed = set(allow or ())
    unknown = allowed - set(PRIVILEGES)
    if unknown:
        raise ConfigError(
            f"unknown privilege {sorted(unknown)[0]!r}; known: {', '.join(PRIVILEGES)}",
            field="--allow",
        )
    return allowed


def locked_image_id(name: str) -> str | None:
    """The id ``images.lock.json`` pins the short image name ``name`` to; None without a lock
    or entry (the resolver's to find). A lock another local user could have written is an
    ``ImageError`` (``catalog.lock_bytes``)."""
    # lazy: json and images.catalog (~3 + ~9 ms) load after exec's first cgroup slot is made
    # (its kernel wait passes meanwhile), and only for a short name
    import json  # lazy: as above

    from ..images.catalog import lock_bytes  # lazy: as above

    data = lock_bytes()
    if data is None:
        return None
    try:
        entry = json.loads(data)["images"][name]
        iid = entry["id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return iid if isinstance(iid, str) and iid.startswith("sha256:") else None


class CommandSession:
    """``--json``, ``--sandbox``, ``--allow``, ``--locked`` and ``--targets``, checked once,
    and what they decide; the output layer (rich) is built on first use."""

    def __init__(
        self,
        as_json: bool = False,
        *,
        sandbox: str | None = None,
        allow: Iterable[str] | None = None,
        locked: bool | None = None,
        targets: Path | None = None,
    ) -> None:
        self.settings = settings.current()
        self.as_json = as_json
        self.sandbox = sandbox
        self.locked = self.settings.ci if locked is None else locked  # --locked: on under CI
        self.targets = targets
        self.allowed = checked_allow(allow)

    def wanted_sandbox(self, suite_default: str | None = None) -> str:
        """The sandbox asked for: ``--sandbox``, ``$GRADEBOX_SANDBOX``, the suite's, ``auto``
        (``auto`` is decided where it runs: on each node of a cluster)."""
        wanted = self.sandbox or self.settings.sandbox or suite_default or "auto"
        return wanted.strip().lower()

    def chosen_sandbox(self, suite_default: str | None = None) -> tuple[str, str | None]:
        """(the backend this machine runs, why ``auto`` chose it or None when it was named)."""
        wanted = self.wanted_sandbox(suite_default)
        return (wanted, None) if wanted != "auto" else backends.auto_reason()

    def backend(self, name: str, *, lazy: bool = False, **oci: Any) -> Any:
        """The sandbox ``name`` (a context manager). ``lazy``: on oci, an engine reached only
        if an image must be resolved or unpacked by it (exec, the lean path), and ``oci``'s
        ``runtime``, ``session``, ``slot`` (exec's, made ahead) given to it."""
        if name == "oci" and lazy:
            # lazy: sandbox.oci (~70 ms here) loads only where oci runs (``auto`` loads it anyway)
            from ..sandbox.oci import OciSandbox

            return OciSandbox(backends.LazyEngine(), **oci)
        return backends.get_sandbox(name)

    def open_sandbox(
        self,
        suite_default: str | None = None,
        *,
        lazy: bool = False,
        chosen: tuple[str, str | None] | None = None,
    ) -> Any:
        """The sandbox the command runs on (a context manager), said on stderr when it was
        chosen for the user. ``chosen``: ``chosen_sandbox``'s answer, asked for already."""
        name, why = chosen or self.chosen_sandbox(suite_default)
        box = self.backend(name, lazy=lazy)
        if why is not None:  # said once it opened: a sandbox that cannot open is one error line
            self.info(f"sandbox: {name} ({why})")
        return box

    def images(self, box: Any, allow: Iterable[str] = ()) -> Any:
        """The image resolver of ``box``, with the privileges given and ``allow`` (a suite's)."""
        allowed = self.allowed | set(allow)
        return box.images(
            locked=self.locked, build_network="network" in allowed, build="build" in allowed
        )

    def locked_image(self, name: str) -> str | None:
        """The lock's id for a short image name (its root filesystem may be unpacked already:
        no engine at all); None for a reference, or a name the lock does not pin (the
        resolver's to find, which refuses it under ``--locked``)."""
        # lazy: images.catalog (~9 ms) loads after exec's first cgroup slot is made
        from ..images.catalog import qualified

        if qualified(name) == name:
            return None
        return locked_image_id(name)

    def info(self, line: str) -> None:
        """A dim line on stderr, as ``Output.info`` writes it; without rich where rich would
        write it as it is (``report.plain.fits``: no terminal, no markup)."""
        if "out" in self.__dict__:  # built already: its console
            self.out.info(f"[dim]{line}[/]")
            return
        # lazy: report.plain (~0.8 ms) stays off exec, which says no line of its own
        from ..report.plain import fits

        if fits(line):
            sys.stderr.write(line + "\n")
            return
        # lazy: rich (~50 ms) only for a line it must style (a terminal); never _common's
        # typer and pydantic on the lean path
        from rich.console import Console

        Console(stderr=True, highlight=False).print(f"[dim]{line}[/]")

    @cached_property
    def out(self) -> Any:
        """The typer commands' output layer (rich; pydantic for a document)."""
        # lazy: _common's typer, rich and pydantic (~250 ms) stay off exec and the lean path
        from ._common import Output

        return Output(self.as_json)

    def models(self, grader: Any) -> Any:
        """The model targets a grader without a suite is given (the operator's), or None for
        a grader that calls no model."""
        if getattr(grader, "target", None) is None:
            return None
        # lazy: graders.grader_run (~20 ms) loads after exec's first cgroup slot is made
        from ..graders.grader_run import operator_models

        return operator_models(self.targets)
