"""The exceptions gradebox raises, all in one place.

Exceptions are for our infrastructure and for input we refuse; a grader that fails, times
out, is OOM-killed or floods its output is a *result*, never an exception.

    GradeboxError                 base of everything below; str() is one actionable line
    ├── ConfigError               bad configuration or usage; nothing was run (CLI exit 2)
    │   ├── ConfigErrors          several of them, found in one pass (one line each)
    │   ├── UnsupportedFeature    another harness's feature gradebox does not run, and the fix
    │   └── NotAllowed            a privilege asked for and not allowed by whoever runs it
    ├── ImageError                an image is missing, unpinned or differs from the lock
    ├── ClusterError              a cluster run cannot start: Ray unreachable, a node refused
    ├── WorkspaceError            a template, baseline or diff could not be made (git, disk)
    ├── StorageError              a folder we write ran out of space or cannot be written
    │                             mid-run (results, scratch): the run ends (CLI exit 5)
    └── EngineError               the container engine failed us
        ├── EngineUnavailable     the engine cannot be reached at all
        └── SandboxClosed         the sandbox was closed (Ctrl-C): nothing new may start

Foreign exceptions (``docker.errors``, ``requests``) are translated into these at exactly one
edge, ``gradebox.sandbox._engine``; nothing above it imports them.
"""

from __future__ import annotations

import re

__all__ = [
    "ClusterError",
    "ConfigError",
    "ConfigErrors",
    "EngineError",
    "EngineUnavailable",
    "GradeboxError",
    "ImageError",
    "NotAllowed",
    "SandboxClosed",
    "StorageError",
    "UnsupportedFeature",
    "WorkspaceError",
]


class GradeboxError(Exception):
    """Base class of every error gradebox raises on purpose."""


class ConfigError(GradeboxError):
    """Invalid configuration or usage, found before any container exists.

    ``file``, ``line`` and ``field`` locate the problem; ``str()`` renders them as
    ``grader.yaml:7: env.Evaluate_Grader_Input: reserved name ...``.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        field = f"{self.field}: " if self.field else ""
        return _printable(f"{where}{field}{self.message}")


# C0 and C1 controls, DEL and the Unicode line separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _printable(text: str) -> str:
    """Control characters as escapes: a key or value from a hostile file (``"a\\nb": 1``, an
    ANSI escape) can neither break an error's one line nor drive the user's terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class ConfigErrors(ConfigError):
    """Every configuration error found in one pass, so a user fixes them all at once.

    ``str()`` is one line per error; the first error's location is this one's.
    """

    def __init__(self, errors: list[ConfigError]) -> None:
        flat: list[ConfigError] = []
        for e in errors:
            flat += e.errors if isinstance(e, ConfigErrors) else [e]
        self.errors = flat
        first = flat[0]
        super().__init__(first.message, file=first.file, line=first.line, field=first.field)

    def __str__(self) -> str:
        return "\n".join(ConfigError.__str__(e) for e in self.errors)


class UnsupportedFeature(ConfigError):
    """A feature of another harness's file (an AgentV eval file) that gradebox does not run,
    refused on purpose: ``feature`` names it, the message says what to do instead. Anything
    else that stops such a file is a bug of ours or of the file, never a refusal."""

    def __init__(
        self,
        feature: str,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.feature = feature
        super().__init__(f"{feature}: {message}", file=file, line=line, field=field)


class NotAllowed(ConfigError):
    """A grader or target asks for a privilege (root, the network, higher limits) that
    whoever runs gradebox did not allow; the message names the ``--allow`` that would."""


def collect(errors: list[ConfigError]) -> None:
    """Raise what was collected: nothing, the one error, or all of them."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


class ImageError(GradeboxError):
    """An image is missing, unpinned, or not the one the lock file records."""


class EngineError(GradeboxError):
    """The container engine refused or failed an operation (after bounded retries)."""


class EngineUnavailable(EngineError):
    """The container engine cannot be reached."""


class ClusterError(GradeboxError):
    """A cluster run cannot start (a node refused, Ray unreachable) or lost its nodes."""


class WorkspaceError(GradeboxError):
    """The host could not copy a template or take a baseline or diff (git failed, disk full)."""


class StorageError(GradeboxError):
    """A folder gradebox writes (the results folder, the scratch folder ``$TMPDIR``) ran out of
    space or could not be written while a run went on. It is the machine's fault, not one
    test's: the run ends (finished results are kept, ``--resume`` continues it once there is
    room), and ``str()`` names the folder and the error."""


class SandboxClosed(EngineError):
    """The sandbox was closed while work was still asking for containers (an interrupt).

    Work that sees this was cut short; it is not a result and must not be recorded as one.
    """

    def __init__(self) -> None:
        super().__init__("the sandbox was closed (interrupted)")
