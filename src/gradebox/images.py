"""Runtime images: bootstrap a Debian base offline, build the images in ``images/``, resolve
names to immutable ids.

No registry is needed. The base is a Debian root filesystem made by ``debootstrap`` from the
mirror in the host's own apt configuration and imported into the engine; every runtime image
is a Dockerfile in ``images/NAME/`` built ``FROM`` that base (a build argument, so the same
file builds from an official base pinned by digest where a registry exists).

An image is up to date when its ``gradebox.inputs`` label equals the hash of its build inputs
(its folder's files and its base's id), so a changed Dockerfile is rebuilt and nothing else is.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import ImageError
from .sandbox._engine import Engine, NotFound
from .sandbox.base import Sandbox

__all__ = [
    "BASE",
    "DEFAULT_IMAGE",
    "ImageStatus",
    "apt_mirror",
    "build_images",
    "image_names",
    "images_dir",
    "input_hash",
    "qualified",
    "resolve_ref",
]

log = logging.getLogger("gradebox.images")

REPO = "gradebox"
BASE = "base"
DEFAULT_IMAGE = "python"
TAG = "latest"
LABEL_INPUTS = "gradebox.inputs"
LABEL_IMAGE = "gradebox.image"
BASE_PACKAGES = ["ca-certificates"]


def images_dir() -> Path:
    """Where the image folders are: $GRADEBOX_IMAGES_DIR, else ``images/`` of this checkout."""
    env = os.environ.get("GRADEBOX_IMAGES_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "images" / BASE).is_dir():
            return parent / "images"
    cwd = Path.cwd()
    for parent in (cwd, *cwd.parents):
        if (parent / "images" / BASE).is_dir():
            return parent / "images"
    raise ImageError("cannot find the images/ folder; set GRADEBOX_IMAGES_DIR to it")


def image_names(directory: Path | None = None) -> list[str]:
    """Every image folder with a Dockerfile (the base is built by bootstrap, not listed)."""
    directory = directory or images_dir()
    return sorted(p.name for p in directory.iterdir() if (p / "Dockerfile").is_file())


def qualified(name: str) -> str:
    """``python`` -> ``gradebox/python:latest``; a full reference is returned as it is."""
    if "/" in name or ":" in name or "@" in name:
        return name
    return f"{REPO}/{name}:{TAG}"


def resolve_ref(sandbox: Sandbox, ref: str) -> str:
    """An image name or reference -> the immutable id every container of a run starts from."""
    try:
        return sandbox.resolve_image(qualified(ref))
    except ImageError:
        name = ref if "/" not in ref else ref.split("/")[-1].split(":")[0]
        raise ImageError(
            f"image {qualified(ref)} is not built on this engine; build it with "
            f"`gradebox images build {name}` (or `make images`)"
        ) from None


@dataclass(frozen=True)
class Mirror:
    uri: str
    suite: str


def apt_mirror(root: Path = Path("/")) -> Mirror:
    """The Debian mirror and suite this machine's apt uses (deb822 ``.sources`` or
    ``sources.list``). $GRADEBOX_APT_MIRROR / $GRADEBOX_APT_SUITE override it."""
    entries: list[tuple[str, str]] = []
    sources_d = root / "etc/apt/sources.list.d"
    for path in sorted(sources_d.glob("*.sources")) if sources_d.is_dir() else []:
        for stanza in path.read_text(errors="replace").split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    for suite in fields.get("suites", "").split():
                        entries.append((uri, suite))
    classic = [root / "etc/apt/sources.list", *sorted(sources_d.glob("*.list"))]
    for path in classic:
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb":
                    entries.append((words[1], words[2]))
    main = [(u, s) for u, s in entries if "-" not in s and "/" not in s]
    uri = os.environ.get("GRADEBOX_APT_MIRROR")
    suite = os.environ.get("GRADEBOX_APT_SUITE")
    if main and not uri:
        uri = main[0][0]
    if main and not suite:
        suite = main[0][1]
    if not uri or not suite:
        raise ImageError(
            "no Debian mirror found in this machine's apt configuration "
            "(/etc/apt/sources.list*); set GRADEBOX_APT_MIRROR and GRADEBOX_APT_SUITE"
        )
    return Mirror(uri=uri.rstrip("/"), suite=suite)


def input_hash(folder: Path, base_id: str) -> str:
    """sha256 over every file in ``folder`` (path and bytes) and the base image id."""
    h = hashlib.sha256()
    h.update(base_id.encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(b"\0" + path.relative_to(folder).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return "sha256:" + h.hexdigest()


def _base_inputs(mirror: Mirror) -> str:
    spec = f"debootstrap minbase {mirror.suite} {mirror.uri} {' '.join(BASE_PACKAGES)}"
    return "sha256:" + hashlib.sha256(spec.encode()).hexdigest()


@dataclass
class ImageStatus:
    name: str
    ref: str
    id: str | None
    size: int | None
    inputs: str | None
    expected_inputs: str | None

    @property
    def up_to_date(self) -> bool:
        return self.id is not None and self.inputs == self.expected_inputs


def _current(engine: Engine, name: str) -> tuple[str | None, int | None, str | None]:
    try:
        info = engine.image(qualified(name))
    except (NotFound, ImageError):
        return None, None, None
    labels = (info.get("Config") or {}).get("Labels") or {}
    return str(info["Id"]), int(info.get("Size") or 0), labels.get(LABEL_INPUTS)


def status(engine: Engine, names: Iterable[str] | None = None) -> list[ImageStatus]:
    """What is built and whether it matches its inputs (the base first)."""
    folder = images_dir()
    mirror = apt_mirror()
    base_id, base_size, base_inputs = _current(engine, BASE)
    out = [
        ImageStatus(BASE, qualified(BASE), base_id, base_size, base_inputs, _base_inputs(mirror))
    ]
    for name in names or image_names(folder):
        iid, size, inputs = _current(engine, name)
        expected = input_hash(folder / name, base_id) if base_id else None
        out.append(ImageStatus(name, qualified(name), iid, size, inputs, expected))
    return out


def bootstrap_base(engine: Engine, say: Callable[[str], None] = log.info) -> str:
    """debootstrap a minimal Debian into a temp dir and import it as ``gradebox/base``."""
    mirror = apt_mirror()
    tool = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not Path(tool).exists():
        raise ImageError(
            "debootstrap is needed to build the base image without a registry: "
            "apt-get install debootstrap (or run `make images`, which installs it)"
        )
    if os.geteuid() != 0:
        raise ImageError("debootstrap needs root to build the base image; run as root")
    with tempfile.TemporaryDirectory(prefix="gradebox-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"bootstrapping Debian {mirror.suite} from {mirror.uri}")
        cmd = [
            tool,
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            mirror.suite,
            str(rootfs),
            mirror.uri,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise ImageError(f"debootstrap failed (exit {proc.returncode}):\n{tail}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / junk).glob("*"):
                if item.is_file():
                    item.unlink()
        tar_path = Path(tmp) / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:
            tar.add(rootfs, arcname=".")
        changes = [
            f"LABEL {LABEL_INPUTS}={_base_inputs(mirror)}",
            f"LABEL {LABEL_IMAGE}={BASE}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["/bin/bash"]',
        ]
        engine.import_image(str(tar_path), f"{REPO}/{BASE}", TAG, changes)
    return str(engine.image(qualified(BASE))["Id"])


def build_image(
    engine: Engine, name: str, base_id: str, say: Callable[[str], None] = log.info
) -> str:
    folder = images_dir() / name
    if not (folder / "Dockerfile").is_file():
        raise ImageError(f"no image named {name!r}: {folder}/Dockerfile does not exist")
    inputs = input_hash(folder, base_id)
    say(f"building {qualified(name)}")
    last = ""
    for chunk in engine.build(
        path=str(folder),
        tag=qualified(name),
        buildargs={"BASE": base_id},
        labels={LABEL_INPUTS: inputs, LABEL_IMAGE: name},
        network_mode="bridge",
    ):
        if "error" in chunk:
            raise ImageError(f"building {name} failed: {chunk['error'].strip()}\n{last}")
        if chunk.get("stream", "").strip():
            last = chunk["stream"].strip()
            log.debug("%s: %s", name, last)
    return str(engine.image(qualified(name))["Id"])


def build_images(
    engine: Engine,
    names: Iterable[str] | None = None,
    *,
    force: bool = False,
    say: Callable[[str], None] = log.info,
) -> list[ImageStatus]:
    """Build what is missing or out of date (by input hash); return the final status."""
    wanted = list(names) if names else image_names()
    current = {s.name: s for s in status(engine, wanted)}
    base = current[BASE]
    base_id = base.id
    if force or not base.up_to_date:
        base_id = bootstrap_base(engine, say)
    assert base_id is not None
    for name in wanted:
        if name == BASE:
            continue
        st = status(engine, [name])[1]
        if force or not st.up_to_date:
            build_image(engine, name, base_id, say)
        else:
            say(f"{qualified(name)} is up to date")
    return status(engine, [n for n in wanted if n != BASE])
