"""Resolving what a grader names to the id its containers start from (lock-aware, with
Dockerfile builds cached by their context's hash)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..core import untrusted
from ..engine import Engine, NotFound
from ..errors import ImageError
from .catalog import LABEL_INPUTS, input_hash, qualified, repo
from .lock import Lock, lock_path, read_lock

log = logging.getLogger("gradebox.images")


CONTEXT_SCAN_LIMIT = 100_000  # entries of a build context looked through for keys


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
        build: bool = False,
    ) -> None:
        self.engine = engine
        self.locked = locked
        # A grader's own Dockerfile runs its RUN steps as root with capabilities: only when
        # whoever runs gradebox allowed it (`allow: [build]`, `--allow build`), and without
        # the network unless that was allowed too (`--allow network`). The plan refuses it
        # first, naming the file and field; this is the last word for every other caller.
        self.build = build
        self.build_network = build_network
        self._lock_file = lock
        self._cache: dict[str, str] = {}
        self._mutex = threading.Lock()
        self.builds = 0
        self.say = say

    @property
    def lock(self) -> Lock | None:
        if self._lock_file is None:
            self._lock_file = read_lock()
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
        if not self.build:
            raise ImageError(
                f"image.build: {dockerfile}: building a grader's own Dockerfile runs its RUN "
                "steps as root with capabilities; allow it with `allow: [build]` in the suite "
                "or --allow build"
            )
        if not dockerfile.is_file():
            raise ImageError(f"image.build: {dockerfile} does not exist")
        # The context is sent to the engine whole, and `COPY .` bakes what it holds into an
        # image every grader on it reads: a .env there (or a name of one) never goes.
        try:
            held = untrusted.look_through(context, CONTEXT_SCAN_LIMIT)
        except (untrusted.Refused, untrusted.TooMany) as exc:
            raise ImageError(f"image.context: {context}: {exc}") from None
        keys = [s for s in held.secrets if ".git" not in s.split("/")]
        if keys:
            raise ImageError(
                f"image.context: {context} holds {keys[0]}: keys are never sent to a build "
                "(move the Dockerfile's context to a folder without it)"
            )
        digest = input_hash(context, untrusted.read_file(dockerfile).decode(errors="replace"))
        tag = f"{repo()}-local/{digest[7:23]}:latest"
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
