"""The gate every sandboxed command starts behind, and the channel the runtime reports on.

The container's first process must have its stdout and stderr on the *report channel* (a FIFO
of the host) and the real stdout and stderr on fds 3 and 4. Where the runtime can be handed
those fds as they are (``crun run --preserve-fds 2``, started by a slot server that places
every fd), the container starts with them (``direct_command``). Elsewhere (Docker; a runtime
started with three pipes) it starts ``/bin/sh`` running ``ENTRY``, which moves fds 1 and 2 to
3 and 4 and points 1 and 2 at the channel, bound at ``REPORT_PATH`` (``entry_command``).

That first process is the init (tini, which with ``TINI_VERBOSITY=2`` says on its stdout
whether the command died of a signal), or, without an init, the gate itself. The gate blocks
until it reads one line on stdin: a fresh random token, the release. It then enters the
working directory, checks that the command exists, says so on the report channel tagged with
the token, and ``exec``s the command with stdout and stderr back on fds 1 and 2 (3 and 4
closed). The command's stdin, stdout and stderr are its own, byte for byte: nothing the
runtime says is ever cut out of (or glued into) what it printed.

Where the channel is bound at ``REPORT_PATH``, the command can write to it too (never read
it: the FIFO is write-only); where the runtime is handed it, nothing in the container can reach
it (tini runs from an execute-only file: its ``/proc/1/fd`` is closed to the command). Nothing
it can forge there makes a pass: a start failure counts only
with the token, which the command never sees (and would be an ``error``); a report of a
signal (or of none) only tells ``error`` from ``failed`` for an exit code above 128, and a
second exit line, or a flood, reads as a signal; a report the gate never gave (it never
released the command) is an ``error``.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from ..core.record import Record
from .base import Mount
from .init import INIT_PATH, init_binary

__all__ = [
    "INIT_ENV",
    "INIT_PATH",
    "REPORT_PATH",
    "Report",
    "ReportChannel",
    "direct_command",
    "entry_command",
    "init_binary",
    "read_report",
]

INIT_ENV = {"TINI_VERBOSITY": "2"}
REPORT_PATH = "/dev/gradebox-report"
"""Where the report FIFO is bound: in ``/dev``, a tmpfs of each container's own."""

GATE_CWD = "GRADEBOX_CWD"
# PID 1 until its exec: the runtime's reports go to the FIFO, the command's streams wait on 3
# and 4. A failed redirection ends the shell before any report: an `error` (never released).
ENTRY_SCRIPT = f'exec 3>&1 4>&2 >{REPORT_PATH} 2>&1\nexec "$@"'
# Blocks on one line of stdin (the release), then becomes the command. The line is a fresh
# token that only the runner and the gate know: the gate tags what it reports with it. `read`
# of the shell consumes stdin byte by byte up to the newline, so the command's own stdin
# follows intact.
GATE_SCRIPT = (
    "IFS= read -r t || exit 125\n"
    'say() { printf \'[gradebox:%s] %s\\n\' "$t" "$1"; }\n'
    'fail() { say "error $1"; exit 127; }\n'
    'cd "$GRADEBOX_CWD" 2>/dev/null || fail "cannot enter $GRADEBOX_CWD"\n'
    "unset GRADEBOX_CWD TINI_VERBOSITY\n"
    'case "$1" in\n'
    '  */*) [ -f "$1" ] && [ -x "$1" ] || fail "$1: no such executable file";;\n'
    '  *) command -v "$1" >/dev/null 2>&1 || fail "$1: command not found";;\n'
    "esac\n"
    'say exec; t=; exec "$@" >&3 2>&4 3>&- 4>&-'
)
_REPORT_HEAD = _REPORT_TAIL = 64 << 10
_READ_CHUNKS = 16  # 1 MiB a call, then the caller's deadline is checked
_FINAL_CHUNKS = 64  # past any pipe's buffer (fs.pipe-max-size: 1 MiB by default)
_TINI_EXIT = re.compile(rb"\[INFO  tini \(\d+\)\] Main child exited (normally|with signal)")


def direct_command(command: list[str], *, init: bool) -> list[str]:
    """The container's argv when the runtime starts it with the report channel as stdout and
    stderr and the real ones on fds 3 and 4: the init at ``INIT_PATH`` (``init``), the gate,
    the command. Set ``GRADEBOX_CWD`` (and ``INIT_ENV`` with the init) in its environment."""
    gate = ["/bin/sh", "-c", GATE_SCRIPT, "gradebox-gate", *command]
    return [INIT_PATH, "--", *gate] if init else gate


def entry_command(command: list[str], *, init: bool) -> list[str]:
    """``direct_command`` behind the entry, for a runtime started with the real stdout and
    stderr as its own: the entry puts them on 3 and 4 and the channel (at ``REPORT_PATH``)
    on 1 and 2."""
    return ["/bin/sh", "-c", ENTRY_SCRIPT, "gradebox-entry", *direct_command(command, init=init)]


class Report(Record):
    """What the gate and the init said about one run: ``started``, the gate released the
    command; ``start_error``, why it could not; ``signalled``, the init saw the command die
    of a signal (None: it did not say)."""

    __slots__ = _fields = ("started", "start_error", "signalled")
    _frozen = True


def read_report(data: bytes, token: str, dropped: bool = False) -> Report:
    """Read the report channel: lines tagged with ``token`` are the gate's, the exit line of
    tini is the init's; other lines (whatever a command wrote there) are ignored. tini says
    how the command ended once: where the channel holds more than one such line, or lost
    part of what was written (``dropped``: a flood that may have pushed tini's line out),
    the command wrote there, and the report is the worse outcome, a signal."""
    tag = f"[gradebox:{token}] ".encode()
    started, start_error, exits = False, None, []
    for line in data.split(b"\n"):
        if line.startswith(tag):
            said = line[len(tag) :]
            if said == b"exec":
                started = True
            elif said.startswith(b"error ") and start_error is None:
                start_error = said[6:].decode("utf-8", errors="replace")[:500]
            continue
        # Wherever it lands: a partial line (forged, or a flood's tail) may precede it.
        exits += [m.group(1) == b"with signal" for m in _TINI_EXIT.finditer(line)]
    signalled = True if dropped or len(exits) > 1 else exits[0] if exits else None
    return Report(started and start_error is None, start_error, signalled)


class ReportChannel:
    """The host's end of one container's report channel: a FIFO in a folder of the host.

    We hold a write end too, so the FIFO never reads as closed (a read waits for data, or
    finds none) whether or not the container has opened it yet. The FIFO is write-only for
    everyone (0222): nothing in the container can read, and so swallow, a report. What is
    kept is bounded: the head (the gate's lines come first) and the tail (the init's come
    last); a flood in between is read and dropped.
    """

    def __init__(self, folder: Path, *, own_folder: bool = False) -> None:
        self.folder, self.own_folder = folder, own_folder
        self.path = folder / "report"
        os.mkfifo(self.path, 0o600)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._writer = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.chmod(self.path, 0o222)
        self.head, self.tail = bytearray(), bytearray()
        self.dropped = False

    @property
    def mount(self) -> Mount:
        return Mount(self.path, REPORT_PATH, read_only=True)  # a FIFO stays writable

    def writer(self) -> int:
        """A blocking write end (close-on-exec) for a runtime handed the channel as its stdout
        and stderr (``direct_command``); the caller closes it once the runtime has its own."""
        return os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)  # we read: it opens at once

    def read(self, chunks: int = _READ_CHUNKS) -> bool:
        """Read what is there now, without waiting, in at most ``chunks`` reads; whether the
        channel was drained. Bounded: the channel is writable in the container, and a grader
        writing as fast as we read would hold an unbounded loop here, and its caller away
        from the deadline it checks between reads."""
        for _ in range(chunks):
            if self.fd < 0:
                return True
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:  # nothing there now (EAGAIN), or closed by another thread
                return True
            if not chunk:
                return True
            room = _REPORT_HEAD - len(self.head)
            self.head += chunk[:room]
            self.tail += chunk[room:] if room > 0 else chunk
            if len(self.tail) > _REPORT_TAIL:
                del self.tail[: len(self.tail) - _REPORT_TAIL]
                self.dropped = True
        return False

    def report(self, token: str) -> Report:
        # The command has ended: what is left is at most a pipe's buffer (1 MiB at the most
        # for a user). More still coming is a writer that outlived it: a flood, read as one.
        if not self.read(_FINAL_CHUNKS):
            self.dropped = True
        # A line cut where the dropped flood began must not join the head to the tail.
        data = bytes(self.head) + (b"\n" if self.dropped else b"") + bytes(self.tail)
        return read_report(data, token, self.dropped)

    def close(self) -> None:
        """Safe to call twice, and from another thread than the one reading."""
        fds, self.fd, self._writer = (self.fd, self._writer), -1, -1  # no read of a reused fd
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        if self.own_folder:
            with contextlib.suppress(OSError):
                os.rmdir(self.folder)
