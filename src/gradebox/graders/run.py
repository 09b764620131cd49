"""Run one grader: configuration + payload + workspace -> a sandboxed run -> a ``GraderResult``.

This module decides *what* the container sees (mounts, paths, environment, stdin); the
sandbox decides *how* it is isolated. Host paths are checked here, on the host, before any
container exists.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from pathlib import Path, PurePosixPath

from ..core import pathnames as _pathnames
from ..core.fstree import copy_file, copy_tree, walk_folders
from ..core.json_bounds import digest
from ..core.untrusted import Refused, TooMany, file_kind, hash_regular, look_through, secret_name
from ..errors import ConfigError
from ..images.catalog import DEFAULT_IMAGE
from ..sandbox.base import Mount
from .grader_run import (
    LARGE_OUTPUT_CHARS,
    SECRET_SCAN_LIMIT,
    GraderRun,
    masked_secrets,
    resolve_sub_path,
)
from .spec import (
    CONTAINER_GRADER_DIR,
    CONTAINER_INPUT_DIR,
    CONTAINER_WORKSPACE,
    enterable,
    workdir_in,
)

# Nothing here needs pydantic at import: `gradebox grade`'s lean path runs a grader through
# this module with a record from the cache (``graders.compiled.GraderRecord``).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..llm.client import ModelHub
    from ..protocol.models import GraderResult, InlinePayload, Payload
    from ..sandbox.base import ImageSource, Sandbox
    from .compiled import GraderRecord
    from .config import GraderConfig

__all__ = [
    "CONTAINER_GRADER_DIR",
    "CONTAINER_INPUT_DIR",
    "CONTAINER_WORKSPACE",
    "GraderRun",
    "LARGE_OUTPUT_CHARS",
    "prepare_grader",
    "resolve_sub_path",
    "run_grader",
]


PROJECT_MARKERS = (".gradebox", ".agentv", ".git")


@functools.lru_cache(maxsize=256)
def project_folder(start: Path) -> Path:
    """The folder a grader's files must lie in: the outermost folder from ``start`` up that
    holds ``.gradebox/``, ``.agentv/`` or ``.git``, else ``start`` itself; never the
    filesystem's root or the home folder. Outermost, because a project's examples carry
    ``.agentv/`` folders of their own and still reach the repository's shared files (AgentV's
    ``examples/*/evals`` run ``../../../../apps/cli``)."""
    start = start.resolve()
    try:
        home = Path.home().resolve()
    except (RuntimeError, OSError):
        home = Path("/")
    found = start
    for folder in (start, *start.parents):
        if folder in (Path("/"), home):
            break
        if any(os.path.lexists(folder / marker) for marker in PROJECT_MARKERS):
            found = folder
    return found


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _in_git(*paths: Path) -> bool:
    """A path in a repository's ``.git``: its ``config`` holds what a clone was given (CI's
    checkout keeps its token there), never a grader's to read."""
    return any(".git" in p.parts for p in paths)


def grader_file(arg: str, source_dir: Path | None, root: Path | None = None) -> str | None:
    """If ``arg`` names a file relative to the grader's folder, its normalised relative path.

    The file must lie inside ``root`` (default: ``source_dir``'s project folder), both where
    the path points and where any link in it leads: ``../graders/check.py`` counts inside an
    AgentV project, ``../../../etc/passwd`` and a link out never do; nor does a ``.env`` file."""
    if source_dir is None or not arg or arg.startswith("-") or "\n" in arg:
        return None
    text = arg.replace("\\", "/")
    if text.startswith("/") or len(text) > 4096:
        return None
    root = root or project_folder(source_dir)
    try:
        rel = os.path.normpath(text)
        candidate = (source_dir / rel).resolve()
        lexical = Path(os.path.normpath(source_dir / rel))
        if not candidate.is_file() or secret_name(candidate.name) or secret_name(lexical.name):
            return None
        if _in_git(candidate, lexical):
            return None
        if not (_inside(candidate, root) and _inside(lexical, root)):
            return None  # outside the project folder, or a link that would lead out of it
        if candidate != lexical:  # a link inside the project: mounted as what it points to
            rel = os.path.relpath(candidate, source_dir)
    except (OSError, ValueError):  # a 300-character one-liner is no file name
        return None
    return PurePosixPath(rel).as_posix()


def outside_project(arg: str, source_dir: Path, root: Path | None = None) -> bool:
    """Does ``arg`` name an existing host file that ``grader_file`` refuses as outside the
    project folder (``../../x``, a link out)? Such a file is never mounted."""
    if grader_file(arg, source_dir, root) is not None or not _looks_like_path(arg):
        return False
    return _pathnames.is_file(source_dir / arg.replace("\\", "/"))


def container_path(rel: str) -> str:
    """Where a grader's file is inside the container: ``/grader/<rel>``; a file above the
    grader's folder (``../x``, one level per ``..``) under ``/grader-up<N>/``."""
    parts = PurePosixPath(rel).parts
    up = 0
    while up < len(parts) and parts[up] == "..":
        up += 1
    if not up:
        return f"{CONTAINER_GRADER_DIR}/{rel}"
    return f"{CONTAINER_GRADER_DIR}-up{up}/" + "/".join(parts[up:])


_SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".js", ".mjs", ".cjs", ".ts", ".mts", ".rb", ".pl")
_INTERPRETERS = {"python", "python3", "node", "bash", "sh", "bun", "deno", "ruby", "perl",
                 "tsx", "uv"}  # fmt: skip


def named_script_paths(argv: list[str]) -> list[int]:
    """Indices of ``argv`` that name a script by a relative path (``graders/check.py``,
    ``./validators/x.sh``): the program itself, or the first operand of an interpreter."""
    found = []
    if not argv:
        return found
    if _looks_like_path(argv[0]):
        found.append(0)
    if PurePosixPath(argv[0]).name in _INTERPRETERS:
        for i, arg in enumerate(argv[1:], 1):
            if arg in ("-c", "-m", "-e", "--eval", "-"):
                break
            if arg == "run" or arg.startswith("-"):
                continue
            if arg.startswith("/"):
                break  # a path inside the image: nothing on the host to check
            if _looks_like_path(arg) or arg.endswith(_SCRIPT_SUFFIXES):
                found.append(i)
            break
    return found


def _looks_like_path(arg: str) -> bool:
    text = arg.replace("\\", "/")
    return (
        "/" in text
        and not text.startswith(("/", "-"))
        and "\n" not in text
        and " " not in text
        and len(text) < 1024
    )


def check_grader_files(
    grader: GraderConfig,
    *,
    file: str | None,
    field: str | None,
    line: int | None = None,
    also_in: tuple[Path, ...] = (),
) -> None:
    """Refuse, before anything runs, a command that names a script that is not there: next to
    the grader file, nor in the workspace it will run in. A typo in a path must not become a
    failure charged to the agent."""
    if grader.type == "program":
        if grader.shell:
            return
        argv, key, offset = [grader.program, *grader.args], "args", -1
    elif isinstance(grader.command, str):
        return
    else:
        argv, key, offset = list(grader.command), "command", 0

    def where(i: int) -> str:
        name = "program" if key == "args" and i == 0 else f"{key}.{i + offset}"
        return f"{field}.{name}" if field else name

    for rel, name in helper_files(grader):  # not `key`: where() reads it
        try:
            checked_helper(grader, rel)
        except ValueError as exc:
            raise ConfigError(
                str(exc), file=file, line=line, field=f"{field}.{name}" if field else name
            ) from None
    if grader.source_dir is not None:
        root = grader_root(grader)
        for i, arg in enumerate(argv):
            if outside_project(arg, grader.source_dir, root):
                raise ConfigError(
                    f"{arg!r} names a file outside the grader's project folder ({root}), or a "
                    "link out of it: only files inside it are mounted (a folder holding "
                    ".gradebox/, .agentv/ or .git marks a project's root)",
                    file=file,
                    line=line,
                    field=where(i),
                )
    for i, rel, folder in mounted_folders(grader):
        try:
            refused = _refused_in(str(folder), folder.stat().st_mtime_ns)
        except OSError:
            continue  # gone: source_mounts says so
        if refused is not None:
            raise ConfigError(special(rel, refused), file=file, line=line, field=where(i))
    for i in named_script_paths(argv):
        arg = argv[i]
        bases = [grader.source_dir, *also_in] if grader.source_dir else list(also_in)
        if any(_pathnames.exists(base / arg.replace("\\", "/")) for base in bases if base):
            continue
        raise ConfigError(
            f"{arg!r} names a script that does not exist next to the grader file "
            f"({grader.source_dir or 'no folder'}) nor in the workspace; fix the path",
            file=file,
            line=line,
            field=where(i),
        )


HELPER_SCAN_LIMIT = 20_000
"""Entries a helper folder may hold: each is looked at for a ``.env`` before it is mounted."""


def special(rel: str, exc: Refused) -> str:
    """``look_through``'s refusal of an entry of the folder ``rel`` (relative to the grader's
    file), naming the entry the same way, in one line."""
    return f"{os.path.normpath(os.path.join(rel, exc.entry))!r} {exc.why}"


@functools.lru_cache(maxsize=256)
def _refused_in(folder: str, mtime_ns: int) -> Refused | None:
    """What ``source_mounts`` will refuse in ``folder``, looked at once however many tests
    share the folder (keyed by its mtime too; each run looks again as it mounts it)."""
    try:
        look_through(folder, SECRET_SCAN_LIMIT)
    except TooMany:
        return None  # not mounted whole
    except Refused as exc:
        return exc
    return None


def mounted_folders(grader: GraderConfig) -> list[tuple[int, str, Path]]:
    """The folders ``source_mounts`` may mount whole for ``grader``, each as ``(the index in
    its command of the argument naming a file in it, the folder relative to the grader's
    file, its host path)``: looked through before anything runs, as they are when mounted."""
    source = grader.source_dir
    argv = [grader.program, *grader.args] if grader.type == "program" else grader.command
    if source is None or isinstance(argv, str) or grader.dialect in ("pytest", "node-test"):
        return []
    root, found = grader_root(grader), {}
    for i, arg in enumerate(argv):
        rel = grader_file(arg, source, root)
        folder = _own_folder(source, rel, grader.declared_in) if rel is not None else None
        if folder is not None:
            found.setdefault(folder, i)
    return [(i, f, (source / f).resolve()) for f, i in sorted(found.items())]


def helper_files(grader: GraderConfig) -> list[tuple[str, str]]:
    """What a grader reads besides what its command names, as ``(path relative to its file,
    field)``: its ``files``, and each folder its ``env: PYTHONPATH`` names under ``/grader``
    (``/grader/src`` is ``src``, ``/grader-up1/src`` is ``../src``): a path the grader was
    told to import from is one it reads."""
    found = [(path, f"files.{i}") for i, path in enumerate(grader.files)]
    source = grader.source_dir
    for entry in grader.env.get("PYTHONPATH", "").split(":"):
        rel = _from_container_path(entry)
        if rel is None or source is None:
            continue
        host = Path(os.path.normpath(source / rel))
        seen = [k for k in (source, grader.declared_in) if k is not None]
        if not os.path.lexists(host) or any(host == k or host in k.parents for k in seen):
            continue  # nothing there, or /grader itself: what its command names is there
        found.append((rel, "env.PYTHONPATH"))
    return found


def uv_src_layout(argv: Any, source_dir: Path) -> str | None:
    """``uv run ...`` in a Python project laid out with ``src/``: the container path of that
    ``src`` (for ``PYTHONPATH``), else None.

    ``uv run`` installs the project it finds from its working folder up (AgentV runs a grader
    in the eval file's folder), which makes the packages under ``src/`` importable. Nothing is
    installed in a grader's container (no network), so AgentV files that rely on it get the
    same packages by ``PYTHONPATH`` instead; the folder is then mounted as any that
    ``PYTHONPATH`` names (``helper_files``). The search stops at the project folder."""
    if not isinstance(argv, list) or argv[:2] != ["uv", "run"]:
        return None
    root = project_folder(source_dir)
    for folder in (source_dir, *source_dir.parents):
        if not _inside(folder, root):
            return None
        if (folder / "pyproject.toml").is_file():
            src = folder / "src"
            if not src.is_dir() or src.is_symlink():
                return None
            return container_path(PurePosixPath(os.path.relpath(src, source_dir)).as_posix())
    return None


def _from_container_path(path: str) -> str | None:
    """``container_path`` undone: ``/grader/x`` -> ``x``, ``/grader-up2/x`` -> ``../../x``."""
    head, _, rest = PurePosixPath(path).as_posix().lstrip("/").partition("/")
    if head == CONTAINER_GRADER_DIR.lstrip("/"):
        return rest or "."
    up = head.removeprefix(CONTAINER_GRADER_DIR.lstrip("/") + "-up")
    if up != head and up.isdigit() and 0 < int(up) < 64:
        return "/".join([".."] * int(up) + ([rest] if rest else []))
    return None


def checked_helper(grader: GraderConfig, rel: str) -> tuple[str, Path]:
    """A helper file or folder of ``grader``, checked: ``(its path relative to the grader's
    folder as mounted, the host path)``. ``ValueError`` says, in one line, why it is refused:
    absolute, missing, out of the project folder (by ``..`` or by a link), a ``.env`` or a
    folder holding one, or the grader file's folder or one above it (the suite, its answers)."""
    source = grader.source_dir
    if source is None:
        raise ValueError("a grader given without a file has no folder its files are next to")
    text = rel.replace("\\", "/")
    if text.startswith("/"):
        raise ValueError(f"{rel!r} is absolute: name it relative to the grader's file")
    root = grader_root(grader) or source
    lexical = Path(os.path.normpath(source / text))
    try:
        resolved = (source / text).resolve()
        exists = resolved.exists()
    except (OSError, RuntimeError):  # a link loop
        exists = False
    if not _inside(lexical, root) or (exists and not _inside(resolved, root)):
        raise ValueError(
            f"{rel!r} leads out of the project folder {root} (by '..' or a "
            "link): only files inside it are mounted"
        )
    if not exists:
        raise ValueError(f"{rel!r} does not exist next to the grader file ({source})")
    for kept in (source, grader.declared_in):
        if kept is not None and (resolved == kept or resolved in kept.parents):
            raise ValueError(
                f"{rel!r} is the grader file's folder or one above it (the suite "
                "and its answers): name the folder it reads"
            )
    if secret_name(lexical.name) or secret_name(resolved.name):
        raise ValueError(f"{rel!r} is a .env file: keys are never mounted")
    if _in_git(lexical, resolved):
        raise ValueError(
            f"{rel!r} is in a repository's .git (its config may hold a token): never mounted"
        )
    kind = file_kind(resolved.stat().st_mode)  # links resolved: inside the project
    if kind is not None:
        raise ValueError(f"{rel!r} is {kind}: only regular files and folders are given to a grader")
    if not resolved.is_dir():  # a file: hashed, copied and mounted as it is
        return PurePosixPath(os.path.relpath(resolved, source)).as_posix(), resolved
    try:
        held = look_through(resolved, HELPER_SCAN_LIMIT, links_out=False)
    except TooMany:
        raise ValueError(
            f"{rel!r} holds more than {HELPER_SCAN_LIMIT} entries (each is checked for a .env)"
        ) from None
    except Refused as exc:  # copied and hashed: a link out of it is refused too
        raise ValueError(special(rel, exc)) from None
    if held.secrets:
        raise ValueError(
            f"{rel!r} holds {resolved.name}/{held.secrets[0]}: a folder with a "
            ".env or a .git is never mounted"
        )
    return PurePosixPath(os.path.relpath(resolved, source)).as_posix(), resolved


def helper_mounts(
    grader: GraderConfig, user: str, scratch: Path, taken: list[Mount]
) -> list[Mount]:
    """Mount, read-only, the grader's helper files and folders (``helper_files``) where its
    command sees them, unless a mount of its command's files already shows them. A folder the
    container user could not enter (a 0700 one) is copied first, without following links."""
    mounts: list[Mount] = []
    for rel, _ in helper_files(grader):
        try:
            name, host = checked_helper(grader, rel)
        except ValueError as exc:  # checked by `validate`/`run` first; `grade` meets it here
            raise ConfigError(str(exc), field="files") from None
        target = container_path(name)
        if any(
            target == m.target or target.startswith(m.target.rstrip("/") + "/")
            for m in [*taken, *mounts]
        ):
            continue
        if host.is_dir() and not enterable(host, user):
            # By descriptor, links as links (checked_helper refused every other kind), the
            # copy the container user's: it may be as closed as the original.
            copy = scratch / "helpers" / name.replace("../", "_up_/")
            uid, _, gid = user.partition(":")
            copy_tree(host, copy, (int(uid), int(gid or uid)))
            host = copy
        mounts.append(Mount(host, target, read_only=True))
        if host.is_dir():  # what the one rule masks (a submodule's .git file): as any folder
            mounts += masked_secrets(host, target, scratch) or []
    return mounts


def translate_args(
    argv: list[str], source_dir: Path | None, root: Path | None = None
) -> tuple[list[str], list[str]]:
    """Rewrite arguments naming files next to the grader file to their container paths.

    Returns the new argv and the relative paths of the files it refers to.
    """
    used: list[str] = []
    out = []
    for arg in argv:
        rel = grader_file(arg, source_dir, root)
        if rel is None:
            out.append(arg)
        else:
            used.append(rel)
            out.append(container_path(rel))
    return out, used


def build_command(grader: GraderConfig) -> tuple[list[str], list[str]]:
    """The argv to run, and the files next to the grader file that it refers to."""
    root = grader_root(grader)
    if grader.type == "program":
        argv, used = translate_args([grader.program, *grader.args], grader.source_dir, root)
        if grader.shell:
            # As a shell would see "program arg1 arg2": joined with spaces, not quoted.
            return ["/bin/sh", "-c", " ".join(argv)], used
        return argv, used
    if isinstance(grader.command, str):
        return ["/bin/sh", "-c", grader.command], []
    return translate_args(grader.command, grader.source_dir, root)


def grader_root(grader: GraderConfig) -> Path | None:
    """The project folder of the file that declared ``grader`` (its ``cwd`` cannot widen it)."""
    where = grader.declared_in or grader.source_dir
    return project_folder(where) if where is not None else None


def grader_fingerprint(grader: GraderConfig, relative_to: Path | None = None) -> str:
    """What a verdict of ``grader`` depends on besides its input: its configuration and the
    bytes of every file next to it that its command runs. ``relative_to``: name its folder
    relative to this one (the same on every machine that holds a copy of the suite)."""
    where = str(grader.source_dir)
    if relative_to is not None and grader.source_dir is not None:
        where = os.path.relpath(grader.source_dir, relative_to)
    parts: list[object] = [grader.model_dump(mode="json"), where]
    if grader.source_dir is not None:
        parts += [file_digest(grader.source_dir / rel) for rel in build_command(grader)[1]]
        for rel, _ in helper_files(grader):  # a changed helper package changes its verdicts
            host = grader.source_dir / rel
            parts.append(_tree_digest(host) if host.is_dir() else file_digest(host))
    return digest(*parts)


def _tree_digest(folder: Path) -> str:
    """Every file below ``folder``, walked by descriptor: names and bytes; a link by what it
    says (never followed); nothing else is opened (``untrusted.hash_regular``)."""
    files = []
    try:
        for entering, here in walk_folders(folder):
            if not entering:
                continue
            rel = os.fsdecode(here.rel())
            for name, st in here.entries:
                if stat.S_ISDIR(st.st_mode):
                    continue
                if stat.S_ISLNK(st.st_mode):
                    what = "link:" + os.fsdecode(os.readlink(name, dir_fd=here.fd))
                else:
                    what = _digest_of(name, here.fd)
                files.append((os.path.join(rel, os.fsdecode(name)), what))
    except OSError:
        return "<unreadable>"
    return digest(*sorted(files))


def _digest_of(name: Path | str | bytes, dir_fd: int | None = None, follow: bool = False) -> str:
    """``digest(bytes)`` of a regular file, streamed; ``<unreadable>`` for anything else."""
    h = hashlib.sha256()
    if not hash_regular(name, h, dir_fd=dir_fd, follow=follow):
        return "<unreadable>"
    h.update(b"\0")
    return "sha256:" + h.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file, read once per run however many tests name it (keyed by its stat)."""
    try:
        st = path.stat()
    except OSError:
        return "<unreadable>"
    return _file_digest(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return _digest_of(path, follow=True)  # a link inside the project: what it points to


def source_mounts(
    source_dir: Path,
    used: list[str],
    user: str,
    scratch: Path,
    *,
    folders: bool = True,
    keep_out: Path | None = None,
) -> list[Mount]:
    """Mount, read-only, what the command names, each where ``translate_args`` put it.

    With ``folders`` (a grader, not a verifier or a target), a named file's own folder is
    mounted whole, so a script imports the modules beside it and reads its data: ``graders/``
    for ``graders/check.py``. Never the grader's folder itself or one above it, nor the folder
    of the file that declared it (``keep_out``): those hold the suite, its expected answers,
    its verifiers and ``.env``; nor a folder holding a ``.env`` file (one deeper in it, or a
    ``.git/config``, is masked; a folder too big to look through is not mounted whole). Any
    other named file is mounted alone, copied first when the container user could not read
    it."""
    mounts: list[Mount] = []
    covered: list[str] = []
    used = list(dict.fromkeys(used))
    if folders:
        for folder in sorted(
            {f for rel in used if (f := _own_folder(source_dir, rel, keep_out))},
            key=lambda f: (f.count("/"), f),
        ):
            host = (source_dir / folder).resolve()
            if any(folder.startswith(f"{c}/") for c in covered) or not enterable(host, user):
                continue
            # As exec's current folder: a .env or a repository's config anywhere below is
            # masked, and a folder too big to look through is not mounted whole.
            try:
                masks = masked_secrets(host, container_path(folder), scratch)
            except Refused as exc:  # checked by `validate`/`run` first; `grade` meets it here
                raise ConfigError(special(folder, exc)) from None
            if masks is not None:
                mounts += [Mount(host, container_path(folder), read_only=True), *masks]
                covered.append(folder)
    for rel in used:
        if any(rel.startswith(f"{c}/") for c in covered):
            continue
        path = source_dir / rel
        if path.stat().st_mode & 0o004 == 0:
            copy = scratch / "grader" / rel.replace("../", "_up_/")
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy_file(path, copy, 0o755 if os.access(path, os.X_OK) else 0o644)
            path = copy
        mounts.append(Mount(path.resolve(), container_path(rel), read_only=True))
    return mounts


def _own_folder(source_dir: Path, rel: str, keep_out: Path | None) -> str | None:
    """The folder of the named file ``rel`` when it may be mounted whole (see source_mounts)."""
    parent = PurePosixPath(rel).parent.as_posix()
    host = (source_dir / parent).resolve()
    for kept in (source_dir, keep_out):
        if kept is not None and (host == kept or host in kept.parents):
            return None
    try:
        if any(secret_name(e.name) for e in os.scandir(host)):
            return None
    except OSError:
        return None
    return parent


def prepare_grader(
    grader: GraderRecord | GraderConfig,
    workspace: Path | str,
    sandbox: Sandbox,
    *,
    images: ImageSource | None = None,
    image_id: str | None = None,
    labels: dict[str, str] | None = None,
    file: str | None = None,
    warm: bool = True,
    models: ModelHub | None = None,
    mask_workspace: bool = False,
) -> GraderRun:
    """``grader``'s run on ``workspace``, its container ready before the payload exists.

    Example::

        ready = prepare_grader(grader, workspace, box)   # while the agent still works
        result = ready.run(payload)                      # the agent is done
    """
    if hasattr(grader, "to_record"):  # a validated config, as a library user has it
        grader = grader.to_record()
    workspace = Path(workspace)
    if not workspace.is_dir():
        raise ConfigError(f"workspace {workspace} is not a directory")
    ref = grader.image or DEFAULT_IMAGE
    if image_id is None:
        image_id = (images or sandbox.images()).resolve(ref, grader.source_dir)
    run = GraderRun(
        sandbox,
        security=grader.security,
        grader=grader,
        image=(ref if isinstance(ref, str) else f"build:{ref.build}", image_id),
        models=models,
        target=grader.target,
        max_calls=grader.max_calls,
        file=file,
    )
    try:
        ws = run.view(workspace, writable=grader.workspace == "rw", masked=mask_workspace)
        command, used = build_command(grader)
        mounts: list[Mount] = []
        if grader.source_dir:
            mounts += source_mounts(
                grader.source_dir,
                used,
                run.user,
                run.scratch,
                folders=grader.dialect not in ("pytest", "node-test"),
                keep_out=grader.declared_in,
            )
        mounts += helper_mounts(grader, run.user, run.scratch, mounts)
    except BaseException:
        run.close()
        raise
    run.prepare(
        warm=warm,
        image=image_id,
        command=command,
        workspace=ws,
        workspace_ro=grader.workspace == "ro",
        workdir=workdir_in(CONTAINER_WORKSPACE, grader.sub_path),
        mounts=mounts,
        env=grader.env,
        timeout=grader.timeout,
        limits=grader.limits,
        security=grader.security,
        network=grader.network,
        labels=labels or {},
        name=grader.display_name(),
    )
    return run


def run_grader(
    grader: GraderConfig,
    payload: Payload | InlinePayload,
    workspace: Path | str,
    sandbox: Sandbox,
    *,
    image_id: str | None = None,
    images: ImageSource | None = None,
    labels: dict[str, str] | None = None,
    file: str | None = None,
    models: ModelHub | None = None,
    mask_workspace: bool = False,
) -> GraderResult:
    """Run ``grader`` once on ``payload`` with ``workspace`` mounted at $EVALUATE_WORKSPACE.

    Example::

        with get_sandbox() as box:
            result = run_grader(load_grader("grader.yaml"), Payload(output="42"), ".", box)
            print(result.status, result.score)
    """
    resolve_sub_path(Path(workspace), grader.sub_path, file=file)  # before any container
    # The public signature is spelt out (typed, documented); the run is prepare_grader's.
    ready = prepare_grader(
        grader.to_record(),
        workspace,
        sandbox,
        images=images,
        image_id=image_id,
        labels=labels,
        file=file,
        warm=False,
        models=models,
        mask_workspace=mask_workspace,
    )
    return ready.run(payload)
