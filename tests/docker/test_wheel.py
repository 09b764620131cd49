"""``pip install gradebox`` on a machine with no checkout (issue 44): the wheel built from this
checkout, installed into a fresh venv outside it (``tests/wheel.py``), finds its own image
definitions, keeps its lock in the user's data folder, says so in ``gradebox doctor``, and runs
the quickstart from a folder that is not the checkout.

The images are the ones ``make test`` built before the suite. They are not rebuilt from the
wheel (minutes of debootstrap and apt): instead the wheel's ``images list`` must find every
definition and see each image up to date, that is, hash the wheel's definitions exactly as the
checkout's, and its ``images build`` must then have nothing to do. A build from the wheel
would make the same inputs, from the same files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import seeded_cache
from tests.docker.test_doctor import EXPECTED_MISSING
from tests.wheel import ROOT, build_wheel, install

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("wheel")
    python = install(build_wheel(where), where / "venv")
    project = where / "project"  # the user's folder: no checkout here or above
    shutil.copytree(ROOT / "examples" / "quickstart", project / "quickstart")
    return {"python": python, "bin": python.parent, "project": project, "home": where / "home"}


def gradebox(installed: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``gradebox`` script, from the project folder, with a home of its own and
    nothing of this venv's on PATH."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("GRADEBOX_IMAGE_REPO", "DOCKER_"))}
    env.update(
        PATH="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", LANG="C.UTF-8",
        HOME=str(installed["home"]),
        # The python image's root, hard-linked from this user's cache (no ~5 s unpack).
        GRADEBOX_CACHE=str(seeded_cache(installed["home"] / "cache")),
    )  # fmt: skip
    return subprocess.run([str(installed["bin"] / "gradebox"), *args], cwd=installed["project"],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip


def test_the_installed_gradebox_is_the_wheels(installed):
    done = subprocess.run(
        [str(installed["python"]), "-c", "import gradebox; print(gradebox.__file__)"],
        cwd=installed["project"], capture_output=True, text=True, check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # the wheel's own
    )  # fmt: skip
    assert Path(done.stdout.strip()).is_relative_to(installed["python"].parent.parent)


def test_images_list_and_build_find_the_wheels_definitions(installed):
    listed = gradebox(installed, "images", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["images"]
    folders = sorted(p.name for p in (ROOT / "images").iterdir() if (p / "Dockerfile").is_file())
    assert [r["name"] for r in rows] == ["base", *folders]
    stale = [r["name"] for r in rows if not r["up_to_date"]]
    assert stale == [], f"the wheel's definitions hash unlike the checkout's: {stale}"
    built = gradebox(installed, "images", "build")
    assert built.returncode == 0, built.stderr
    for name in folders:
        assert f"{name}:latest is up to date" in built.stderr, built.stderr


def test_the_lock_is_the_users_and_the_quickstart_runs_locked(installed):
    checkout_lock = ROOT / "images" / "images.lock.json"
    before = checkout_lock.stat().st_mtime_ns if checkout_lock.exists() else None
    locked = gradebox(installed, "images", "lock")
    assert locked.returncode == 0, locked.stderr
    lock = installed["home"] / ".local" / "share" / "gradebox" / "images.lock.json"
    assert str(lock) in locked.stdout and lock.is_file()
    assert (checkout_lock.stat().st_mtime_ns if checkout_lock.exists() else None) == before
    assert gradebox(installed, "images", "verify").returncode == 0
    doctor = gradebox(installed, "doctor", "--json")
    rows = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    missing = {n for n, c in rows.items() if c["state"] == "missing"}
    assert missing == EXPECTED_MISSING, rows
    assert doctor.returncode == (1 if missing else 0), rows
    definitions = installed["python"].parent.parent  # the venv: the wheel's package data
    assert rows["image definitions"]["detail"].startswith(str(definitions))
    assert rows["image lock"]["detail"].startswith(f"{lock}:")

    run = gradebox(installed, "run", "quickstart/suite.yaml", "--out", "runs", "--locked")
    # Exit 1: the quickstart fails one test on purpose (as `make demo` says); nothing errored.
    assert run.returncode == 1, run.stdout + run.stderr
    summary = json.loads((installed["project"] / "runs" / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["failed"], summary["errored"]) == (
        3, 2, 1, 0)  # fmt: skip
    lines = (installed["project"] / "runs" / "results.jsonl").read_text().splitlines()
    results = [json.loads(line) for line in lines]
    python_id = json.loads(lock.read_text())["images"]["python"]["id"]
    images = {g["image"]["id"] for r in results for g in r["graders"] if g["image"]}
    assert images == {python_id}, images  # every sandboxed grader ran the locked image
