"""Attacks on ``images load`` (by hand, or a cluster node loading what the driver sent): an
archive may name, and its ``docker save`` members may tag, only the locked images under this
machine's names; anything else is refused before the engine loads a thing."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from gradebox.errors import ImageError
from gradebox.images.archive import load_stream

TINY = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
VICTIM = "sha256:" + "9" * 64


class DockerLike:
    """An engine that loads as ``docker load`` does: it reads the whole stream (a stream that
    fails leaves nothing), then each ``manifest.json`` entry's config becomes an image and its
    ``RepoTags`` move onto it; without a manifest, ``repositories`` names the tags."""

    def __init__(self) -> None:
        self.tags = {"victim:latest": VICTIM}
        self.ids = {VICTIM}
        self.loads = 0

    def load_image(self, stream) -> None:  # type: ignore[no-untyped-def]
        data = stream.read()
        files = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar:
                f = tar.extractfile(m) if m.isreg() else None
                files[m.name] = f.read() if f else b""
        self.loads += 1
        if "manifest.json" in files:
            for entry in json.loads(files["manifest.json"]):
                iid = "sha256:" + entry["Config"].removesuffix(".json")
                self.ids.add(iid)
                for tag in entry.get("RepoTags") or ():
                    self.tags[tag] = iid
        for repo, tags in json.loads(files.get("repositories", b"{}")).items():
            for tag, iid in tags.items():
                self.tags[f"{repo}:{tag}"] = "sha256:" + iid

    def image(self, ref: str) -> dict[str, str]:
        from gradebox.engine import NotFound

        iid = self.tags.get(ref) or (ref if ref in self.ids else None)
        if iid is None:
            raise NotFound(f"no such image: {ref}")
        return {"Id": iid}

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.tags[f"{repository}:{tag}"] = self.image(image)["Id"]


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def saved(
    *entries: tuple[str, list[str] | None],
    repositories: dict | None = None,
    extra: tuple[tuple[str, bytes], ...] = (),
) -> bytes:
    """A ``docker save`` tar of images (config id, its RepoTags), then ``extra`` members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for iid, _ in entries:
            _member(tar, f"{iid[7:]}.json", b"{}")
            _member(tar, f"{iid[7:]}/layer.tar", b"\0" * 1024)
        manifest = [
            {"Config": f"{iid[7:]}.json", "RepoTags": tags, "Layers": [f"{iid[7:]}/layer.tar"]}
            for iid, tags in entries
        ]
        _member(tar, "manifest.json", json.dumps(manifest).encode())
        if repositories is not None:
            _member(tar, "repositories", json.dumps(repositories).encode())
        for name, data in extra:
            _member(tar, name, data)
    return buf.getvalue()


def archive(lock: dict[str, str], images: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        body = {"version": 1, "images": {n: {"id": i} for n, i in lock.items()}}
        _member(tar, "images.lock.json", json.dumps(body).encode())
        for name, data in images.items():
            _member(tar, f"{name}.tar", data)
    buf.seek(0)
    return buf


@pytest.fixture(autouse=True)
def no_local_lock(monkeypatch):  # type: ignore[no-untyped-def]
    """A machine without a lock of its own (the archive's lock is all there is to check)."""
    from gradebox.images import archive as mod

    monkeypatch.setattr(mod, "read_lock", lambda: None)


def test_a_clean_archive_loads_and_is_named_by_its_locked_id():
    from gradebox.images import qualified

    engine = DockerLike()
    got = load_stream(engine, archive({"tiny": TINY}, {"tiny": saved((TINY, None))}), "a.tar")  # type: ignore[arg-type]
    assert got == {"tiny": None} and engine.tags[qualified("tiny")] == TINY


@pytest.mark.parametrize("name", ["victim:latest", "docker.io/library/victim:latest", "x@sha256:1"])
def test_an_archive_lock_naming_a_full_reference_is_refused_before_a_byte_is_loaded(name):
    engine = DockerLike()
    with pytest.raises(ImageError, match="a.tar: its lock names"):
        load_stream(engine, archive({name: TINY}, {name: saved((TINY, None))}), "a.tar")  # type: ignore[arg-type]
    assert engine.loads == 0 and engine.tags["victim:latest"] == VICTIM


@pytest.mark.parametrize("iid", ["victim:latest", "sha256:abc", "sha256:" + "A" * 64])
def test_an_archive_lock_with_an_id_that_is_not_a_digest_is_refused(iid):
    engine = DockerLike()
    with pytest.raises(ImageError, match="a.tar: its lock names"):
        load_stream(engine, archive({"tiny": iid}, {"tiny": saved((TINY, None))}), "a.tar")  # type: ignore[arg-type]
    assert engine.loads == 0


def test_tags_inside_an_image_never_move_a_name_on_this_machine():
    engine = DockerLike()
    inner = saved((TINY, ["victim:latest"]), repositories={"victim": {"latest": TINY[7:]}})
    got = load_stream(engine, archive({"tiny": TINY}, {"tiny": inner}), "a.tar")  # type: ignore[arg-type]
    assert got == {"tiny": None}
    assert engine.tags["victim:latest"] == VICTIM  # the archive's own tags were dropped


@pytest.mark.parametrize(
    "inner",
    [
        saved((TINY, None), (OTHER, ["victim:latest"])),  # an extra image
        saved((OTHER, None)),  # not the locked image at all
        saved(),  # no image
    ],
    ids=["extra-image", "other-image", "empty-manifest"],
)
def test_an_image_member_holding_other_than_its_locked_image_is_refused(inner):
    engine = DockerLike()
    with pytest.raises(ImageError, match="a.tar: tiny.tar"):
        load_stream(engine, archive({"tiny": TINY}, {"tiny": inner}), "a.tar")  # type: ignore[arg-type]
    assert engine.loads == 0 and OTHER not in engine.ids
    assert engine.tags["victim:latest"] == VICTIM


def test_an_image_member_without_a_manifest_is_refused():
    engine = DockerLike()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _member(tar, "repositories", json.dumps({"victim": {"latest": TINY[7:]}}).encode())
    with pytest.raises(ImageError, match="a.tar: tiny.tar"):
        load_stream(engine, archive({"tiny": TINY}, {"tiny": buf.getvalue()}), "a.tar")  # type: ignore[arg-type]
    assert engine.loads == 0 and engine.tags["victim:latest"] == VICTIM


@pytest.mark.parametrize("second", ["manifest.json", "./manifest.json", "x/../manifest.json"])
def test_a_second_manifest_the_engine_would_unpack_over_the_first_is_refused(second):
    engine = DockerLike()
    tagged = [{"Config": f"{OTHER[7:]}.json", "RepoTags": ["victim:latest"]}]
    inner = saved((TINY, None), extra=((second, json.dumps(tagged).encode()),))
    with pytest.raises(ImageError, match="a.tar: tiny.tar: its member .* is not a plain, unique"):
        load_stream(engine, archive({"tiny": TINY}, {"tiny": inner}), "a.tar")  # type: ignore[arg-type]
    assert engine.loads == 0 and engine.tags["victim:latest"] == VICTIM


def test_an_image_passes_to_the_engine_in_bounded_pieces_however_large_its_layers():
    """A node holds one chunk of the sent archive at a time; the image's own members must
    not be gathered whole on their way to the engine (a 1 GiB layer would be 1 GiB of RAM
    in each loading worker)."""
    from gradebox.images.archive import _untagged

    layer = 24 << 20
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _member(tar, f"{TINY[7:]}.json", b"{}")
        _member(tar, f"{TINY[7:]}/layer.tar", b"\0" * layer)
        manifest = [{"Config": f"{TINY[7:]}.json", "RepoTags": None, "Layers": []}]
        _member(tar, "manifest.json", json.dumps(manifest).encode())
    buf.seek(0)
    pieces = list(_untagged(buf, TINY, "a.tar: tiny.tar"))
    assert max(len(p) for p in pieces) <= 2 << 20
    with tarfile.open(fileobj=io.BytesIO(b"".join(pieces))) as tar:  # still a whole tar
        sizes = {m.name: m.size for m in tar}
    assert sizes[f"{TINY[7:]}/layer.tar"] == layer and set(sizes) == {
        f"{TINY[7:]}.json",
        f"{TINY[7:]}/layer.tar",
        "manifest.json",
    }


def test_a_stale_extended_size_on_the_manifest_cannot_desync_what_the_engine_reads():
    """The manifest is written anew (without tags); a pax ``size`` the archive gave it must
    not survive into the header the engine reads, or the engine would read past it."""
    from gradebox.images.archive import _untagged

    buf = io.BytesIO()
    manifest = json.dumps([{"Config": f"{TINY[7:]}.json", "RepoTags": ["victim:latest"]}])
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _member(tar, f"{TINY[7:]}.json", b"{}")
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        info.pax_headers = {"size": str(len(manifest)), "comment": "x"}
        tar.addfile(info, io.BytesIO(manifest.encode()))
    buf.seek(0)
    out = b"".join(_untagged(buf, TINY, "a.tar: tiny.tar"))
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        member = tar.getmember("manifest.json")
        sent = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
    assert sent == [{"Config": f"{TINY[7:]}.json", "RepoTags": None}]
