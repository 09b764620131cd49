"""Names, folders and input hashes of the runtime images in ``images/``."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .._log import LazyLogger
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


def images_dir() -> Path:
    """Where the image folders are: $GRADEBOX_IMAGES_DIR (the operator's), else ``images/``
    of the checkout this module was loaded from (``<root>/src/gradebox/images/``, the root
    holding ``pyproject.toml``). Never a folder found from the current folder or above the
    installed package: that would let a grader pack (or the project a virtualenv sits in)
    pin the short image names and their lock (docs/security.md, provenance)."""
    env = os.environ.get("GRADEBOX_IMAGES_DIR")
    if env:
        return Path(env)
    package = _HERE.parent.parent  # .../gradebox
    root = package.parent.parent  # the checkout, when the package is its src/gradebox
    if package.parent.name == "src" and (root / "pyproject.toml").is_file() and (
            root / "images" / BASE).is_dir():  # fmt: skip
        return root / "images"
    raise ImageError(
        "cannot find the images/ folder: this gradebox is not run from its checkout; set "
        "GRADEBOX_IMAGES_DIR to it"
    )


def image_names(directory: Path | None = None) -> list[str]:
    """Every image folder with a Dockerfile (the base is built by bootstrap, not listed)."""
    directory = directory or images_dir()
    return sorted(p.name for p in directory.iterdir() if (p / "Dockerfile").is_file())


def repo() -> str:
    """``$GRADEBOX_IMAGE_REPO``, else ``gradebox``: the repository our images are built and
    looked up under, so two checkouts of different versions on one engine keep apart."""
    name = os.environ.get("GRADEBOX_IMAGE_REPO", "").strip() or REPO
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
    """sha256 over every file in ``folder`` (path and bytes) and the base image id."""
    import hashlib  # here: loading OpenSSL costs `exec`'s hot path ~4 ms, and only builds hash

    h = hashlib.sha256()
    h.update(base_id.encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(b"\0" + path.relative_to(folder).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return "sha256:" + h.hexdigest()
