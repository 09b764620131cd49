"""Building the images: debootstrap the base from the machine's mirror, then each Dockerfile
in ``images/`` ``FROM`` it; what is built and whether it matches its inputs."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..core import subids as userns
from ..core import untrusted
from ..core.scratch import scratch_folder
from ..engine import Engine, NotFound
from ..errors import ImageError
from .apt import BASE_PACKAGES, _base_inputs, apt_mirror
from .catalog import (
    BASE,
    BUILT_BY_PYTHON,
    LABEL_IMAGE,
    LABEL_INPUTS,
    TAG,
    image_names,
    images_dir,
    input_hash,
    qualified,
    repo,
)

log = logging.getLogger("gradebox.images")


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
    base_id, base_size, base_inputs = _current(engine, BASE)
    try:
        expected_base = _base_inputs(apt_mirror())
    except ImageError:
        # No Debian apt configuration here (another distribution, a CI image): the base can
        # be neither rebuilt nor checked, so what is built stands.
        expected_base = base_inputs
    out = [ImageStatus(BASE, qualified(BASE), base_id, base_size, base_inputs, expected_base)]
    for name in names or image_names(folder):
        iid, size, inputs = _current(engine, name)
        expected = input_hash(folder / name, base_id) if base_id else None
        out.append(ImageStatus(name, qualified(name), iid, size, inputs, expected))
    return out


def bootstrap_base(engine: Engine, say: Callable[[str], None] = log.info) -> str:
    """Bootstrap a minimal Debian from the machine's mirror and import it as ``gradebox/base``:
    debootstrap as root (as ever), else mmdebstrap in its ``unshare`` mode, which builds as
    root of a user namespace of the user's subordinate ids: no root needed."""
    mirror = apt_mirror()
    root = os.geteuid() == 0
    unusable = bootstrap_unusable()
    if unusable:
        why, fix = unusable
        if root:
            raise ImageError(f"{why}: {fix} (or run `make images`, which installs it)")
        raise ImageError(f"{why}; once, as root: {fix}")
    with scratch_folder("rootfs") as tmp:
        tar_path = Path(tmp) / "rootfs.tar"
        if root:
            say(f"bootstrapping Debian {mirror.suite} from {mirror.uri}")
            rootfs = Path(tmp) / "rootfs"
            _bootstrap_tool(
                _debootstrap(),
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                mirror.suite,
                str(rootfs),
                mirror.uri,
            )
            for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for item in (rootfs / junk).glob("*"):
                    if item.is_file():
                        item.unlink()
            with tarfile.open(tar_path, "w") as tar:
                tar.add(rootfs, arcname=".")
        else:
            say(f"bootstrapping Debian {mirror.suite} from {mirror.uri} (mmdebstrap, unshare)")
            tool = shutil.which("mmdebstrap")
            assert tool is not None
            _bootstrap_tool(
                tool,
                "--mode=unshare",
                "--variant=minbase",
                "--quiet",
                f"--include={','.join(BASE_PACKAGES)}",
                # As debootstrap leaves it: no package lists, no downloaded packages.
                "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/var/cache/apt/archives/*.deb",
                mirror.suite,
                str(tar_path),
                mirror.uri,
            )
        changes = [
            f"LABEL {LABEL_INPUTS}={_base_inputs(mirror)}",
            f"LABEL {LABEL_IMAGE}={BASE}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["/bin/bash"]',
        ]
        engine.import_image(str(tar_path), f"{repo()}/{BASE}", TAG, changes)
    return str(engine.image(qualified(BASE))["Id"])


def _bootstrap_tool(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        name = Path(cmd[0]).name
        raise ImageError(f"{name} failed (exit {proc.returncode}):\n{tail}")


def _debootstrap() -> str:
    return shutil.which("debootstrap") or "/usr/sbin/debootstrap"  # root's PATH may lack sbin


def bootstrap_unusable() -> tuple[str, str] | None:
    """Why this user cannot bootstrap the base image here, and the one line that fixes it;
    None: it can. As root debootstrap; anyone else mmdebstrap in a user namespace of their
    subordinate ids (``gradebox doctor`` asks this too)."""
    if os.geteuid() == 0:
        if not Path(_debootstrap()).exists():
            why = "debootstrap is needed to build the base image without a registry"
            return why, "apt-get install debootstrap"
        return None
    why = "no mmdebstrap" if shutil.which("mmdebstrap") is None else userns.missing()
    if why:
        return (
            f"building the base image without root needs mmdebstrap and subordinate ids ({why})",
            userns.prerequisite(),
        )
    return None


PYPI_LOCK = "pypi.lock"
IMAGE_ENTRIES = 1000  # an image's folder holds ~10: a bound on the walk, not a size


def fetch_wheels(lock: Path, dest: Path) -> None:
    """Download the wheels ``lock`` pins (requirements with ``--hash``) into ``dest``, on the
    host, with pip: it uses the machine's own index and CA configuration, and refuses any
    file whose hash differs. The image build then copies them, reaching no registry."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "-r",
            str(lock),
            "-d",
            str(dest),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise ImageError(f"fetching the wheels {lock} pins failed:\n{tail}")


def build_image(
    engine: Engine, name: str, base_id: str, say: Callable[[str], None] = log.info
) -> str:
    folder = images_dir() / name
    if not (folder / "Dockerfile").is_file():
        raise ImageError(f"no image named {name!r}: {folder}/Dockerfile does not exist")
    # What is built is what every grader runs on (and `images lock` pins next): the image's
    # folder and all the copy below reads, links' targets too, ours or root's alone, as
    # images_dir() asks of the catalogue's own folder.
    why = untrusted.unshared_tree(folder, IMAGE_ENTRIES)
    if why is not None:
        raise ImageError(
            f"image {name} ({folder}): another local user could change what it is built "
            f"from ({why}); make it yours (or root's) and writable only by you"
        )
    inputs = input_hash(folder, base_id)
    say(f"building {qualified(name)}")
    last = ""
    with scratch_folder("build") as tmp:
        # Always a copy: links followed (the sdk is a link into src/), bytecode caches left out
        # (an installed gradebox's definitions have them), the wheels added beside.
        context = Path(tmp) / "context"
        shutil.copytree(folder, context, ignore=shutil.ignore_patterns(*BUILT_BY_PYTHON))
        if (folder / PYPI_LOCK).is_file():
            fetch_wheels(folder / PYPI_LOCK, context / "wheels")
        for chunk in engine.build(
            path=str(context),
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
