"""Images travel by themselves: a node of a real local Ray cluster (tests/ray_cluster.py) that
lacks the driver's images gets them through the object store and runs.

The nodes of this machine share one engine, so the node that lacks them looks them up in a
namespace of its own: `GRADEBOX_IMAGE_REPO`, a name no engine holds (`gbt...`), as a machine
whose engine has never seen gradebox's images does. The driver's archive really travels
(chunks in the object store, `docker load` by that node's engine), and the name the load
gives the image there is the only thing this test leaves, and removes. (A node holding other
bytes under the name is refused: test_ray.py, a second engine.)"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.engine import NotFound
from gradebox.errors import ImageError
from gradebox.images import qualified
from tests.conftest import write
from tests.ray_cluster import LocalRay

pytestmark = pytest.mark.docker

CHECK = '[sh, -c, \'test "$(cat "$EVALUATE_WORKSPACE/a.txt")" = ok\']'


def gradebox(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradebox", *map(str, args)],
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def make_suite(root: Path, n: int) -> Path:
    write(root / "tpl" / "a.txt", "ok")
    lines = ["name: carried", "workspace: {template: ./tpl}", "tests:"]
    for i in range(n):
        lines += [f"  - id: t-{i:02d}", "    output: x",
                  f"    assert: [{{type: script, command: {CHECK}, image: shell}}]"]  # fmt: skip
    return write(root / "suite.yaml", "\n".join(lines) + "\n")


def held(engine, ref: str) -> str | None:  # type: ignore[no-untyped-def]
    try:
        return str(engine.image(ref)["Id"])
    except (NotFound, ImageError):
        return None


def test_a_node_without_the_images_gets_them_from_the_driver_once_and_runs(tmp_path, engine):
    repo = f"gbt{os.getpid()}-{secrets.token_hex(4)}"  # names no engine holds
    # The graders' image, and python: the image a suite's default target would run on.
    names = ("python", "shell")
    wanted = {f"{repo}/{n}:latest": held(engine, qualified(n)) for n in names}
    assert None not in wanted.values(), f"build the images first: {wanted}"
    suite = make_suite(tmp_path / "suite", 8)
    try:
        with LocalRay(workers=2, slots=2, worker_env={0: {"GRADEBOX_IMAGE_REPO": repo}}) as c:
            assert [held(engine, ref) for ref in wanted] == [None, None]
            p = gradebox("run", suite, "--ray", c.address, "--out", tmp_path / "out")
            said = p.stdout + p.stderr
            assert p.returncode == 0, said
            # The archive went through the object store, in chunks of 64 MiB.
            assert re.search(r"sent image python, shell \(\d+ MiB, \d+ chunks\)", said), said
            assert {ref: held(engine, ref) for ref in wanted} == wanted  # under its names
            results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").open()]
            assert len(results) == 8 and all(r["status"] == "passed" for r in results)
            # Both nodes ran tests: the one that lacked the image too.
            assert len({r["node"] for r in results}) == 2
            # The node holds it now: a second run sends nothing.
            p = gradebox("run", suite, "--ray", c.address, "--out", tmp_path / "again")
            assert p.returncode == 0 and "sent image" not in p.stdout + p.stderr, p.stderr
    finally:
        for ref in wanted:  # names only: each image keeps the name gradebox's own has
            if held(engine, ref) is not None:
                subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=True)
