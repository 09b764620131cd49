"""The user's own cache folder, for what gradebox may trust because only this user can write it.

``cache_dir()`` is where every cache of gradebox lives (root filesystems, seccomp filters,
validated grader files). ``PrivateCache`` is one folder in it whose entries are trusted as
Python trusts its bytecode: whoever could change them could already run code as this user.
That holds only while nobody else can write them, so every read checks, on the descriptor it
reads: the folder is no link, is ours and writable by us alone (made 0700), and the entry is
a regular file, no link, ours, writable by us alone, and small. Anything else is a miss,
never an error: the caller does the work again. Entries are written whole or not at all
(``atomic``); a write that fails is a miss next time, never a failed command.

Standard library only: ``gradebox grade``'s lean path reads it.
"""

from __future__ import annotations

import atexit
import os
import pwd
import stat
from pathlib import Path

from ..errors import GradeboxError
from . import settings
from .log import LazyLogger
from .untrusted import private as _private
from .untrusted import unshared

log = LazyLogger("gradebox.cache")

__all__ = ["ENTRY_CAP", "PrivateCache", "cache_dir"]

ENTRY_CAP = 1 << 20  # no entry of ours comes near it: a larger file is not ours


def cache_dir() -> Path:
    """``$GRADEBOX_CACHE``, else ``$XDG_CACHE_HOME/gradebox``, else ``~/.cache/gradebox``:
    when no other local user can change it (``untrusted.unshared``), else, with a one-line
    warning naming it, this user's own ``~/.cache/gradebox``, else a fresh folder removed at
    exit. A shared machine's ``XDG_CACHE_HOME=/tmp/cache`` must not hand root a root
    filesystem, an init or a filter that another user planted (or swaps in after our check:
    the runtime opens them by name)."""
    own = settings.current()
    if own.cache:
        wanted = Path(own.cache)
    else:
        base = own.xdg_cache_home or os.path.join(os.path.expanduser("~"), ".cache")
        wanted = Path(base) / "gradebox"
    key = str(wanted)
    if key not in _chosen:
        _chosen[key] = _private_or_another(wanted)
    return _chosen[key]


_chosen: dict[str, Path] = {}  # asked once per process and folder: cache_dir() is on exec's path


def _private_or_another(wanted: Path) -> Path:
    why = _made_private(wanted)
    if why is None:
        return wanted

    home = Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".cache" / "gradebox"
    if home != wanted and _made_private(home) is None:
        chosen = home
    else:
        # lazy: tempfile and shutil (~6 ms) only for this fallback, off `gradebox exec`'s path
        import shutil
        import tempfile

        chosen = Path(tempfile.mkdtemp(prefix="gradebox-cache-"))
        atexit.register(shutil.rmtree, chosen, ignore_errors=True)
    log.warning("cache folder %s not used: %s; caching in %s", wanted, why, chosen)
    return chosen


def _made_private(folder: Path) -> str | None:
    """Why ``folder`` is no cache of ours, or None once it is (made 0700 when missing). A
    folder that cannot be made is not refused here: its caches fail as they did."""
    why = unshared(folder, missing_ok=True)
    if why is not None:
        return why
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return unshared(folder)  # again: a part made by another user while we made ours


class PrivateCache:
    """``read(name)`` and ``write(name, data)`` in ``cache_dir()/folder``.

    Example::

        cache = PrivateCache("graders")
        data = cache.read("3f2a...json")      # None: missing, or not to be trusted
        cache.write("3f2a...json", b"...")
    """

    def __init__(self, folder: str, root: Path | None = None) -> None:
        self.path = (root or cache_dir()) / folder

    def _open_folder(self, make: bool) -> int | None:
        """A descriptor of the folder when it is private (made 0700 when ``make``)."""
        if make:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                self.path.mkdir(mode=0o700)
            except FileExistsError:
                pass
            except OSError:
                return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        if not _private(os.fstat(fd)):  # another user's, or one others may write into
            os.close(fd)
            return None
        return fd

    def read(self, name: str) -> bytes | None:
        """The entry's bytes, or None: missing, or anything about it not private (see the
        module's docstring)."""
        folder = self._open_folder(make=False)
        if folder is None:
            return None
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=folder)
        except OSError:  # missing, or a link (O_NOFOLLOW)
            return None
        finally:
            os.close(folder)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _private(st) or st.st_size > ENTRY_CAP:
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(ENTRY_CAP + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if len(data) <= ENTRY_CAP else None

    def write(self, name: str, data: bytes) -> bool:
        """Write the entry whole (``atomic``), into a private folder only; False when it was
        not written (the folder is not private, the disk refused)."""
        folder = self._open_folder(make=True)
        if folder is None:
            return False
        os.close(folder)
        from .atomic import write_atomic  # lazy: only a write to the cache needs it, not exec

        try:
            write_atomic(self.path / name, data, what="cache folder")
        except GradeboxError:
            return False
        return True
