"""Building, locking, verifying and resolving runtime images on the real engine."""

import contextlib
import io
import json
import secrets
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gradebox import images as img
from gradebox.errors import ImageError
from gradebox.graders import load_grader, run_grader
from gradebox.images.catalog import qualified
from gradebox.protocol.models import Payload, Status
from tests.conftest import write

pytestmark = pytest.mark.docker


@pytest.fixture
def images_dir(tmp_path, monkeypatch, engine):
    folder = tmp_path / "images"
    write(folder / "gbtest" / "Dockerfile", "ARG BASE\nFROM ${BASE}\nRUN echo one > /one\n")
    monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(folder))
    yield folder
    with contextlib.suppress(Exception):
        engine.api.remove_image(qualified("gbtest"), force=True)


def test_build_lock_verify_and_a_tampered_image(images_dir, engine, shell_image, tmp_path):
    statuses = img.build_images(engine, ["gbtest"])
    assert [s.name for s in statuses] == ["base", "gbtest"] and all(s.up_to_date for s in statuses)
    lock = img.write_lock(engine)
    assert set(lock.images) == {"base", "gbtest"}
    assert lock.images["gbtest"].base_id == lock.images["base"].id
    assert img.read_lock() == lock
    assert img.verify(engine, lock) == {"base": None, "gbtest": None}
    resolver = img.ImageResolver(engine, locked=True, lock=lock)
    assert resolver.resolve("gbtest") == lock.images["gbtest"].id

    # Another image tagged under the locked name.
    engine.tag(shell_image, *qualified("gbtest").split(":"))
    assert "the lock says" in img.verify(engine, lock)["gbtest"]
    cli = subprocess.run(
        [sys.executable, "-m", "gradebox", "images", "verify"], capture_output=True, text=True
    )
    assert cli.returncode == 1 and "gbtest" in cli.stdout
    with pytest.raises(ImageError, match="gradebox images lock"):
        img.ImageResolver(engine, locked=True, lock=lock).resolve("gbtest")
    # Unlocked, it runs, and the result records the id actually used.
    assert img.ImageResolver(engine).resolve("gbtest") == shell_image

    # A locked grader run refuses before any container exists.
    g = load_grader(write(tmp_path / "g.yaml", "type: program\nprogram: 'true'\nimage: gbtest\n"))
    ws = tmp_path / "ws"
    ws.mkdir()
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradebox",
            "grade",
            str(tmp_path / "g.yaml"),
            "--workspace",
            str(ws),
            "--locked",
        ],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 2 and "lock says" in cli.stderr
    assert g.image == "gbtest"


def test_changed_dockerfile_is_out_of_date(images_dir, engine):
    img.build_images(engine, ["gbtest"])
    assert img.status(engine, ["gbtest"])[1].up_to_date
    write(images_dir / "gbtest" / "Dockerfile", "ARG BASE\nFROM ${BASE}\nRUN echo two > /two\n")
    assert not img.status(engine, ["gbtest"])[1].up_to_date
    img.build_images(engine, ["gbtest"])
    assert img.status(engine, ["gbtest"])[1].up_to_date


def test_locked_mode_refuses_unpinned_and_missing(engine):
    resolver = img.ImageResolver(engine, locked=True, lock=img.Lock())
    with pytest.raises(ImageError, match="not pinned"):
        resolver.resolve("debian:bookworm")
    with pytest.raises(ImageError, match="gradebox images build nosuch"):
        resolver.resolve("nosuch")
    with pytest.raises(ImageError, match="not in the lock"):
        resolver.resolve("shell")


def test_suite_local_dockerfile_is_built_once(tmp_path, engine, box):
    token = secrets.token_hex(4)
    write(
        tmp_path / "graders" / "Dockerfile",
        f"FROM {img.qualified('shell')}\nRUN echo {token} > /custom\n",
    )
    text = "type: script\ncommand: 'cat /custom'\nimage:\n  build: ./graders/Dockerfile\n"
    graders = [load_grader(write(tmp_path / f"g{i}.yaml", text)) for i in range(3)]
    ws = tmp_path / "ws"
    ws.mkdir()
    resolver = img.ImageResolver(engine, build=True)
    results = [run_grader(g, Payload(), ws, box, images=resolver) for g in graders]
    try:
        assert resolver.builds == 1
        assert all(r.status is Status.passed and r.evidence == token for r in results)
        assert len({r.image.id for r in results}) == 1
        assert results[0].image.ref == "build:./graders/Dockerfile"
        # Cached across runs by the hash of its context: a new run builds nothing.
        again = img.ImageResolver(engine, build=True)
        run_grader(graders[0], Payload(), ws, box, images=again)
        assert again.builds == 0
    finally:
        engine.api.remove_image(results[0].image.id, force=True)


def test_a_run_builds_a_graders_dockerfile_only_when_allowed(tmp_path, engine):
    """Refused before anything runs (exit 2, one line naming the file, the field and the
    flag; no image built), and the same run with --allow build builds it and passes."""
    token = secrets.token_hex(4)
    write(tmp_path / "Dockerfile", f"FROM {img.qualified('shell')}\nRUN echo {token} > /built\n")
    suite = write(
        tmp_path / "suite.yaml",
        "tests:\n  - id: t\n    output: x\n    assert:\n"
        "      - {type: script, command: 'grep -q . /built', image: {build: ./Dockerfile}}\n",
    )
    digest = img.input_hash(tmp_path, (tmp_path / "Dockerfile").read_text())
    tag = f"{img.repo()}-local/{digest[7:23]}:latest"
    run = [sys.executable, "-m", "gradebox", "run", str(suite), "--out", str(tmp_path / "out")]
    try:
        refused = subprocess.run(run, capture_output=True, text=True)
        assert refused.returncode == 2, refused.stderr
        errors = [x for x in refused.stderr.splitlines() if x.startswith("gradebox: error:")]
        assert len(errors) == 1, refused.stderr  # one line (the other: the sandbox chosen)
        assert f"{suite}:5: tests.0.assert.0.image.build:" in errors[0], errors[0]
        assert "--allow build" in errors[0] and "as root" in errors[0]
        with pytest.raises(ImageError, match="not found"):  # nothing was built
            engine.image(tag)
        allowed = subprocess.run([*run, "--allow", "build"], capture_output=True, text=True)
        assert allowed.returncode == 0, allowed.stderr
    finally:
        with contextlib.suppress(Exception):
            engine.api.remove_image(tag, force=True)


def test_images_list_shows_the_rootfs_cache_and_prune_removes_what_nothing_needs(
    tmp_path, python_image
):
    import json
    import os
    import subprocess
    import sys

    from gradebox.sandbox.oci import OciSandbox

    env = {**os.environ, "GRADEBOX_CACHE": str(tmp_path / "cache")}
    os.environ["GRADEBOX_CACHE"] = env["GRADEBOX_CACHE"]
    try:
        box = OciSandbox()
        box.cache.path_for(python_image)  # needed: a current gradebox image
        box.close()
    finally:
        del os.environ["GRADEBOX_CACHE"]
    stale = tmp_path / "cache" / "rootfs" / ("ab" * 32)
    stale.mkdir()
    (stale / ".gradebox-complete").write_text("sha256:" + "ab" * 32 + "\n")

    def gradebox(*args):
        return subprocess.run([sys.executable, "-m", "gradebox", *args], capture_output=True,
                              text=True, env=env)  # fmt: skip

    listed = json.loads(gradebox("images", "list", "--json").stdout)["rootfs_cache"]
    needed = {row["id"]: row["needed"] for row in listed}
    assert needed == {python_image: True, "sha256:" + "ab" * 32: False}
    p = gradebox("images", "prune", "--json")
    assert p.returncode == 0, p.stderr
    assert [r["id"] for r in json.loads(p.stdout)["removed"]] == ["sha256:" + "ab" * 32]
    assert not stale.exists() and (tmp_path / "cache" / "rootfs" / python_image[7:]).is_dir()


def test_images_save_and_load_verify_against_the_lock(tmp_path):
    """The locked bytes travel: save, load (on this engine: a no-op that must verify), and a
    tampered archive refused with the image named."""
    import io
    import json
    import os
    import tarfile

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}

    def cli(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gradebox", "images", *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
        )

    archive = tmp_path / "images.tar"
    p = cli("save", archive, "shell", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["images"] == ["shell"]
    p = cli("load", archive, "--json")
    assert p.returncode == 0 and json.loads(p.stdout) == {"ok": True, "images": {"shell": None}}
    # An archive whose lock names other bytes than this machine's lock is refused up front.
    bad = tmp_path / "bad.tar"
    with tarfile.open(archive) as src, tarfile.open(bad, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name == "images.lock.json":
                lock = json.loads(data)
                lock["images"]["shell"]["id"] = "sha256:" + "0" * 64
                data = json.dumps(lock).encode()
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    p = cli("load", bad)
    assert p.returncode == 2 and "shell" in p.stderr and "differ" in p.stderr, p.stderr


def _tar(*members: tuple[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


@pytest.fixture
def tiny_image(engine):
    """Builds an image of one small file (its own id, in a blink); each removed at the end."""
    built: list[str] = []

    def build() -> str:
        context = _tar(("Dockerfile", b"FROM scratch\nCOPY f /f\n"), ("f", secrets.token_bytes(8)))
        out = engine.build(fileobj=context, custom_context=True)
        built.append(next(c["aux"]["ID"] for c in out if "aux" in c))
        return built[-1]

    yield build
    for iid in built:
        with contextlib.suppress(Exception):
            engine.api.remove_image(iid, force=True)


def test_a_refused_archive_leaves_the_engine_as_it_was(engine, tiny_image, monkeypatch):
    """An archive refused at its last member: the images its earlier members brought to the
    engine are removed again, but not one that was there before the load, nor one another
    run made a container from meanwhile; the refused member's own image is not loaded."""
    from gradebox.engine import Engine
    from gradebox.images import archive as mod

    monkeypatch.setattr(mod, "read_lock", lambda: None)  # the archive's lock is all there is
    kept, fresh, used, refused = ids = [tiny_image() for _ in range(4)]
    saves = {}
    for iid in ids:
        saves[iid] = io.BytesIO()
        engine.save_image(iid, saves[iid].write)
        if iid != kept:
            engine.api.remove_image(iid)
    lock = {"a": kept, "b": fresh, "u": used, "z": "sha256:" + "0" * 64}
    inside = {"a": kept, "b": fresh, "u": used, "z": refused}  # z: not the image its lock says
    archive = _tar(
        (
            "images.lock.json",
            json.dumps({"images": {n: {"id": i} for n, i in lock.items()}}).encode(),
        ),
        *((f"{n}.tar", saves[iid].getvalue()) for n, iid in inside.items()),
    )

    def on_engine() -> set[str]:
        return {i["Id"] for i in engine.api.images(all=True)}

    containers: list[str] = []

    class AnotherRunMeanwhile(Engine):
        def load_image(self, stream) -> None:  # type: ignore[no-untyped-def]
            super().load_image(stream)
            if not containers and used in on_engine():
                name = f"gradebox-test-{secrets.token_hex(4)}"
                containers.append(self.create(lambda: name, image=used, command=["/none"]))

    try:
        with pytest.raises(ImageError, match="z.tar holds 1 image"):
            mod.load_stream(AnotherRunMeanwhile(engine.client), archive, "a.tar")
        assert containers, "no container was made from the loaded image (the test proves less)"
        assert [i in on_engine() for i in ids] == [True, False, True, False]
    finally:
        for cid in containers:
            engine.remove(cid)
