"""The door for bytes others wrote: every host-side read of a file a suite, a grader pack, an
agent or another local user could have written goes through here.

Its rules, each written once (docs/security.md, "The door for bytes others wrote"):

- **Regular files only, no link followed out.** ``read_regular`` opens with ``O_NONBLOCK``
  and ``O_NOCTTY`` (a FIFO would block, a device's open can act: a link to ``/dev/ptmx`` or
  ``/dev/watchdog``), checks the descriptor it reads, and reads at most ``cap + 1`` bytes, so
  the caller tells "too large" from "fits" without reading the rest.
- **Trust needs an owner.** ``unshared`` walks every folder on the way to a path, once for
  every caller: ours or root's, writable by nobody else (unless sticky, as ``/tmp`` is).
  ``trusted`` is the rule for configuration and code found by walking up from a suite
  (``targets.yaml``, ``.env``, custom assertions, provider scripts): ours or root's, not a
  link, on such a way. ``private`` is the stricter rule for what gradebox caches: ours
  alone, writable by nobody else.
- **Bounded.** Every reader takes a cap in bytes; what is over it is refused, not truncated
  into something that parses (``decoded_within``: a model's reply, counted as it inflates).
- **A folder mounted or copied for a grader** is looked through once (``look_through``):
  anything but regular files, folders and links inside is refused by name, and what holds
  keys (``secret_name``: every ``.env``, a repository's configs, at any depth) is masked.

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
    "decoded_within",
    "file_kind",
    "hash_regular",
    "Holdings",
    "look_through",
    "open_append",
    "open_regular",
    "OverCap",
    "private",
    "read_file",
    "read_regular",
    "read_text",
    "read_within",
    "Refused",
    "secret_name",
    "TooMany",
    "trusted",
    "unshared",
    "unshared_file",
    "unshared_tree",
]


def read_regular(path: Path | str, cap: int, *, follow: bool = True) -> bytes | None:
    """At most ``cap + 1`` bytes of ``path`` if it is a regular file, else None (missing, a
    folder, a FIFO, a device, a socket; with ``follow=False``, also a link). Anything that is
    not a regular file is never opened for reading."""
    fd = open_regular(path, follow=follow)
    if fd is None:
        return None
    try:
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
    custom assertion) is the project's to run or read: ``unshared_file`` finds no reason
    another local user could have written it. The walk passes shared folders (``/tmp``,
    ``/home``): a ``/tmp/.gradebox/targets.yaml`` or ``/tmp/.env`` that another local user
    made is not the suite's project, nor is a link there to a file of ours (whose text the
    agent may have written), nor a file of ours in a folder of theirs or below one (they
    could swap it, or rename a folder on its way, between this check and its read)."""
    return unshared_file(path) is None


def unshared(
    path: Path | str, *, root_may_own: bool = False, missing_ok: bool = False
) -> str | None:
    """Why another local user could change what ``path`` names, or None when only we and
    root can: each folder on the way (links followed, each link ours or root's; ``..`` taken
    where the links led, as the kernel takes it) is ours or root's and writable by nobody
    else (group-writable only with our own group, as a umask of 002 makes them;
    world-writable only when sticky, as ``/tmp`` is: only its owner renames what is in it),
    and ``path`` itself, when there, is on the same terms, never sticky (anyone may add to a
    sticky folder): a folder of ours (``root_may_own``: or root's, a folder we only read
    from), or a file of ours or root's (``unshared_file`` adds what a file must be). A part
    on the way that is no folder ends the walk (using it fails anyway). A part not there is
    a reason: the caller found it (or made it), so it went while walked, as another user's
    folder does that they rename away and back to pass this walk and be read after it;
    ``missing_ok``, asked before it is made: a part not there yet ends the walk (the caller
    makes it, then asks again).

    The rule for a cache whose entries are handed on by name (a root filesystem, the init a
    runtime binds): in a folder others can write, an entry checked now can be swapped before
    the runtime opens it. And for a file we trust: whoever may rename a folder on its way
    can put a file of theirs at its name."""
    ours = (os.geteuid(), 0)
    path = os.fspath(path)
    path = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    todo = [p for p in reversed(path.split("/")) if p]
    here, links = "/", 0
    while todo:
        name = todo.pop()
        if name in (".", ".."):
            here = here if name == "." else os.path.dirname(here)
            if not todo:  # it ends where it stands: walked again, to be checked as the end
                todo, here = [p for p in reversed(here.split("/")) if p], "/"
            continue
        step = os.path.join(here, name)
        try:
            st = os.lstat(step)
        except OSError as exc:  # not there: made next, or taken away while we look
            return None if missing_ok else f"{step}: {(exc.strerror or str(exc)).lower()}"
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
        folder = stat.S_ISDIR(st.st_mode)
        if todo and not folder:  # using it fails
            return None
        own_group = st.st_uid == os.geteuid() and st.st_gid == os.getegid()
        shared = st.st_mode & 0o002 or (st.st_mode & 0o020 and not own_group)
        if not todo and folder and st.st_uid != os.geteuid() and not root_may_own:
            return f"{step} is owned by uid {st.st_uid}, not by us"
        if shared and (not todo or not st.st_mode & stat.S_ISVTX):
            return f"{step} may be written by others (mode {stat.S_IMODE(st.st_mode):o})"
        here = step
    return None


def unshared_tree(folder: Path | str, limit: int) -> str | None:
    """``unshared`` (``root_may_own``: a tree we only read from) for ``folder`` and for
    everything below it, links followed as a copy of it follows them (each link ours or
    root's, and what it leads to asked as ``unshared`` asks it); why not, naming the path
    (and the entry that led there), or None. More than ``limit`` entries (a link loop too)
    is a reason: the walk is bounded."""
    seen, why = 0, unshared(folder, root_may_own=True)
    if why is not None:
        return why
    todo = [os.fspath(folder)]  # a stack, not os.walk: that recurses on Python 3.11
    while todo:
        try:
            with os.scandir(todo.pop()) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:  # passed over, as os.walk does: the copy fails on it too
            continue
        seen += len(entries)
        if seen > limit:
            return f"{folder} holds more than {limit} entries"
        for entry in entries:  # each asked before it is listed
            why = unshared(entry.path, root_may_own=True)
            if why is not None:  # reached through a link, it names where that led
                return why if why.startswith(entry.path) else f"{entry.path}: {why}"
            if entry.is_dir():  # a link to a folder too: followed
                todo.append(entry.path)
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
    import zlib  # lazy: only a compressed entry needs it; off grade's lean path

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


# -- a grader's folders: what may be hashed, copied or mounted for it -------------------------


def secret_name(name: str) -> bool:
    """``.env`` or ``.env.*``, in any case: a file of keys, never mounted, copied or hashed
    for a grader (in a case-folding folder, ext4's ``+F``, macOS's, ``.ENV`` is what
    opening ``.env`` reads)."""
    name = name.casefold()
    return name == ".env" or name.startswith(".env.")


class Refused(ValueError):
    """``look_through`` met what is never hashed, copied or mounted: ``entry`` (its path
    below the folder looked through) ``why`` (the rest of the one line)."""

    def __init__(self, entry: str, why: str) -> None:
        super().__init__(f"{entry} {why}")
        self.entry, self.why = entry, why


class TooMany(ValueError):
    """``look_through``'s folder holds more entries than it may look at."""


class Holdings:
    """What ``look_through`` found to keep from a grader, as paths below the folder:
    ``masked`` files and ``masked_folders`` to cover with an empty one where the folder is
    mounted, and ``secrets``, each ``.env`` and repository (a ``.git`` folder) at any depth
    (a folder that is copied or hashed is refused when it holds one)."""

    __slots__ = ("masked", "masked_folders", "secrets")

    def __init__(self) -> None:
        self.masked: set[str] = set()
        self.masked_folders: set[str] = set()
        self.secrets: list[str] = []


_GIT_KEYS = ("config", "config.worktree")  # where a clone keeps what it was given (CI's token)
_ONLY = "only regular files and folders are given to a grader"


def file_kind(mode: int) -> str | None:
    """None for a regular file or a folder (an ``st_mode``), else what it is, in words."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def look_through(folder: Path | str, limit: int, *, links_out: bool = True) -> Holdings:
    """The one rule for a folder hashed, copied or mounted for a grader (a grader script's own
    folder, a helper folder, ``exec``'s current folder), walked by descriptor without
    following a link (``fstree``, standard library only as this module is).

    Refused (``Refused``, naming the entry): anything but a regular file, a folder or a link
    (a FIFO hangs a reader, a device's open acts: ``/dev/ptmx``, ``/dev/watchdog``); a link
    whose target on this host is neither; with ``links_out`` false (a folder that is copied
    or hashed), a link that leads out of ``folder``. Inside a mounted folder a link out is
    resolved in the container, never here, so it reaches no file of the host.

    Masked, at any depth: each ``.env``/``.env.*`` (a folder of that name whole); in each
    ``.git`` folder, every ``config`` and ``config.worktree`` (its own, ``worktrees/*/``,
    ``modules/**/``: submodules nest); a submodule's ``.git`` file; a link of those names
    inside ``folder``: what it points to. A repository's objects are not looked through.
    ``TooMany`` past ``limit`` entries."""
    from .fstree import walk_folders  # lazy: ~1 ms off grade's lean path, for this walk only

    root = os.path.realpath(folder)
    held = Holdings()
    seen = 0
    # A file of several names (hard links) is as secret as its secret name: each name masked.
    by_inode: dict[tuple[int, int], list[str]] = {}
    secret_files: set[tuple[int, int]] = set()
    walk = walk_folders(root, strict=False)  # a folder it cannot open: nor can a grader
    try:
        for entering, here in walk:
            if not entering:
                continue
            rel, in_git = ("", False) if here.parent is None else here.parent.data
            if here.parent is not None:
                name = os.fsdecode(here.name)
                rel, in_git = f"{rel}{name}/", in_git or name == ".git"
            here.data = (rel, in_git)
            seen += len(here.entries)
            if seen > limit:
                raise TooMany(f"more than {limit} entries")
            names = {os.fsdecode(n) for n, _ in here.entries}
            for raw, st in here.entries:
                name = os.fsdecode(raw)
                path = rel + name
                target = _link_target(root, path, st, links_out)
                keep = target if target is not None else path
                is_dir = (
                    stat.S_ISDIR(st.st_mode)
                    if target is None
                    else os.path.isdir(os.path.join(root, target))
                )
                if stat.S_ISLNK(st.st_mode) and target is None:
                    continue  # out of the folder, or nothing: resolved in the container
                inode = (st.st_dev, st.st_ino)
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    by_inode.setdefault(inode, []).append(path)
                if secret_name(name) or (name == ".git" and not in_git):
                    if is_dir or name != ".git":  # a submodule's .git file: a pointer, masked
                        held.secrets.append(path)
                    if is_dir and (secret_name(name) or target is not None):
                        held.masked_folders.add(keep)  # whole: nothing in it is looked at
                        _prune(here, raw)
                    elif not is_dir:
                        held.masked.add(keep)
                        secret_files.add(inode)
                elif in_git and name in _GIT_KEYS and not is_dir:
                    held.masked.add(keep)
                elif in_git and name == "objects" and "HEAD" in names:
                    _prune(here, raw)
    finally:
        walk.close()
    for inode in secret_files:
        for path in by_inode.get(inode, ()):
            if path not in held.masked:
                held.masked.add(path)
                held.secrets.append(path)
    return held


def _prune(here: object, name: bytes) -> None:
    subdirs = here.subdirs  # type: ignore[attr-defined]
    if name in subdirs:
        subdirs.remove(name)


def _link_target(root: str, path: str, st: os.stat_result, links_out: bool) -> str | None:
    """For a link, the path below ``root`` of the regular file or folder it leads to (None:
    out of ``root``, or nothing there); ``Refused`` when it leads to anything else, or
    (``links_out`` false) out of ``root``. None for what is not a link; ``Refused`` for a
    FIFO, a socket or a device itself."""
    kind = file_kind(st.st_mode)
    if kind is None:
        return None
    if kind != "a link":
        raise Refused(path, f"is {kind}: {_ONLY}")
    lead = os.path.realpath(os.path.join(root, path))
    inside = lead == root or lead.startswith(root + os.sep)
    try:
        kind = file_kind(os.lstat(lead).st_mode)
    except OSError:
        kind = None  # nothing there (here): what the container sees there is its own
    if kind == "a link":  # a loop: it leads nowhere
        kind = None
    if kind is not None:
        raise Refused(path, f"is a link to {lead}, {kind}: {_ONLY}")
    if not inside and not links_out:
        why = "a folder that is copied or hashed holds only what is in it"
        raise Refused(path, f"is a link out of its folder (to {lead}): {why}")
    return os.path.relpath(lead, root) if inside and os.path.lexists(lead) else None


def hash_regular(
    name: Path | str | bytes, h: object, *, dir_fd: int | None = None, follow: bool = False
) -> bool:
    """Feed the bytes of ``name`` (relative to ``dir_fd``) to ``h`` (a ``hashlib`` object)
    if it is a regular file; False, and nothing read, for anything else (a link unless
    ``follow``; a FIFO or a device is never opened for reading: no hang, no device acting)."""
    fd = open_regular(name, follow=follow, dir_fd=dir_fd)
    if fd is None:
        return False
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)  # type: ignore[attr-defined]
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def open_regular(
    path: Path | str | bytes, *, follow: bool = True, dir_fd: int | None = None
) -> int | None:
    """A descriptor to read ``path`` (``O_RDONLY``, close-on-exec; relative to ``dir_fd``)
    if it is a regular file, else None: missing, a folder, a FIFO (which would block the
    open), a device (whose open can act, and which reads without end), a socket; with
    ``follow=False``, a link. The file is checked again on the descriptor (it may have been
    swapped since the first look). The caller closes it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow)
        if not stat.S_ISREG(st.st_mode):  # never opened: a device's open can act
            return None
        fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW, dir_fd=dir_fd)
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


def unshared_file(path: Path) -> str | None:
    """Why another local user could have written the file ``path``, or could swap it, in
    words; None when only we and root could: a regular file, not a link, that ``unshared``
    finds ours or root's, writable by no other user (by our own group only: a umask of 002
    makes ours writable by it), and every folder on its way such that no other user may
    rename it (its own folder may be root's, and world-writable when sticky, as ``/tmp`` is).
    Missing is a reason too: the caller asks ``os.path.lexists`` first when "none" is an
    answer.

    The one rule for configuration and code found by name (``trusted``) and for a record
    that decides what runs (the image lock pins the image every grader runs on)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    if stat.S_ISLNK(st.st_mode):
        return "it is a link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    return unshared(path)
