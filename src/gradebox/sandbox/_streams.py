"""What every backend does with a command's streams: output caps (stdout keeps its head,
stderr its tail), the one loop that feeds stdin and drains the output, and the outcome."""

from __future__ import annotations

import contextlib
import os
import selectors
import time

from .base import RunOutcome

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from collections.abc import Callable

    from .gate import Report, ReportChannel

__all__ = ["CappedOutput", "outcome", "pump"]


class CappedOutput:
    """stdout keeps its head: it carries the verdict, and past the cap no verdict can be
    trusted, so the caller stops the command. stderr keeps its tail, the part that explains a
    failure, and draining it may go on."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.stdout_dropped = 0
        self.stderr_dropped = 0

    def head(self, chunk: bytes) -> None:
        room = max(self.cap - len(self.stdout), 0)
        self.stdout += chunk[:room]
        self.stdout_dropped += max(len(chunk) - room, 0)

    def tail(self, chunk: bytes) -> None:
        self.stderr += chunk
        if len(self.stderr) > self.cap:
            over = len(self.stderr) - self.cap
            del self.stderr[:over]
            self.stderr_dropped += over


def pump(
    stdin: int,
    data: bytes,
    close_stdin: Callable[[], object],
    readers: dict[int, Callable[[bytes], object]],
    out: CappedOutput,
    channel: ReportChannel,
    deadline: float,
    stop: Callable[[], bool] = lambda: False,
    watch: dict[int, Callable[[], object]] | None = None,
    send: Callable[[int, memoryview], int] = os.write,
    recv: Callable[[int, int], bytes] = os.read,
) -> tuple[bool, bool]:
    """Write ``data`` into the fd ``stdin`` (then ``close_stdin()``) and pass what each fd of
    ``readers`` gives to its call, concurrently and without threads, until every reader is
    closed, the deadline, ``out``'s stdout overflows, or ``stop()`` (the sandbox is closing).
    (timed out, overflowed). ``stdin`` may be a reader too (a socket, with its own ``send``
    and ``recv``). ``watch``: fds whose call is made once they can be read.

    Writing all of stdin before reading would deadlock against a command that fills its
    stdout before it reads its input. The report channel is drained as it fills, so no
    report ever blocks the init."""
    sel = selectors.DefaultSelector()
    events = dict.fromkeys(readers, selectors.EVENT_READ)
    events[stdin] = events.get(stdin, 0) | selectors.EVENT_WRITE
    for fd, mask in events.items():
        os.set_blocking(fd, False)
        sel.register(fd, mask)
    watch = watch or {}
    for fd in (channel.fd, *watch):
        sel.register(fd, selectors.EVENT_READ)
    pending = memoryview(data)
    open_reads = len(readers)
    try:
        while open_reads and not stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return True, False
            for key, mask in sel.select(timeout=min(left, 0.5)):
                fd = key.fd
                if fd == channel.fd:
                    channel.read()
                    continue
                if fd in watch:
                    sel.unregister(fd)
                    watch[fd]()
                    continue
                if mask & selectors.EVENT_WRITE:
                    try:
                        pending = pending[send(fd, pending[: 1 << 16]) :]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:  # the command exited without reading its stdin
                        pending = memoryview(b"")
                    if not pending:
                        _forget(sel, fd, selectors.EVENT_WRITE)
                        with contextlib.suppress(OSError):
                            close_stdin()
                if mask & selectors.EVENT_READ:
                    try:
                        chunk = recv(fd, 1 << 18)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        _forget(sel, fd, selectors.EVENT_READ)
                        open_reads -= 1
                        continue
                    readers[fd](chunk)
                    if out.stdout_dropped:
                        return False, True
        return False, False
    finally:
        sel.close()


def _forget(sel: selectors.BaseSelector, fd: int, event: int) -> None:
    """Stop waiting for ``event`` on ``fd`` (and for ``fd`` at all, if that was the last)."""
    left = sel.get_key(fd).events & ~event
    if left:
        sel.modify(fd, left)
    else:
        sel.unregister(fd)


def outcome(
    out: CappedOutput,
    report: Report,
    code: int | None,
    *,
    timed_out: bool,
    oom: bool,
    duration_ms: int,
    failed: Callable[[], str | None] = lambda: None,
) -> RunOutcome:
    """What a run came to, from the runtime's exit ``code``, the output kept and what the gate
    and the init said (``report``). A container that exited before its gate released the
    command failed to start: why, ``failed()`` says where the backend knows."""
    start_error = report.start_error
    if start_error is None and code and not report.started:
        start_error = failed() or (
            f"the sandbox never released the command (its container exited with code {code})"
        )
    return RunOutcome(
        exit_code=None if timed_out else code,
        stdout=bytes(out.stdout),
        stderr=bytes(out.stderr),
        stdout_dropped=out.stdout_dropped,
        stderr_dropped=out.stderr_dropped,
        timed_out=timed_out,
        oom_killed=oom,
        start_error=start_error,
        # The signal that killed the command, when the init saw one (tini exits 128 + it).
        signal=code - 128 if report.signalled and code is not None and code > 128 else None,
        duration_ms=duration_ms,
    )
