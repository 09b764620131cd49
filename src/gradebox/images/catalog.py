"""Names, folders and input hashes of the runtime images in ``images/``, and where their lock
is kept."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core import settings, untrusted
from ..core.log import LazyLogger
from ..core.pathnames import is_dir
from ..errors import ImageError

log = LazyLogger("gradebox.images")  # logging loads on first use: not on exec's path

REPO = "gradebox"
"""The default repository images are built under (``gradebox/python:latest``)."""
BASE = "base"
DEFAULT_IMAGE = "python"
TAG = "latest"
LABEL_INPUTS = "gradebox.inputs"
LABEL_IMAGE = "gradebox.image"


_HERE = Path(__file__).resolve()  # a name tests can point elsewhere

DEFINITIONS = "definitions"
"""The image folders in a built wheel: ``gradebox/images/definitions/`` (``setup.py`` copies
the repository's ``images/`` there; an editable install reads the checkout's)."""
LOCK_FILE = "images.lock.json"


def images_dir() -> Path:
    """Where the image folders are: $GRADEBOX_IMAGES_DIR (the operator's), else ``images/``
    of the checkout this module was loaded from (``<root>/src/gradebox/images/``, the root
    holding ``pyproject.toml``), else the definitions installed with this package (a wheel's
    package data). Never a folder found from the current folder or above the installed
    package: that would let a grader pack (or the project a virtualenv sits in) pin the short
    image names and their lock (docs/security.md, provenance).

    The folder decides what every grader runs on, so one another local user could change
    (``untrusted.unshared``: theirs, writable by others, sticky or not, below a folder of
    theirs or reached through a link of theirs) is an ``ImageError`` naming it; root's is
    the project's too (a checkout of root's that a docker-group user runs). The installed
    definitions are not asked: whoever can write them can write this code."""
    found = _own_images()
    if found is not None and not is_dir(found):
        raise ImageError(f"image definitions {found}: no such folder (GRADEBOX_IMAGES_DIR)")
    why = untrusted.unshared(found, root_may_own=True) if found is not None else None
    if why is not None:
        raise ImageError(
            f"image definitions {found}: another local user could change them ({why}); set "
            "GRADEBOX_IMAGES_DIR to a folder only you (or root) can write"
        )
    found = found or _packaged()
    if found is not None:
        return found
    raise ImageError(
        "cannot find the image definitions: this gradebox is neither run from its checkout "
        f"nor installed with gradebox/images/{DEFINITIONS}/ (reinstall it from a wheel); or "
        "set GRADEBOX_IMAGES_DIR to an images/ folder"
    )


def lock_dir() -> Path:
    """The folder of ``images.lock.json``: $GRADEBOX_IMAGES_DIR, else the checkout's
    ``images/`` (beside the definitions, as ever), else this user's data folder
    (``$XDG_DATA_HOME/gradebox``, else ``~/.local/share/gradebox``). Not beside an installed
    package's definitions: those are replaced on every upgrade, shared by every user of that
    install, and often not writable; image ids are this machine's engine's, so the lock is
    this machine's user's, and it is a reviewed record, kept apart from the caches that
    ``gc`` and a cleaned ``~/.cache`` drop. Standard library only: ``exec`` reads it."""
    base = settings.current().xdg_data_home or os.path.expanduser("~/.local/share")
    return _own_images() or Path(base) / "gradebox"


LOCK_CAP = 4 << 20  # bytes: a lock holds ~200 per image


def lock_bytes(path: Path | None = None) -> bytes | None:
    """The bytes of ``images.lock.json`` (``path``, else ``lock_dir()``'s); None when there is
    none. Every reader of the lock comes here (``lock.read_lock``, ``exec``'s lean read).

    The lock pins the image every grader runs on, and its folder may be one another local
    user can reach (``$GRADEBOX_IMAGES_DIR``, a data folder on a shared machine, where root
    runs gradebox): a lock they could have written or could swap (``untrusted.unshared_file``:
    theirs, a link, writable by their group, in or below a folder of theirs or one every
    user may write) is an ``ImageError`` naming it. Never ignored: a lock ignored unpins
    every image."""
    path = path or lock_dir() / LOCK_FILE
    if not os.path.lexists(path):
        return None
    why = untrusted.unshared_file(path)
    data = untrusted.read_within(path, LOCK_CAP, follow=False) if why is None else None
    if data is None:
        why = why or f"not a regular file of at most {LOCK_CAP >> 20} MiB"
        raise ImageError(
            f"image lock {path}: another local user could have written it ({why}); remove "
            "it and run `gradebox images lock`, or set GRADEBOX_IMAGES_DIR to a folder only "
            "you can write"
        )
    return data


def lock_folder(directory: Path) -> Path:
    """``directory``, made if missing, for ``images.lock.json`` to be written into: an
    ``ImageError`` naming it when another local user could change it
    (``untrusted.unshared``: theirs, writable by others, below a folder of theirs or reached
    through a link of theirs), asked before it is made and again after. The lock itself is
    written beside it and renamed over the name (``atomic.write_atomic``), never through a
    link left there."""
    _ours_alone(directory, missing_ok=True)
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise ImageError(f"image lock folder {directory}: {reason}") from None
    _ours_alone(directory)  # what was made, and what may have been there after all
    return directory


def _ours_alone(directory: Path, *, missing_ok: bool = False) -> None:
    why = untrusted.unshared(directory, missing_ok=missing_ok)
    if why is not None:
        raise ImageError(
            f"image lock folder {directory}: another local user could change it ({why}); "
            "set GRADEBOX_IMAGES_DIR to a folder only you can write"
        )


def _own_images() -> Path | None:
    """$GRADEBOX_IMAGES_DIR, else the checkout's ``images/``, else None."""
    if settings.current().images_dir:
        return Path(settings.current().images_dir)
    root = _checkout()
    return root / "images" if root is not None else None


def _checkout() -> Path | None:
    """The checkout this module runs from (an editable install too), or None."""
    package = _HERE.parent.parent  # .../gradebox
    root = package.parent.parent  # the checkout, when the package is its src/gradebox
    if (
        package.parent.name == "src"
        and (root / "pyproject.toml").is_file()
        and (root / "images" / BASE).is_dir()
    ):
        return root
    return None


def _packaged() -> Path | None:
    """The definitions shipped in this package, read through importlib.resources; None when
    absent (an editable install, or a build that left them out). A real folder is needed:
    the engine is sent each image's folder as its build context."""
    from importlib.resources import files  # here: only an installed gradebox needs it

    found = files(__package__) / DEFINITIONS
    return found if isinstance(found, Path) and (found / BASE).is_dir() else None


def image_names(directory: Path | None = None) -> list[str]:
    """Every image folder with a Dockerfile (the base is built by bootstrap, not listed)."""
    directory = directory or images_dir()
    return sorted(p.name for p in directory.iterdir() if (p / "Dockerfile").is_file())


# pip compiles every .py file of a wheel it installs, the image definitions' too (the sdk the
# python image carries): the installed folder then holds __pycache__/ that the checkout's has
# not. Neither an input nor build context: the same definitions hash the same wherever they are.
BUILT_BY_PYTHON = ("__pycache__", "*.pyc")


def _by_python(relative: Path) -> bool:
    return "__pycache__" in relative.parts or relative.suffix == ".pyc"


def repo() -> str:
    """``$GRADEBOX_IMAGE_REPO``, else ``gradebox``: the repository our images are built and
    looked up under, so two checkouts of different versions on one engine keep apart."""
    name = settings.current().image_repo or REPO
    if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*", name):
        raise ImageError(
            f"GRADEBOX_IMAGE_REPO={name!r} is not a repository name (a-z, 0-9, '.', '_', '-')"
        )
    return name


def qualified(name: str) -> str:
    """``python`` -> ``gradebox/python:latest``; a full reference is returned as it is."""
    if "/" in name or ":" in name or "@" in name:
        return name
    return f"{repo()}/{name}:{TAG}"


def input_hash(folder: Path, base_id: str) -> str:
    """sha256 over every file in ``folder`` (path and bytes) and the base image id; bytecode
    caches left out (``BUILT_BY_PYTHON``)."""
    import hashlib  # here: loading OpenSSL costs `exec`'s hot path ~4 ms, and only builds hash

    h = hashlib.sha256()
    h.update(base_id.encode())
    files = (p for p in folder.rglob("*") if p.is_file() and not _by_python(p.relative_to(folder)))
    for path in sorted(files):
        h.update(b"\0" + path.relative_to(folder).as_posix().encode() + b"\0")
        # Streamed, a regular file only: a grader's build context is the pack's (a sparse
        # 100 GiB file there was read whole into memory).
        if not untrusted.hash_regular(path, h, follow=True):
            h.update(b"\0<unreadable>")
    return "sha256:" + h.hexdigest()
