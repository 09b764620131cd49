"""The door for bytes others wrote: every host-side read of a file a suite, a grader pack, an
agent or another local user could have written goes through here.

Three rules, each written once:

- **Regular files only, no link followed out.** ``read_regular`` opens with ``O_NONBLOCK``
  and ``O_NOCTTY`` (a FIFO would block, a device's open can act: a link to ``/dev/ptmx`` or
  ``/dev/watchdog``), checks the descriptor it reads, and reads at most ``cap + 1`` bytes, so
  the caller tells "too large" from "fits" without reading the rest.
- **Trust needs an owner.** ``trusted`` is the rule for configuration and code found by
  walking up from a suite (``targets.yaml``, ``.env``, custom assertions, provider scripts):
  ours or root's, not a link, in a folder ours or root's that not every user may write
  (unless sticky, as ``/tmp`` is). ``private`` is the stricter rule for what gradebox caches:
  ours alone, writable by nobody else.
- **Bounded.** Every reader takes a cap in bytes; what is over it is refused, not truncated
  into something that parses.

Standard library only, and nothing of ours: ``gradebox exec`` and ``grade``'s lean path
import it on their hot path.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = [
    "TEXT_CAP",
    "open_append",
    "private",
    "read_file",
    "read_regular",
    "read_text",
    "read_within",
    "trusted",
    "unshared",
]


def read_regular(path: Path | str, cap: int, *, follow: bool = True) -> bytes | None:
    """At most ``cap + 1`` bytes of ``path`` if it is a regular file, else None (missing, a
    folder, a FIFO, a device, a socket; with ``follow=False``, also a link). Anything that is
    not a regular file is never opened for reading."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        st = os.stat(path) if follow else os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(cap + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_within(path: Path | str, cap: int, *, follow: bool = True) -> bytes | None:
    """``read_regular``, and None too when the file is over ``cap`` bytes."""
    data = read_regular(path, cap, follow=follow)
    return None if data is None or len(data) > cap else data


def private(st: os.stat_result) -> bool:
    """Ours, and writable by nobody else (group or world): the rule for a cache's folder and
    its entries, checked on the descriptor that is read."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def trusted(path: Path) -> bool:
    """Whether a file found by walking up from a suite (configuration, or code such as a
    custom assertion) is the project's to run or read: a regular file, not a link, owned by
    us or by root, that not every user may write, in a folder owned by us or by root that not
    every user may write (unless sticky, as ``/tmp`` is). The walk passes shared folders
    (``/tmp``, ``/home``): a ``/tmp/.gradebox/targets.yaml`` or ``/tmp/.env`` that another
    local user made is not the suite's project, nor is a link there to a file of ours (whose
    text the agent may have written), nor a file of ours in a folder of theirs (they could
    swap it between this check and its read)."""
    ours = (os.geteuid(), 0)
    try:
        st = os.lstat(path)
        link = os.lstat(path.parent)  # a link to a folder is as trusted as its maker
        folder = os.stat(path.parent)
    except OSError:
        return False
    return (
        link.st_uid in ours
        and stat.S_ISREG(st.st_mode)
        and st.st_uid in ours
        and not st.st_mode & 0o002
        and folder.st_uid in ours
        and (not folder.st_mode & 0o002 or bool(folder.st_mode & stat.S_ISVTX))
    )


def unshared(path: Path | str) -> str | None:
    """Why another local user could change what ``path`` names, or None when only we and
    root can: each folder on the way (links followed, each link ours or root's) is ours or
    root's and writable by nobody else (group-writable only with our own group, as a umask
    of 002 makes them; world-writable only when sticky, as ``/tmp`` is), and ``path`` itself,
    when there, is a folder of ours on the same terms, never sticky. A part not there yet
    ends the walk (the caller makes it, then asks again); a part that is no folder too
    (using it fails anyway).

    The rule for a cache whose entries are handed on by name (a root filesystem, the init a
    runtime binds): in a folder others can write, an entry checked now can be swapped before
    the runtime opens it."""
    ours = (os.geteuid(), 0)
    todo = [p for p in reversed(os.path.abspath(path).split("/")) if p]
    here, links = "/", 0
    while todo:
        name = todo.pop()
        if name in (".", ".."):
            here = here if name == "." else os.path.dirname(here)
            continue
        step = os.path.join(here, name)
        try:
            st = os.lstat(step)
        except OSError:  # not there (made next), or not a folder (using it fails)
            return None
        if st.st_uid not in ours:
            return f"{step} is owned by uid {st.st_uid}"
        if stat.S_ISLNK(st.st_mode):
            links += 1
            target = os.readlink(step)
            if links > 40:
                return f"{step}: too many links"
            here = "/" if target.startswith("/") else here
            todo.extend(p for p in reversed(target.split("/")) if p)
            continue
        if not stat.S_ISDIR(st.st_mode):
            return None
        own_group = st.st_uid == os.geteuid() and st.st_gid == os.getegid()
        shared = st.st_mode & 0o002 or (st.st_mode & 0o020 and not own_group)
        if not todo and st.st_uid != os.geteuid():
            return f"{step} is owned by uid {st.st_uid}, not by us"
        if shared and (not todo or not st.st_mode & stat.S_ISVTX):
            return f"{step} may be written by others (mode {stat.S_IMODE(st.st_mode):o})"
        here = step
    return None


def open_append(path: Path | str, mode: int = 0o644) -> int:
    """A descriptor to append to ``path`` (read and write, ``O_APPEND``, close-on-exec), the
    file made with ``mode`` when missing. Never through a link (``O_NOFOLLOW``: a link another
    user left under the name, dangling or not, is ``ELOOP`` and nothing is made, emptied or
    written where it points), and only a regular file of ours: a FIFO or another user's file
    planted under the name (in a folder they may write) is refused, ``EINVAL`` / ``EPERM``,
    and left as it was. Raises ``OSError``; the caller says which folder."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
    fd = os.open(path, flags | os.O_CLOEXEC, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"owned by uid {st.st_uid}, not by us", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


TEXT_CAP = 64 << 20  # a file a suite names (a prompt, cases, a CSV): the YAML loader's cap


def read_file(path: Path | str, cap: int = TEXT_CAP) -> bytes:
    """The bytes of a file a suite or a grader pack names (a prompt, cases, a CSV, records),
    as ``Path.read_bytes`` but bounded and never opening anything but a regular file (a FIFO
    there would hang the run, ``/dev/zero`` fill its memory). Raises ``OSError`` (missing,
    not a regular file, over ``cap``) as ``read_bytes`` does, so callers keep their one-line
    errors."""
    data = read_regular(path, cap)
    if data is None:
        if not os.path.lexists(path):
            raise FileNotFoundError(2, "no such file", str(path))
        raise OSError(22, "not a regular file", str(path))
    if len(data) > cap:
        raise OSError(27, f"over {cap >> 20} MiB", str(path))
    return data


def read_text(path: Path | str, cap: int = TEXT_CAP, *, encoding: str = "utf-8") -> str:
    """``read_file``, decoded (``UnicodeDecodeError`` as ``Path.read_text``)."""
    return read_file(path, cap).decode(encoding)


__all__ += ["OverCap", "decoded_within"]


class OverCap(ValueError):
    """More bytes than its cap came out of a bounded reader (``decoded_within``)."""


_INFLATE_STEP = 1 << 16  # bytes inflated at a time: what one step of a bomb may cost


def decoded_within(chunks: Iterable[bytes], encoding: str, cap: int) -> Iterator[bytes]:
    """The bytes of a body sent with Content-Encoding ``encoding`` (``identity``, ``gzip``, or
    ``deflate``, zlib-wrapped or raw), decoded as the chunks stream in; ``OverCap`` as soon as
    more than ``cap`` decoded bytes came out. Inflating goes ``_INFLATE_STEP`` bytes at a
    time, so 600 KB of gzip that inflates to 600 MiB costs ``cap`` bytes, not 600 MiB (the
    usual decoders inflate a whole network chunk at once: 64 KB of it is 64 MiB). Any other
    encoding (``br``, ``zstd``, a list of several) or a corrupt stream is a ``ValueError``
    naming it: refused, never passed on undecoded."""
    name = encoding.strip().lower()
    if name not in ("", "identity", "gzip", "x-gzip", "deflate"):
        raise ValueError(f"Content-Encoding {encoding!r} is none of identity, gzip, deflate")
    inflate = _inflater(name, chunks) if name not in ("", "identity") else iter(chunks)
    total = 0
    for piece in inflate:
        total += len(piece)
        if total > cap:
            raise OverCap(f"over {cap} bytes decoded")
        yield piece


def _inflater(name: str, chunks: Iterable[bytes]) -> Iterator[bytes]:
    import zlib

    stream, head = None, b""
    try:
        for chunk in chunks:
            if stream is None:
                head += chunk
                if name == "deflate" and len(head) < 2:
                    continue
                # HTTP's "deflate" is zlib-wrapped, but servers send raw deflate too: a zlib
                # header is 8 in the low nibble and a multiple of 31 over its two bytes.
                wrapped = head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
                bits = 16 + zlib.MAX_WBITS if name != "deflate" else zlib.MAX_WBITS
                stream = zlib.decompressobj(bits if name != "deflate" or wrapped else -15)
                chunk, head = head, b""
            while True:
                out = stream.decompress(chunk, _INFLATE_STEP)
                if out:
                    yield out
                chunk = stream.unconsumed_tail
                if not chunk and len(out) < _INFLATE_STEP:
                    break
    except zlib.error as exc:
        raise ValueError(f"the {name} stream is corrupt ({exc})") from None


def open_regular(path: Path | str, *, follow: bool = True) -> int | None:
    """A descriptor to read ``path`` (``O_RDONLY``, close-on-exec) if it is a regular file,
    else None: missing, a folder, a FIFO (which would block the open), a device (whose open
    can act, and which reads without end), a socket; with ``follow=False``, a link. For a
    reader that seeks or reads in pieces (``read_regular`` reads from the start); the caller
    closes it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        st = os.stat(path) if follow else os.lstat(path)
        if not stat.S_ISREG(st.st_mode):  # never opened: a device's open can act
            return None
        fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)  # swapped since the stat
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return None
    return fd


__all__ += ["open_regular"]
