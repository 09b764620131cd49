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
import json
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .errors import ImageError
from .sandbox._engine import Engine, NotFound

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
    "ImageBuild",
    "ImageResolver",
    "Lock",
    "LockEntry",
    "lock_path",
    "read_lock",
    "verify",
    "write_lock",
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
    wanted = [n for n in (names or image_names()) if n != BASE]
    base, *images = status(engine, wanted)
    base_id = base.id
    if force or not base.up_to_date:
        base_id = bootstrap_base(engine, say)
        images = status(engine, wanted)[1:]  # a new base changes every image's inputs
    assert base_id is not None
    for st in images:
        if force or not st.up_to_date:
            build_image(engine, st.name, base_id, say)
        else:
            say(f"{st.ref} is up to date")
    return status(engine, wanted)


# ----------------------------------------------------------------------------------------------
# The lock: which image id each name must be.


class LockEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    base_id: str | None = None
    inputs: str | None = None


class Lock(BaseModel):
    """``images/images.lock.json``: name -> the image id that was built and reviewed."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    images: dict[str, LockEntry] = Field(default_factory=dict)


def lock_path(directory: Path | None = None) -> Path:
    return (directory or images_dir()) / "images.lock.json"


def read_lock(path: Path | None = None) -> Lock | None:
    path = path or lock_path()
    if not path.is_file():
        return None
    try:
        return Lock.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ImageError(f"{path}: not a valid lock file ({str(exc).splitlines()[0]})") from None


def write_lock(engine: Engine, path: Path | None = None) -> Lock:
    """Record every built image's id, base id and input hash. Refuses out-of-date images."""
    statuses = status(engine)
    stale = [s.name for s in statuses if not s.up_to_date]
    if stale:
        raise ImageError(
            f"cannot lock images that are missing or out of date: {', '.join(stale)}; "
            "run `gradebox images build` first"
        )
    base_id = statuses[0].id
    lock = Lock(
        images={
            s.name: LockEntry(
                id=str(s.id), base_id=None if s.name == BASE else base_id, inputs=s.inputs
            )
            for s in statuses
        }
    )
    path = path or lock_path()
    path.write_text(json.dumps(lock.model_dump(), indent=2, sort_keys=True) + "\n")
    return lock


def verify(engine: Engine, lock: Lock) -> dict[str, str | None]:
    """name -> None when the local image is the locked one, else what is wrong."""
    problems: dict[str, str | None] = {}
    for name, entry in sorted(lock.images.items()):
        iid, _, _ = _current(engine, name)
        if iid is None:
            problems[name] = "missing"
        elif iid != entry.id:
            problems[name] = f"is {iid[7:19]}, the lock says {entry.id[7:19]}"
        else:
            problems[name] = None
    return problems


# ----------------------------------------------------------------------------------------------
# Resolving what a grader names to the id its containers start from.


class ImageBuild(BaseModel):
    """``image: {build: ./graders/Dockerfile}``: a suite's or grader's own image."""

    model_config = ConfigDict(extra="forbid")

    build: str = Field(description="a Dockerfile, or a folder with one; relative to the file")
    context: str | None = Field(default=None, description="build context; default: its folder")


def _pinned(ref: str) -> bool:
    return "@sha256:" in ref or (ref.startswith("sha256:") and len(ref) == 71)


class ImageResolver:
    """Turns image references into immutable ids, once per run, and records what it used.

    Example::

        resolver = ImageResolver(engine, locked=True)
        image_id = resolver.resolve("python")          # checked against images.lock.json

    Locked mode (``--locked``, on by default when ``CI=true``): a name must be in the lock and
    the local image must be the locked one; a full reference must be pinned by digest. A
    Dockerfile build is pinned by the hash of its context.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        locked: bool = False,
        lock: Lock | None = None,
        say: Callable[[str], None] = log.info,
        build_network: bool = False,
    ) -> None:
        self.engine = engine
        self.locked = locked
        # A grader's own Dockerfile runs its RUN steps as root: without the network unless
        # whoever runs gradebox allowed it (`allow: [network]`, `--allow network`).
        self.build_network = build_network
        self._lock_file = lock
        self._cache: dict[str, str] = {}
        self._mutex = threading.Lock()
        self.builds = 0
        self.say = say

    @property
    def lock(self) -> Lock | None:
        if self._lock_file is None:
            self._lock_file = read_lock() if _has_images_dir() else None
        return self._lock_file

    def resolve(self, ref: str | ImageBuild, source_dir: Path | None = None) -> str:
        key = ref if isinstance(ref, str) else f"build:{(source_dir or Path.cwd()) / ref.build}"
        with self._mutex:
            if key not in self._cache:
                self._cache[key] = (
                    self._resolve_name(ref)
                    if isinstance(ref, str)
                    else self._build(ref, source_dir or Path.cwd())
                )
            return self._cache[key]

    def _resolve_name(self, ref: str) -> str:
        fix = f"`gradebox images build {ref}` then `gradebox images lock`"
        is_name = qualified(ref) != ref
        if self.locked and not is_name and not _pinned(ref):
            raise ImageError(
                f"image {ref!r} is not pinned; with --locked use a name from the "
                "lock file or a reference pinned by digest (name@sha256:...)"
            )
        try:
            iid = str(self.engine.image(qualified(ref))["Id"])
        except (NotFound, ImageError):
            if is_name:
                raise ImageError(
                    f"image {qualified(ref)} is not built on this engine; build it "
                    f"with `gradebox images build {ref}` (or `make images`)"
                ) from None
            raise ImageError(f"image {ref} is not on this engine (no registry is used)") from None
        if self.locked and is_name:
            entry = self.lock.images.get(ref) if self.lock else None
            if entry is None:
                raise ImageError(f"image {ref!r} is not in the lock file {lock_path()}; run {fix}")
            if entry.id != iid:
                raise ImageError(
                    f"image {qualified(ref)} is {iid[7:19]} but the lock says {entry.id[7:19]}: "
                    f"it was rebuilt or replaced; review it, then run {fix}"
                )
        return iid

    def _build(self, spec: ImageBuild, source_dir: Path) -> str:
        source_dir = source_dir.resolve()
        target = (source_dir / spec.build).resolve()
        dockerfile = target / "Dockerfile" if target.is_dir() else target
        context = (source_dir / spec.context).resolve() if spec.context else dockerfile.parent
        for key, path in (("image.build", dockerfile), ("image.context", context)):
            # The build context is sent to the engine whole: it must not reach past the
            # grader's own folder into the host's files.
            if path != source_dir and source_dir not in path.parents:
                raise ImageError(
                    f"{key}: {path} is outside the grader's folder {source_dir}; a build may "
                    "only use files next to the grader file"
                )
        if not dockerfile.is_file():
            raise ImageError(f"image.build: {dockerfile} does not exist")
        digest = input_hash(context, dockerfile.read_text(errors="replace"))
        tag = f"{REPO}-local/{digest[7:23]}:latest"
        try:
            info = self.engine.image(tag)
            if ((info.get("Config") or {}).get("Labels") or {}).get(LABEL_INPUTS) == digest:
                return str(info["Id"])
        except (NotFound, ImageError):
            pass
        self.say(f"building {dockerfile} (context {context})")
        for chunk in self.engine.build(
            path=str(context),
            dockerfile=str(dockerfile.relative_to(context))
            if dockerfile.is_relative_to(context)
            else str(dockerfile),
            tag=tag,
            labels={LABEL_INPUTS: digest},
            network_mode="bridge" if self.build_network else "none",
        ):
            if "error" in chunk:
                raise ImageError(f"building {dockerfile} failed: {chunk['error'].strip()}")
        self.builds += 1
        return str(self.engine.image(tag)["Id"])


def _has_images_dir() -> bool:
    try:
        images_dir()
    except ImageError:
        return False
    return True
