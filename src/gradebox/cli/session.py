"""One command's session: what every command that runs graders is given, built once.

A command parses its options into a ``CommandSession``, calls one library function with the
sandbox, privileges, image resolver and model targets it hands out, and gives the result to
its ``out`` (the output layer: human or ``--json``). Every default comes from ``settings``;
the watchdog is the process's (``cli.main``), around every command alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core import settings
from ..errors import ConfigError
from ..sandbox.defaults import PRIVILEGES
from ._common import Output

__all__ = ["CommandSession"]


class CommandSession:
    """``--json``, ``--sandbox``, ``--allow``, ``--locked`` and ``--targets``, checked once."""

    def __init__(
        self,
        as_json: bool = False,
        *,
        sandbox: str | None = None,
        allow: list[str] | None = None,
        locked: bool | None = None,
        targets: Path | None = None,
    ) -> None:
        self.settings = settings.current()
        self.out = Output(as_json)
        self.sandbox = sandbox
        self.locked = self.settings.ci if locked is None else locked  # --locked: on under CI
        self.targets = targets
        # A typo must not silently allow nothing (or everything).
        self.allowed = set(allow or ())
        unknown = self.allowed - set(PRIVILEGES)
        if unknown:
            raise ConfigError(
                f"unknown privilege {sorted(unknown)[0]!r}; known: {', '.join(PRIVILEGES)}",
                field="--allow",
            )

    def wanted_sandbox(self, suite_default: str | None = None) -> str:
        """The sandbox asked for: ``--sandbox``, ``$GRADEBOX_SANDBOX``, the suite's, ``auto``
        (``auto`` is decided where it runs: on each node of a cluster)."""
        return self.sandbox or self.settings.sandbox or suite_default or "auto"

    def open_sandbox(self, suite_default: str | None = None) -> Any:
        """The sandbox the command runs on (a context manager), said on stderr when it was
        chosen for the user."""
        from ..sandbox import auto_reason, get_sandbox

        wanted = self.wanted_sandbox(suite_default)
        chosen, why = auto_reason() if wanted == "auto" else (wanted, None)
        box = get_sandbox(chosen)
        if why is not None:  # said once it opened: a sandbox that cannot open is one error line
            self.out.info(f"[dim]sandbox: {chosen} ({why})[/]")
        return box

    def images(self, box: Any, allow: Iterable[str] = ()) -> Any:
        """The image resolver of ``box``, with the privileges given and ``allow`` (a suite's)."""
        allowed = self.allowed | set(allow)
        return box.images(
            locked=self.locked, build_network="network" in allowed, build="build" in allowed
        )

    def models(self, grader: Any) -> Any:
        """The model targets a grader without a suite is given (the operator's), or None for
        a grader that calls no model."""
        if getattr(grader, "target", None) is None:
            return None
        from ..graders.grader_run import operator_models

        return operator_models(self.targets)
