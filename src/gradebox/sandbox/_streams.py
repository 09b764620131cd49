"""Output caps shared by every backend: stdout keeps its head, stderr its tail."""

from __future__ import annotations

__all__ = ["CappedOutput"]


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
