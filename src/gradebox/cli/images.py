"""``gradebox images``: build and list the runtime images."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import images as img
from ..core.types import format_bytes
from ..engine import Engine
from ..errors import ImageError
from ..images.archive import load_images, save_images
from ..sandbox.rootfs import RootfsCache
from ._common import JsonOpt, Output

app = typer.Typer(help="Build, list and check the runtime images.", no_args_is_help=True)


def _rows(statuses: list[img.ImageStatus], lock: img.Lock | None) -> list[dict[str, object]]:
    return [
        {
            "name": s.name,
            "ref": s.ref,
            "id": s.id,
            "size": s.size,
            "inputs": s.inputs,
            "up_to_date": s.up_to_date,
            "locked_id": _locked_id(lock, s.name),
            "matches_lock": _locked_id(lock, s.name) == s.id if lock else None,
        }
        for s in statuses
    ]


def _locked_id(lock: img.Lock | None, name: str) -> str | None:
    entry = lock.images.get(name) if lock else None
    return entry.id if entry else None


def _table(out: Output, statuses: list[img.ImageStatus], lock: img.Lock | None) -> None:
    table = Table(title="gradebox images")
    for col in ("name", "id", "size", "inputs", "lock"):
        table.add_column(col)
    for s in statuses:
        state = (
            "[green]up to date[/]"
            if s.up_to_date
            else ("[red]missing[/]" if s.id is None else "[yellow]out of date[/]")
        )
        locked = _locked_id(lock, s.name)
        match = (
            "-"
            if lock is None or locked is None
            else ("[green]matches[/]" if locked == s.id else "[red]differs[/]")
        )
        size = format_bytes(s.size) if s.size else "-"
        table.add_row(s.name, (s.id or "-")[7:19], size, state, match)
    out.console.print(table)


def _show(out: Output, statuses: list[img.ImageStatus]) -> None:
    lock = img.read_lock()
    if out.as_json:
        out.document(_rows(statuses, lock))
    else:
        _table(out, statuses, lock)


@app.command("build")
def build(
    names: Annotated[
        list[str] | None, typer.Argument(help="Images to build (default: all).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when up to date.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the images that are missing or out of date (the base by debootstrap first)."""
    out = Output(as_json)
    _show(out, img.build_images(Engine.connect(), names, force=force, say=out.info))


@app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """Show every image (id, size, whether it matches its build inputs and the lock) and the
    OCI backend's cache of unpacked root filesystems."""
    out = Output(as_json)
    engine = Engine.connect()
    statuses = img.status(engine)
    cache = _cache_rows(engine)
    if out.as_json:
        out.document({"images": _rows(statuses, img.read_lock()), "rootfs_cache": cache})
        return
    _table(out, statuses, img.read_lock())
    table = Table(title=f"rootfs cache ({RootfsCache(None).root})")
    for col in ("image id", "size", "needed"):
        table.add_column(col)
    for row in cache:
        needed = "[green]yes[/]" if row["needed"] else "[yellow]no: `images prune`[/]"
        table.add_row(str(row["id"])[7:19], format_bytes(int(row["size"])), needed)
    out.console.print(table)


def _needed_ids(engine: Engine) -> set[str]:
    """Image ids a run may still use: locked ones and gradebox's current images."""
    lock = img.read_lock()
    ids = {e.id for e in lock.images.values()} if lock else set()
    ids |= {str(i["Id"]) for i in engine.images(img.LABEL_IMAGE)}
    ids |= {str(i["Id"]) for i in engine.images(img.LABEL_INPUTS)}
    return ids


def _cache_rows(engine: Engine) -> list[dict[str, object]]:
    needed = _needed_ids(engine)
    return [
        {"id": e.image_id, "path": str(e.path), "size": e.size, "needed": e.image_id in needed}
        for e in RootfsCache(None).entries()
    ]


@app.command("prune")
def prune(as_json: JsonOpt = False) -> None:
    """Remove unpacked root filesystems that no lock entry and no current image needs."""
    out = Output(as_json)
    cache = RootfsCache(None)
    gone = [r for r in _cache_rows(Engine.connect()) if not r["needed"]]
    for row in gone:
        cache.remove(str(row["id"]))
    if as_json:
        out.document({"removed": gone})
    else:
        freed = sum(int(r["size"]) for r in gone)
        out.console.print(f"removed {len(gone)} root filesystem(s), {format_bytes(freed)}")


@app.command("lock")
def lock(as_json: JsonOpt = False) -> None:
    """Write images.lock.json (in a checkout images/, installed the user's data folder): each
    image's id, its base's id and its input hash."""
    out = Output(as_json)
    written = img.write_lock(Engine.connect())
    if as_json:
        out.document(written)
    else:
        out.console.print(
            f"locked {len(written.images)} image(s) in {img.lock_path()}", soft_wrap=True
        )


def _lock() -> img.Lock:
    lock = img.read_lock()
    if lock is None:
        raise ImageError(f"no lock file at {img.lock_path()}; run `gradebox images lock`")
    return lock


def _report(out: Output, problems: dict[str, str | None]) -> None:
    """One line per image (or the JSON document); exit 1 when one is missing or differs."""
    bad = {k: v for k, v in problems.items() if v}
    if out.as_json:
        out.document({"ok": not bad, "images": problems})
    else:
        for name, problem in problems.items():
            mark = "[green]✔[/]" if problem is None else "[red]✘[/]"
            out.console.print(f"{mark} {name}" + (f": {problem}" if problem else ""))
    raise typer.Exit(1 if bad else 0)


@app.command("verify")
def verify(as_json: JsonOpt = False) -> None:
    """Exit 1 when a local image differs from the lock (or is missing), 0 when all match."""
    out = Output(as_json)
    lock = _lock()
    problems = img.verify(Engine.connect(), lock)
    _report(out, problems)


@app.command("save")
def save(
    archive: Annotated[Path, typer.Argument(help="The archive to write (a tar).")],
    names: Annotated[
        list[str] | None, typer.Argument(help="Images (default: every locked one).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the locked images and the lock into one archive, to load on another machine."""
    out = Output(as_json)
    lock = _lock()
    size = save_images(Engine.connect(), lock, archive, names or None)
    if as_json:
        out.document(
            {"archive": str(archive), "bytes": size, "images": names or sorted(lock.images)}
        )
    else:
        out.console.print(f"saved {archive} ({size >> 20} MiB)")


@app.command("load")
def load(
    archive: Annotated[Path, typer.Argument(help="An archive written by `images save`.")],
    as_json: JsonOpt = False,
) -> None:
    """Load an archive's images and verify each against its lock: exit 1 when one differs."""
    out = Output(as_json)
    problems = load_images(Engine.connect(), archive)
    _report(out, problems)
