"""A package's public names, each imported from its module on first use.

``gradebox --version``, ``gradebox exec`` and other short commands read a name or two from a
package and must not pay for pydantic, the Docker SDK and the rest that its other modules load.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: dict[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: ``where`` maps a module (relative to the
    package) to the names it gives; each name is imported on first use, then kept."""
    home = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{home[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
