"""The executor conformance checks (tests/executor_conformance.py) against ``LocalExecutor``:
threads of this process, the real sandbox (``auto``), a fresh one per executor (leaving a map
early closes its sandbox, as Ctrl-C does). ``tests/docker/test_ray.py`` runs the same checks
against ``RayExecutor``."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from gradebox.drivers.batch import load_grader_ref
from gradebox.lifecycle.executor import Executor, LocalExecutor
from gradebox.lifecycle.jobs import Worker
from gradebox.sandbox import get_sandbox
from gradebox.sandbox.oci import state_root
from gradebox.suite import load_suite
from tests.executor_conformance import CHECKS

pytestmark = pytest.mark.docker


class LocalHarness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp, self.boxes = tmp_path, []

    def _box(self):  # type: ignore[no-untyped-def]
        box = get_sandbox()
        self.boxes.append(box)
        return box, box.images()

    def for_suite(self, suite_file: Path) -> Executor:
        box, images = self._box()
        return LocalExecutor(Worker(box, images, secrets.token_hex(6),
                                    suite=load_suite(suite_file)))  # fmt: skip

    def for_grader(self, grader_file: Path, images: tuple[str, ...]) -> Executor:
        box, resolver = self._box()
        empty = self.tmp / "empty"
        empty.mkdir(exist_ok=True)
        grader = load_grader_ref(grader_file)
        return LocalExecutor(Worker(box, resolver, secrets.token_hex(6), grader=grader,
                                    workspace=empty))  # fmt: skip

    def image_id(self, name: str) -> str:
        box, images = self._box()
        return images.resolve(name)

    def left(self) -> list[str]:
        """OCI containers and bundles of this process still there, and Docker ones, once the
        sandboxes' background removal is done (an executor's end is not its sandbox's: the
        run closes that, and removal goes on off the critical path until then)."""
        for box in self.boxes:
            box.leftovers()  # waits for the background removal
        mine = f"gradebox-{os.getpid()}-"
        found = []
        for folder in (state_root() / "runtime", state_root() / "bundles"):
            if folder.is_dir():
                found += [p.name for p in folder.iterdir() if p.name.startswith(mine)]
        return found

    def close(self) -> None:
        for box in self.boxes:
            box.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_local_executor(check, tmp_path):  # type: ignore[no-untyped-def]
    harness = LocalHarness(tmp_path)
    try:
        check(harness, tmp_path)
    finally:
        harness.close()
