"""``gradebox doctor`` on this host, run as a user runs it (``python -m gradebox``: the test
user's venv has no entry script), checked against what the code paths it reuses say here
(``tests/docker/test_nonroot.py`` runs this module again as a docker-group user)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gradebox.core.subids import user_name
from gradebox.engine import Engine
from gradebox.images import read_lock
from gradebox.sandbox import auto_reason
from gradebox.sandbox.oci import state_root

pytestmark = pytest.mark.docker

ROWS = ["backend (auto)", "runtime crun", "runtime runc", "cgroups", "oci state folder",
        "subordinate ids", "workspace quota", "engine", "image definitions",
        "image lock"]  # fmt: skip
# The one promise a non-root runner does not keep (docs/non-root.md): a `workspace: rw`
# grader's copy is not size-limited without root's tmpfs.
EXPECTED_MISSING = set() if os.geteuid() == 0 else {"workspace quota"}


def doctor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradebox", "doctor", *args],
                          env={**os.environ, "COLUMNS": "200", **env},
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_doctor_says_what_this_host_gives(engine: Engine):
    done = doctor("--json")
    doc = json.loads(done.stdout)
    rows = {c["name"]: c for c in doc["checks"]}
    missing = {n: (c["detail"], c["fix"]) for n, c in rows.items() if c["state"] == "missing"}
    # `make test` set this host up (images built and locked, crun, tini): nothing else is
    # missing.
    assert set(missing) == EXPECTED_MISSING, missing
    assert doc["ok"] == (not missing) and done.returncode == (1 if missing else 0), done.stderr
    assert (doc["user"], doc["uid"]) == (user_name(), os.geteuid())
    assert set(ROWS) <= set(rows) and list(rows)[-2:] == ["init", "KVM"]
    assert all(c["fix"] for c in rows.values() if c["state"] in ("missing", "optional")), rows

    chosen, why = auto_reason()  # what a run here picks, and says
    assert rows["backend (auto)"]["detail"] == f"{chosen}: {why}"
    for name in ("crun", "runc"):
        path = subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True,
                              text=True).stdout.strip()  # fmt: skip
        if path:
            version = subprocess.run([path, "--version"], capture_output=True, text=True)
            assert version.stdout.splitlines()[0] in rows[f"runtime {name}"]["detail"]
    info = engine.info()
    assert f"storage driver {info['Driver']}" in rows["engine"]["detail"]
    assert info["ServerVersion"] in rows["engine"]["detail"]
    assert rows["oci state folder"]["detail"] == str(state_root())
    lock = read_lock()
    assert lock is not None
    for name in lock.images:
        assert rows[f"image {name}"]["state"] == "ok", rows[f"image {name}"]
        assert "verified against the lock" in rows[f"image {name}"]["detail"]

    human = doctor()
    assert human.returncode == done.returncode, human.stdout + human.stderr
    assert f"gradebox doctor (as {user_name()}, uid {os.geteuid()})" in human.stdout
    said = "every promise can be kept here" if not missing else "missing: workspace quota"
    assert said in human.stdout


def test_doctor_names_a_missing_image_and_its_fix():
    # Images looked up under a repository with nothing built: every one is missing.
    done = doctor("--json", GRADEBOX_IMAGE_REPO="gradebox-doctor-none")
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert rows["image python"]["state"] == "missing"
    assert rows["image python"]["fix"] == "gradebox images build python"
    human = doctor(GRADEBOX_IMAGE_REPO="gradebox-doctor-none")
    assert human.returncode == 1
    assert "gradebox cannot keep every promise here" in human.stdout
