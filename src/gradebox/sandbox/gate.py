"""The gate every sandboxed command starts behind, and what it and the init say.

A backend starts ``/bin/sh`` (under an init, tini, as PID 1) running the gate, with the command
as its arguments. The gate blocks until it reads one line on stdin: a fresh random token, the
release. It then enters the working directory, checks that the command exists, and ``exec``s
it, so the command's own stdin follows intact. Whatever can go wrong before the ``exec`` is
reported on stderr tagged with that token, which the command never sees: a grader cannot pass
off its own output as a failed start. tini, run with ``TINI_VERBOSITY=2``, says whether the
command died of a signal; those lines are cut out of the command's output.
"""

from __future__ import annotations

import re

__all__ = ["GATE", "GATE_CWD", "INIT_ENV", "own_lines"]

INIT_ENV = {"TINI_VERBOSITY": "2"}

GATE_CWD = "GRADEBOX_CWD"
# Blocks on one line of stdin (the release), then becomes the command. The line is a fresh
# token that only the runner and the gate know: the gate tags its own start failures with it,
# so a grader cannot pass off its own stderr as a failed start. `read` of the shell consumes
# stdin byte by byte up to the newline, so the command's own stdin follows intact.
GATE_SCRIPT = (
    "IFS= read -r t || exit 125\n"
    'say() { printf \'[gradebox:%s] %s\\n\' "$t" "$1" >&2; exit 127; }\n'
    'cd "$GRADEBOX_CWD" 2>/dev/null || say "cannot enter $GRADEBOX_CWD"\n'
    "unset GRADEBOX_CWD TINI_VERBOSITY\n"
    'case "$1" in\n'
    '  */*) [ -f "$1" ] && [ -x "$1" ] || say "$1: no such executable file";;\n'
    '  *) command -v "$1" >/dev/null 2>&1 || say "$1: command not found";;\n'
    "esac\n"
    't=; exec "$@"'
)
GATE = ["/bin/sh", "-c", GATE_SCRIPT, "gradebox-gate"]
_TINI_LINE = re.compile(rb"\[(?:TRACE|DEBUG|INFO|WARN|FATAL) +tini \(\d+\)\] ([^\n]*)\n?")


def own_lines(stream: bytes, token: str) -> tuple[bytes, str | None, bool | None]:
    """Split what the gate and the init said from the command's own output.

    tini writes its INFO lines to stdout (possibly in the middle of a line the command is
    writing) and its FATAL lines to stderr; both are cut out. Returns the command's output,
    the gate's start failure (if any), and whether the init saw the command die of a signal
    (None: it did not say)."""
    said: list[bytes] = []

    def cut(m: re.Match[bytes]) -> bytes:
        said.append(m.group(1))
        return b""

    stream = _TINI_LINE.sub(cut, stream)
    exits = [s for s in said if s.startswith(b"Main child exited")]
    signalled = exits[-1].startswith(b"Main child exited with signal") if exits else None
    tag = f"[gradebox:{token}] ".encode()
    kept, start_error = [], None
    for line in stream.splitlines(keepends=True):
        if line.startswith(tag):
            start_error = line[len(tag) :].rstrip(b"\r\n").decode("utf-8", errors="replace")
        else:
            kept.append(line)
    return b"".join(kept), start_error, signalled
