"""A workspace's baseline, and ``file_changes``: the diff from it that every grader reads.

The host reads the workspace itself (``fstree``: by descriptor, any name, any depth, no link
followed) and writes what it finds as git objects into a store *outside* the workspace; git
then diffs two trees of that store and never opens a file of the workspace. So no name
(not UTF-8, ``.GIT``, ``git~1``, a newline), no depth, no ``.git`` folder and no attribute or
ignore file the agent wrote can make git skip, refuse or misread anything: whatever a grader
can read or run is in the diff, nothing is created or changed inside the workspace, and a
workspace that is (or holds) a repository keeps its history, index and files untouched.

Every snapshot is three trees, diffed in this order:

- ``work``: every file, link and special file: text in full (UTF-8 text that holds a NUL
  shows it as ␀, so a NUL cannot turn code into a binary file), anything else as ``Binary
  files ... differ`` (a file with holes is read by its data, never its holes);
- ``git``: what lies in a ``.git`` folder (or is a ``.git`` file), of the workspace or of any
  repository inside it, shown the same way after the rest: configuration, hooks, refs in full;
- ``ignored``: what the template's ``.gitignore`` files (as they were at the baseline, never as
  the agent left them) ignore, listed by name and status only, unless ``include_ignored``.

A folder whose path passes ``PATH_MAX`` (or that lies 1,000 folders down) is kept as one flat
folder at its top: each entry below it under a digest of its path and its own name, and an
index (``.gradebox-folders``) of which folder holds what; so git never handles a path longer
than ``PATH_MAX`` plus two names, and the work stays linear however deep the agent nested.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import os
import shutil
import stat
import subprocess
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import WorkspaceError
from .fstree import Folder, walk_folders
from .gitignore import IgnoreFile, parse_ignore_file
from .scratch import new_scratch

__all__ = ["DEFAULT_DIFF_CAP", "Baseline", "truncate_diff"]

DEFAULT_DIFF_CAP = 1 << 20
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Past this many bytes of path below the workspace, or this many folders down, a folder is
# flattened (see above): git itself walks trees no deeper than 2,048 (core.maxTreeDepth).
DEEP_PATH = 4096
DEEP_FOLDERS = 1000
_NUL_SHOWN = "\u2400".encode()  # ␀
_SMALL_FILE = 8 << 20  # read whole; larger files are streamed through a temporary file
_MAX_IGNORE_FILE = 1 << 20
_FLAT_INDEX = b".gradebox-folders"
_FLAT_HEADER = (
    b"# gradebox: the paths below this folder pass PATH_MAX, so it is shown flat: each entry "
    b"as DIGEST-NAME, and here one line each: KIND DIGEST PARENT-DIGEST NAME (- is this folder)\n"
)
_KINDS = ("work", "git", "ignored")

# $GIT_DIR/info/attributes: no attribute changes how a blob is read or diffed.
_NEUTRAL_ATTRIBUTES = "* -text !eol -filter -ident !working-tree-encoding !diff !merge\n"
_GIT_ENV = {
    # No user or system configuration: an external diff, a textconv or a pager on the
    # runner's machine must not change what a diff says.
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}
_GIT_OPTS = ["-c", "core.quotepath=false", "-c", "diff.noprefix=false",
             "-c", "core.hooksPath=/dev/null"]  # fmt: skip
_DIFF = ["diff-tree", "-r", "-p", "-M", "--no-color", "--no-ext-diff", "--no-textconv",
         "--src-prefix=a/", "--dst-prefix=b/"]  # fmt: skip
_IGNORED_NOTE = (
    b"[gradebox: changed paths that the template's .gitignore files ignore; "
    b"A added, M modified, D deleted, T type changed; content not shown]\n"
)


class _Store:
    """A bare git repository outside the workspace, written to directly (loose objects)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.objects = path / "objects"
        self._fanout: set[str] = set()

    def init(self) -> None:
        proc = subprocess.run(
            ["git", "init", "-q", "--bare", str(self.path)], capture_output=True,
            env={**os.environ, **_GIT_ENV}, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise WorkspaceError(f"git init failed in {self.path}: {proc.stderr.decode()[-200:]}")
        (self.path / "info").mkdir(exist_ok=True)
        (self.path / "info" / "attributes").write_text(_NEUTRAL_ATTRIBUTES)

    def put(self, kind: bytes, data: bytes) -> str:
        raw = b"%s %d\0%s" % (kind, len(data), data)
        sha = hashlib.sha1(raw).hexdigest()
        try:
            out = os.open(self._path_of(sha), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                          0o444)  # fmt: skip
        except FileExistsError:
            return sha  # content-addressed: it is there already
        try:
            os.write(out, zlib.compress(raw, 1))
        finally:
            os.close(out)
        return sha

    def _path_of(self, sha: str) -> Path:
        folder = self.objects / sha[:2]
        if sha[:2] not in self._fanout:
            folder.mkdir(exist_ok=True)
            self._fanout.add(sha[:2])
        return folder / sha[2:]

    def put_file(self, fd: int, st: os.stat_result, keep: bool) -> str:
        """The blob for a regular file: its content when ``keep`` and it is text (a NUL in
        UTF-8 text made visible as ␀: a NUL must not turn code into "Binary files differ"),
        else a stand-in that differs exactly when the content does."""
        size = st.st_size
        if st.st_blocks * 512 < size:
            return self.put(b"blob", _sparse_stand_in(fd, st))
        if size > _SMALL_FILE:
            return self._put_large(fd, size, keep)
        data = _read_exactly(fd, size)
        text = _as_text(data) if keep else None
        if text is not None:
            return self.put(b"blob", text)
        return self.put(b"blob", _stand_in(size, hashlib.sha1(b"blob %d\0%s" % (size, data))))

    def _put_large(self, fd: int, size: int, keep: bool) -> str:
        """``put_file`` in two passes of 1 MiB chunks: what it is, then what is stored."""
        digest = hashlib.sha1(b"blob %d\0" % size)
        utf8 = codecs.getincrementaldecoder("utf-8")()
        valid, nuls = keep, 0

        def scan(chunk: bytes) -> None:
            nonlocal valid, nuls
            digest.update(chunk)
            if keep:
                nuls += chunk.count(b"\0")
            if valid:
                try:
                    utf8.decode(chunk)
                except UnicodeDecodeError:
                    valid = False

        _stream(fd, size, scan)
        if not keep or (nuls and not (valid and _final(utf8))):
            return self.put(b"blob", _stand_in(size, digest))
        stored = size + (len(_NUL_SHOWN) - 1) * nuls
        digest = hashlib.sha1(b"blob %d\0" % stored)
        z = zlib.compressobj(1)
        tmp = self.path / f"tmp-{os.getpid()}-{fd}"
        with open(tmp, "wb") as out:

            def store(chunk: bytes) -> None:
                chunk = chunk.replace(b"\0", _NUL_SHOWN)
                digest.update(chunk)
                out.write(z.compress(chunk))

            out.write(z.compress(b"blob %d\0" % stored))
            os.lseek(fd, 0, os.SEEK_SET)
            _stream(fd, size, store)
            out.write(z.flush())
        sha = digest.hexdigest()
        os.replace(tmp, self._path_of(sha))
        return sha

    def tree(self, entries: list[tuple[bytes, bytes, str]]) -> str:
        """A tree object of ``(name, mode, sha)``, in git's order (a folder sorts as name/)."""
        entries.sort(key=lambda e: e[0] + b"/" if e[1] == b"40000" else e[0])
        return self.put(b"tree", b"".join(m + b" " + n + b"\0" + bytes.fromhex(s)
                                          for n, m, s in entries))  # fmt: skip


def _read_exactly(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    _stream(fd, size, parts.append)
    return b"".join(parts)


def _stream(fd: int, size: int, sink) -> None:  # type: ignore[no-untyped-def]
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise OSError("a file shrank while it was read")
        sink(chunk)
        left -= len(chunk)


def _stand_in(size: int, digest: hashlib._Hash) -> bytes:
    # The NUL keeps it binary for git: a diff says "Binary files ... differ", nothing more.
    return b"\0[gradebox: binary, %d bytes, git blob %s]\n" % (size, digest.hexdigest().encode())


def _as_text(data: bytes) -> bytes | None:
    """What git is shown of a file: itself when it holds no NUL, UTF-8 text with its NULs
    made visible, or None (binary)."""
    if b"\0" not in data:
        return data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data.replace(b"\0", _NUL_SHOWN)


def _final(decoder: codecs.IncrementalDecoder) -> bool:
    """Did the text end on a whole UTF-8 character?"""
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _sparse_stand_in(fd: int, st: os.stat_result) -> bytes:
    """A file with holes (``truncate -s 1T``) is read by its data alone: reading its holes
    would take the host hours for nothing."""
    digest = hashlib.sha1()
    offset = 0
    try:
        while offset < st.st_size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no data past offset
                    raise
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            digest.update(b"%d %d\n" % (start, end - start))
            os.lseek(fd, start, os.SEEK_SET)
            _stream(fd, end - start, digest.update)
            offset = end
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        # No SEEK_DATA here: told apart by what any write changes (its ctime).
        digest.update(b"%d %d %d" % (st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
    return b"\0[gradebox: sparse file, %d bytes, %d allocated, data digest %s]\n" % (
        st.st_size, st.st_blocks * 512, digest.hexdigest().encode())  # fmt: skip


def _special(mode: int) -> bytes:
    what = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return f"[gradebox: not a regular file: {what}]\n".encode()


def _quote(name: bytes) -> bytes:
    """A name on one line: printable ASCII as itself, every other byte (and \\) as \\xNN."""
    return b"".join(bytes([c]) if 32 < c < 127 and c != 92 else b"\\x%02x" % c for c in name)


@dataclass
class _Flat:
    """A subtree past ``DEEP_PATH``, kept as one folder (see the module docstring)."""

    entries: list[tuple[bytes, bytes, str]] = field(default_factory=list)
    index: list[bytes] = field(default_factory=list)


@dataclass
class _Node:
    """What a walk keeps for one folder while it is open."""

    rel: bytes | None  # its path, or None inside a flattened subtree
    kind: str  # where what it holds goes, unless "work" decides entry by entry
    rules: tuple[tuple[int, IgnoreFile], ...] = ()  # (its folder's path length, rules)
    trees: dict[str, list[tuple[bytes, bytes, str]]] = field(
        default_factory=lambda: {k: [] for k in _KINDS}
    )
    flat: _Flat | None = None
    token: bytes = b""


@dataclass
class _Cached:
    size: int
    mtime: int
    ctime: int
    keep: bool
    sha: str


class Baseline:
    """Snapshot a workspace now; ``diff()`` later gives the diff of every change.

    Example::

        base = Baseline.take(workspace)
        ...  # the agent edits files
        print(base.diff())
        base.discard()
    """

    def __init__(self, root: Path, store: Path, include_ignored: bool) -> None:
        self.root = root
        self.store = store
        self.include_ignored = include_ignored
        self._objects = _Store(store)
        # The template's ignore rules and repositories, by folder path, as at the baseline.
        self._ignore: dict[bytes, IgnoreFile] = {}
        self._repos: set[bytes] = set()
        self._cache: dict[tuple[int, int], _Cached] = {}
        self._before: dict[str, str] = {}

    @classmethod
    def take(
        cls, root: Path, *, include_ignored: bool = False, store: Path | None = None
    ) -> Baseline:
        if shutil.which("git") is None:
            raise WorkspaceError("git is needed on the host to compute file_changes")
        store = store or new_scratch("baseline")
        base = cls(root.resolve(), store, include_ignored)
        try:
            base._objects.init()
            base._before = base._snapshot(first=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise WorkspaceError(f"cannot take a baseline of the workspace: {exc}") from None
        return base

    # -----------------------------------------------------------------------------------
    # Snapshots.

    def _snapshot(self, first: bool = False) -> dict[str, str]:
        """The three trees of the workspace as it is now."""
        top: dict[str, str] = {}
        with contextlib.closing(walk_folders(self.root)) as walk:  # its folder closed on error
            for entering, folder in walk:
                if entering:
                    self._enter(folder, first)
                else:
                    self._leave(folder, top)
        return top

    def _enter(self, folder: Folder, first: bool) -> None:
        parent: _Node | None = folder.parent.data if folder.parent else None
        node = self._node_of(folder, parent, first)
        folder.data = node
        for name, st in folder.entries:
            if stat.S_ISDIR(st.st_mode):
                continue  # entered next; added to this folder's trees when it is left
            kind = self._kind_of(node, name, False)
            sha, mode = self._blob(folder.fd, name, st, keep=kind != "ignored")
            if node.flat is not None:
                node.flat.entries.append((self._token(node, name) + b"-" + name, mode, sha))
                node.flat.index.append(b"file %s %s %s\n" % (
                    self._token(node, name), node.token or b"-", _quote(name)))  # fmt: skip
            else:
                node.trees[kind].append((name, mode, sha))

    def _node_of(self, folder: Folder, parent: _Node | None, first: bool) -> _Node:
        if parent is None:
            return self._with_rules(_Node(b"", "work"), folder, first)
        kind = self._kind_of(parent, folder.name, True)
        if parent.flat is not None:  # below a flattened folder: one more line of its index
            token = self._token(parent, folder.name)
            parent.flat.index.append(b"folder %s %s %s\n" % (
                token, parent.token or b"-", _quote(folder.name)))  # fmt: skip
            return _Node(None, kind, flat=parent.flat, token=token)
        assert parent.rel is not None
        if folder.length > DEEP_PATH or folder.depth > DEEP_FOLDERS:
            return _Node(None, kind, flat=_Flat())
        rel = parent.rel + b"/" + folder.name if parent.rel else folder.name
        node = _Node(rel, kind, rules=parent.rules if rel not in self._repos else ())
        return self._with_rules(node, folder, first) if kind == "work" else node

    def _with_rules(self, node: _Node, folder: Folder, first: bool) -> _Node:
        """Record (at the baseline) and apply the folder's own ignore file and repository."""
        assert node.rel is not None
        if first:
            names = dict(folder.entries)
            dot_git = names.get(b".git")
            if node.rel and dot_git is not None and not stat.S_ISLNK(dot_git.st_mode):
                self._repos.add(node.rel)
                node.rules = ()
            rules = names.get(b".gitignore")
            if not self.include_ignored and rules is not None and stat.S_ISREG(rules.st_mode):
                parsed = parse_ignore_file(_read_small(folder.fd, b".gitignore"))
                if parsed is not None:
                    self._ignore[node.rel] = parsed
        if node.rel in self._ignore:
            node.rules = (*node.rules, (len(node.rel), self._ignore[node.rel]))
        return node

    def _kind_of(self, node: _Node, name: bytes, is_dir: bool) -> str:
        if node.kind != "work" or node.flat is not None:
            return node.kind
        if name == b".git":
            return "git"
        if node.rules:
            assert node.rel is not None
            rel = node.rel + b"/" + name if node.rel else name
            for base_len, rules in reversed(node.rules):  # the deepest file decides first
                decided = rules.decide(name, rel[base_len + bool(base_len) :], is_dir)
                if decided is not None:
                    return "ignored" if decided else "work"
        return "work"

    @staticmethod
    def _token(node: _Node, name: bytes) -> bytes:
        return hashlib.sha256(node.token + b"/" + name).hexdigest()[:32].encode()

    def _blob(self, dir_fd: int, name: bytes, st: os.stat_result, keep: bool) -> tuple[str, bytes]:
        """``(sha, git mode)`` of one entry that is not a folder."""
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            return self._objects.put(b"blob", os.readlink(name, dir_fd=dir_fd)), b"120000"
        if not stat.S_ISREG(mode):
            return self._objects.put(b"blob", _special(mode)), b"100644"
        git_mode = b"100755" if mode & 0o111 else b"100644"
        key = (st.st_dev, st.st_ino)
        hit = self._cache.get(key)
        # A file the agent touched has a newer ctime, which nothing it runs can set back.
        if hit and (hit.size, hit.mtime, hit.ctime, hit.keep) == (
            st.st_size, st.st_mtime_ns, st.st_ctime_ns, keep):  # fmt: skip
            return hit.sha, git_mode
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)  # fmt: skip
        try:
            now = os.fstat(fd)
            if not stat.S_ISREG(now.st_mode):
                return self._objects.put(b"blob", _special(now.st_mode)), b"100644"
            sha = self._objects.put_file(fd, now, keep)
        finally:
            os.close(fd)
        self._cache[key] = _Cached(now.st_size, now.st_mtime_ns, now.st_ctime_ns, keep, sha)
        return sha, git_mode

    def _leave(self, folder: Folder, top: dict[str, str]) -> None:
        node: _Node = folder.data
        parent: _Node | None = folder.parent.data if folder.parent else None
        if node.flat is not None and (parent is None or parent.flat is None):
            # The top of a flattened subtree: its entries and index become one folder.
            flat = node.flat
            entries = list(flat.entries)
            if flat.index:
                index = self._objects.put(b"blob", b"".join([_FLAT_HEADER, *flat.index]))
                entries.append((_FLAT_INDEX, b"100644", index))
            if parent is not None and entries:
                parent.trees[node.kind].append((folder.name, b"40000", self._objects.tree(entries)))
            return
        if node.flat is not None:
            return  # inside a flattened subtree: its index already has it
        for kind, entries in node.trees.items():
            sha = self._objects.tree(entries) if entries else None
            if parent is None:
                top[kind] = sha or self._objects.put(b"tree", b"")
            elif sha is not None:
                parent.trees[kind].append((folder.name, b"40000", sha))

    # -----------------------------------------------------------------------------------
    # The diff.

    def diff(self, cap: int = DEFAULT_DIFF_CAP) -> str:
        """The diff from the baseline (see the module docstring); the output is streamed,
        and what passes ``cap`` bytes is counted, not kept."""
        try:
            after = self._snapshot()
            head = bytearray()
            total = 0
            for kind in ("work", "git"):
                total = self._stream([*_DIFF, self._before[kind], after[kind]], head, total, cap)
            args = ["diff-tree", "-r", "--name-status", "--no-renames"]
            total = self._stream([*args, self._before["ignored"], after["ignored"]], head,
                                 total, cap, preamble=_IGNORED_NOTE)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            raise WorkspaceError(f"cannot diff the workspace: {exc}") from None
        return _cut(bytes(head), total, cap)

    def _stream(self, args: list[str], head: bytearray, total: int, cap: int,
                preamble: bytes = b"") -> int:  # fmt: skip
        """Append git's output to ``head`` up to ``cap + 1`` bytes; count the rest."""
        with subprocess.Popen(
            ["git", *_GIT_OPTS, f"--git-dir={self.store}", *args], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=self.store, env={**os.environ, **_GIT_ENV},
        ) as proc:  # fmt: skip
            assert proc.stdout is not None and proc.stderr is not None
            for chunk in _chunks(proc.stdout, preamble):
                room = cap + 1 - len(head)
                if room > 0:
                    head += chunk[:room]
                total += len(chunk)
            err = proc.stderr.read()
            proc.wait()
        if proc.returncode != 0:
            lines = err.decode(errors="replace").strip().splitlines()
            raise WorkspaceError(f"git diff failed in {self.store}: {lines[-1] if lines else '?'}")
        return total

    def discard(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)


def _chunks(stream, preamble: bytes) -> Iterator[bytes]:  # type: ignore[no-untyped-def]
    """The stream's chunks, led by ``preamble`` when there is any."""
    first = True
    while chunk := stream.read(1 << 16):
        if first and preamble:
            yield preamble
        first = False
        yield chunk


def _read_small(dir_fd: int, name: bytes) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return os.read(fd, _MAX_IGNORE_FILE) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)


def truncate_diff(diff: str, cap: int) -> str:
    """Cut at a line boundary under ``cap`` bytes and say how much was dropped; never silently."""
    data = diff.encode("utf-8", errors="backslashreplace")
    return _cut(data[: cap + 1], len(data), cap)


def _cut(head: bytes, total: int, cap: int) -> str:
    # Bytes that are not UTF-8 (names, Latin-1 text) stay visible as \xNN.
    if total <= cap:
        return head.decode("utf-8", errors="backslashreplace")
    cut = head.rfind(b"\n", 0, cap) + 1 or cap
    kept = head[:cut].decode("utf-8", errors="backslashreplace")
    return (
        f"{kept}[gradebox: file_changes truncated at {cap} bytes: "
        f"{total - cut} of {total} bytes dropped]\n"
    )
