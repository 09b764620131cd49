"""Every environment default of gradebox, read here and nowhere else (the table: docs/cli.md).

``current()`` is a frozen ``Settings`` record, parsed once for a given environment and again
only when one of its variables changed (a test's ``monkeypatch``; the app's root setting
``GRADEBOX_RUNTIME`` for what the command starts). Every reader calls ``settings.current()``,
so a test sets a variable, or replaces ``current`` with a record of its own
(``current()._replace(...)``). Standard library only: exec's hot path reads it. Code that
runs inside images (``sdk``, ``verify``) and an environment handed to a subprocess are not
defaults (``tests/unit/test_settings.py`` lists each such use)."""

from __future__ import annotations

import os
from collections import namedtuple

__all__ = ["Settings", "current"]

# Each variable is the field of its name without GRADEBOX_, in lower case.
VARIABLES = """GRADEBOX_SANDBOX GRADEBOX_RUNTIME CI GRADEBOX_DEBUG GRADEBOX_TARGETS GRADEBOX_WORKERS
GRADEBOX_ENGINE_CALLS GRADEBOX_CACHE GRADEBOX_LLM_BACKOFF GRADEBOX_IMAGES_DIR GRADEBOX_IMAGE_REPO
GRADEBOX_APT_MIRROR GRADEBOX_APT_SUITE GRADEBOX_OCI_SLOTS GRADEBOX_OCI_STATE GRADEBOX_WORKSPACE
GRADEBOX_OFFLINE
XDG_CACHE_HOME XDG_DATA_HOME XDG_RUNTIME_DIR""".split()  # noqa: SIM905 - a list of words reads best


class Settings(namedtuple("Settings", [v.removeprefix("GRADEBOX_").lower() for v in VARIABLES])):
    """The variables, parsed: stripped text, ``None`` where unset or empty; numbers that are
    not positive are unset; ``ci`` is CI=true; ``oci_slots`` is off for 0, off or no;
    ``offline`` (``run --offline``'s default: fetch no repository) is on unless unset, 0,
    false, off or no."""

    __slots__ = ()

    @classmethod
    def parse(cls, env: dict[str, str]) -> Settings:
        own = cls(*((env.get(v) or "").strip() or None for v in VARIABLES))
        count = {
            f: int(v) if (v := getattr(own, f) or "").isdigit() and int(v) > 0 else None
            for f in ("workers", "engine_calls")
        }
        try:
            backoff = float(own.llm_backoff or 1)
        except ValueError:
            backoff = 1.0
        return own._replace(
            **count,
            sandbox=own.sandbox and own.sandbox.lower(),
            llm_backoff=backoff,
            ci=(own.ci or "").lower() == "true",
            debug=bool(env.get("GRADEBOX_DEBUG")),
            oci_slots=(own.oci_slots or "").lower() not in ("0", "off", "no"),
            offline=(own.offline or "0").lower() not in ("0", "false", "off", "no"),
            workspace="copy" if (own.workspace or "").lower() == "copy" else "overlay",
        )


# os.environ's own dict (bytes on POSIX, which gradebox runs on): a look-up there is a C call,
# where os.environ.get encodes and decodes each name (~40 us a call for the whole record).
_ENVIRON, _KEYS = os.environ._data, [os.fsencode(v) for v in VARIABLES]  # type: ignore[attr-defined]
_seen: tuple[tuple[bytes | None, ...], Settings] | None = None


def current() -> Settings:
    """The settings of the environment now (parsed again only when it changed)."""
    global _seen
    values = tuple(map(_ENVIRON.get, _KEYS))
    if _seen is None or _seen[0] != values:
        _seen = values, Settings.parse(dict(os.environ))
    return _seen[1]
