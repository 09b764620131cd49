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

Every host step here is bounded, whatever the agent wrote (the workspace quota allows a
250 MiB file of newlines, and a 16 MiB file under 20,000 names costs it one file):

- a file is diffed line by line only up to ``DIFF_FILE_BYTES`` and ``DIFF_FILE_LINES`` (git
  needs about 44 bytes per line); a larger text file is summarised (size, lines, digest), so
  a change to it shows as its summary changing;
- a file with several names (hard links) is shown in full under the first name the walk meets
  and summarised under the others: its bytes are counted, read and diffed once;
- before git diffs anything, the text it would compare and the path of every changed entry
  (git holds them all at once) are counted from git's listing of the changes, read as it
  streams, never whole; past ``DIFF_TOTAL_BYTES`` git is stopped, the diff is not made and the
  step is an error naming that limit (96,000 empty files under 4 KB paths once took the
  runner to 1.25 GiB with the listing read whole);
- git runs under an address-space cap (``GIT_MEMORY``, rlimit through ``prlimit``), and the
  whole step under a time budget (``DIFF_SECONDS``): past either, an error naming it.

The error is the test's (``file_changes`` could not be made); the run goes on.

What the diff cannot show whole is recorded beside it (``FileChanges``, from the same streamed
listing): the size git wrote against the cap, each changed file not diffed line by line and
why (binary, over either bound, with holes), and the real path of each name git's headers
quote (a control character, ``"`` or ``\\``), up to ``NOTED_BYTES`` of names, the rest counted.

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
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..core.atomic import out_of_space
from ..core.fstree import Folder, walk_folders
from ..core.gitignore import IgnoreFile, parse_ignore_file
from ..core.scratch import new_scratch
from ..errors import WorkspaceError

__all__ = ["DEFAULT_DIFF_CAP", "Baseline", "ChangedFile", "FileChanges", "truncate_diff"]

DEFAULT_DIFF_CAP = 1 << 20
# Past this many bytes of path below the workspace, or this many folders down, a folder is
# flattened (see above): git itself walks trees no deeper than 2,048 (core.maxTreeDepth).
DEEP_PATH = 4096
DEEP_FOLDERS = 1000
_NUL_SHOWN = "\u2400".encode()  # ␀
# The bounds (see the module docstring). A file over either of the first two is summarised.
DIFF_FILE_BYTES = 4 << 20
DIFF_FILE_LINES = 100_000
DIFF_TOTAL_BYTES = 64 << 20  # text and paths git may compare in one diff (1 MiB is shown)
DIFF_SECONDS = 60.0  # a snapshot and git's diffs, together
# git's address space: it holds the whole listing of changes (a path twice, ~200 bytes more an
# entry) before it writes a byte of it, so this bounds it where no count of ours can (96,000
# files under 4 KB paths took it to 0.78 GiB). A diff within DIFF_TOTAL_BYTES needs far less:
# the listing's paths, then one file pair at a time (DIFF_FILE_BYTES, DIFF_FILE_LINES).
GIT_MEMORY = 512 << 20
_MAX_IGNORE_FILE = 1 << 20
# The bytes of names a diff's notes list (a quoted name, content not diffed): past, counted.
NOTED_BYTES = 256 << 10
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
_LINK_NOTE = b"[gradebox: another name (hard link) of %s, shown there: %d bytes, git blob %s]\n"
_IGNORED_NOTE = (
    b"[gradebox: changed paths that the template's .gitignore files ignore; "
    b"A added, M modified, D deleted, T type changed; content not shown]\n"
)


def _git_error(message: str, stderr: bytes) -> Exception:
    """git's failure: a full disk under the store (git says so in the C locale, _GIT_ENV) is
    the scratch folder's ENOSPC, which ends the run; anything else is this test's error."""
    if b"No space left on device" in stderr:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return WorkspaceError(message)


class _Store:
    """A bare git repository outside the workspace, written to directly (loose objects)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.objects = path / "objects"
        self._fanout: set[str] = set()
        self.text_bytes: dict[str, int] = {}  # blobs git would diff line by line: their size
        # Blobs that stand in for a file not diffed line by line: why, and the file's size.
        self.cut: dict[str, tuple[str, int]] = {}

    def init(self) -> None:
        proc = subprocess.run(
            ["git", "init", "-q", "--bare", str(self.path)],
            capture_output=True,
            env={**os.environ, **_GIT_ENV},
            check=False,
        )
        if proc.returncode != 0:
            raise _git_error(
                f"git init failed in {self.path}: {proc.stderr.decode()[-200:]}", proc.stderr
            )
        (self.path / "info").mkdir(exist_ok=True)
        (self.path / "info" / "attributes").write_text(_NEUTRAL_ATTRIBUTES)

    def put(self, kind: bytes, data: bytes) -> str:
        raw = b"%s %d\0%s" % (kind, len(data), data)
        sha = hashlib.sha1(raw).hexdigest()
        try:
            out = os.open(
                self._path_of(sha), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444
            )
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
        """The blob for a regular file: its content when ``keep`` and it is text small enough
        to diff line by line (a NUL in UTF-8 text made visible as ␀: a NUL must not turn code
        into "Binary files differ"), else a stand-in that differs exactly when the content
        does (a summary for large text)."""
        size = st.st_size
        if st.st_blocks * 512 < size:
            return self._stood_in(_sparse_stand_in(fd, st), "sparse", size, keep)
        if size > DIFF_FILE_BYTES:
            summary = _summary_of(fd, size, keep)
            why = "binary" if summary.startswith(b"\0") else "size"
            return self._stood_in(summary, why, size, keep)
        data = _read_exactly(fd, size)
        text = _as_text(data) if keep else None
        digest = hashlib.sha1(b"blob %d\0%s" % (size, data))
        if text is None:
            return self._stood_in(_stand_in(size, digest), "binary", size, keep)
        if text.count(b"\n") > DIFF_FILE_LINES:
            summary = _text_summary(size, text.count(b"\n"), digest)
            return self._stood_in(summary, "lines", size, keep)
        sha = self.put(b"blob", text)
        self.text_bytes[sha] = len(text)
        return sha

    def _stood_in(self, blob: bytes, why: str, size: int, keep: bool) -> str:
        """The blob of a file not diffed line by line, remembered with why (a diff's notes
        say it: a file too large to diff must never read as if emptied)."""
        sha = self.put(b"blob", blob)
        if keep:  # an ignored file is listed by name only: there is nothing to explain
            self.cut[sha] = (why, size)
        return sha

    def tree(self, entries: list[tuple[bytes, bytes, str]]) -> str:
        """A tree object of ``(name, mode, sha)``, in git's order (a folder sorts as name/)."""
        entries.sort(key=lambda e: e[0] + b"/" if e[1] == b"40000" else e[0])
        return self.put(
            b"tree", b"".join(m + b" " + n + b"\0" + bytes.fromhex(s) for n, m, s in entries)
        )


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


def _text_summary(size: int, lines: int, digest: hashlib._Hash) -> bytes:
    # No NUL: git shows the summary as a changed line, so a change to the file is visible.
    return (
        b"[gradebox: text, %d bytes, %d lines: past %d bytes or %d lines a file is not diffed "
        b"line by line; git blob %s]\n"
        % (size, lines, DIFF_FILE_BYTES, DIFF_FILE_LINES, digest.hexdigest().encode())
    )


def _summary_of(fd: int, size: int, keep: bool) -> bytes:
    """What a file too large to diff shows, read once in 1 MiB chunks: a summary of its
    text, or the binary stand-in."""
    digest = hashlib.sha1(b"blob %d\0" % size)
    utf8 = codecs.getincrementaldecoder("utf-8")()
    valid, nuls, lines = keep, 0, 0

    def scan(chunk: bytes) -> None:
        nonlocal valid, nuls, lines
        digest.update(chunk)
        nuls += chunk.count(b"\0")
        lines += chunk.count(b"\n")
        if valid:
            try:
                utf8.decode(chunk)
            except UnicodeDecodeError:
                valid = False

    _stream(fd, size, scan)
    if not keep or (nuls and not (valid and _final(utf8))):
        return _stand_in(size, digest)
    return _text_summary(size, lines, digest)


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
        st.st_size,
        st.st_blocks * 512,
        digest.hexdigest().encode(),
    )


def _shown_path(folder: Folder, name: bytes) -> bytes:
    """A file's path below the workspace on one line, for a note (its folder's path costs
    its depth: past ``DEEP_PATH`` only the name is given)."""
    if folder.length > DEEP_PATH:
        return b".../" + _quote(name)
    rel = folder.rel()
    return _quote(rel + b"/" + name if rel else name)


def _special(mode: int) -> bytes:
    what = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return f"[gradebox: not a regular file: {what}]\n".encode()


# How git writes a byte of a name in its headers (quote.c, cq_lookup): these few by letter,
# the other control bytes in octal, and `"` and `\` escaped; any of them quotes the name.
_GIT_ESCAPES = {7: b"\\a", 8: b"\\b", 9: b"\\t", 10: b"\\n", 11: b"\\v", 12: b"\\f", 13: b"\\r",
                34: b'\\"', 92: b"\\\\"}  # fmt: skip


def _git_quoted(path: bytes) -> bytes | None:
    """What stands between the quotes where git's diff headers quote ``path`` (after ``a/``
    or ``b/``), or None when git shows it as it is. Bytes past ASCII stay as they are
    (``core.quotepath=false``, _GIT_OPTS)."""
    if not any(c < 32 or c in (34, 92, 127) for c in path):
        return None
    return b"".join(
        _GIT_ESCAPES.get(c) or (b"\\%03o" % c if c < 32 or c == 127 else bytes([c])) for c in path
    )


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


@dataclass(frozen=True)
class ChangedFile:
    """A changed file the diff's text alone would misreport: its content is not diffed line
    by line (``cut``), or git's headers quote its name (``quoted``)."""

    path: str  # as the file system has it (below the workspace; a byte not UTF-8 as \xNN)
    quoted: str | None = None  # between the quotes of git's headers, after a/ or b/
    cut: str | None = None  # binary, size (over DIFF_FILE_BYTES), lines, sparse
    size: int | None = None  # the size of the side that is cut (the new one, if both are)


@dataclass(frozen=True)
class FileChanges:
    """``file_changes`` and what it does not show whole: where it was cut at ``cap`` (git
    wrote ``size`` bytes) and the changed files whose content or name it cannot show as is."""

    text: str
    size: int  # bytes git wrote; past ``cap`` the text is cut at a line under ``cap``
    cap: int
    paths: int  # changed paths (ignored ones not counted)
    files: tuple[ChangedFile, ...] = ()  # the first, up to NOTED_BYTES of names
    more: int = 0  # files to note past those
    file_bytes: int = DIFF_FILE_BYTES  # the limits a file is diffed line by line within
    file_lines: int = DIFF_FILE_LINES

    @property
    def truncated(self) -> bool:
        return self.size > self.cap


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
        # Files with several names met this walk: the first name of each, as shown.
        self._named: dict[tuple[int, int], bytes] = {}
        self._deadline = float("inf")
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
            base._deadline = time.monotonic() + DIFF_SECONDS
            base._before = base._snapshot(first=True)
        except (OSError, subprocess.SubprocessError) as exc:
            if out_of_space(exc):
                raise  # the scratch folder is full: the run ends (lifecycle says so)
            raise WorkspaceError(f"cannot take a baseline of the workspace: {exc}") from None
        return base

    # -----------------------------------------------------------------------------------
    # Snapshots.

    def _snapshot(self, first: bool = False) -> dict[str, str]:
        """The three trees of the workspace as it is now."""
        top: dict[str, str] = {}
        self._named = {}
        with contextlib.closing(walk_folders(self.root)) as walk:  # its folder closed on error
            for entering, folder in walk:
                self._in_time()
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
            sha, mode = self._blob(folder, name, st, keep=kind != "ignored")
            if node.flat is not None:
                node.flat.entries.append((self._token(node, name) + b"-" + name, mode, sha))
                node.flat.index.append(
                    b"file %s %s %s\n" % (self._token(node, name), node.token or b"-", _quote(name))
                )
            else:
                node.trees[kind].append((name, mode, sha))

    def _in_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise WorkspaceError(_past_time())

    def _node_of(self, folder: Folder, parent: _Node | None, first: bool) -> _Node:
        if parent is None:
            return self._with_rules(_Node(b"", "work"), folder, first)
        kind = self._kind_of(parent, folder.name, True)
        if parent.flat is not None:  # below a flattened folder: one more line of its index
            token = self._token(parent, folder.name)
            parent.flat.index.append(
                b"folder %s %s %s\n" % (token, parent.token or b"-", _quote(folder.name))
            )
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

    def _blob(
        self, folder: Folder, name: bytes, st: os.stat_result, keep: bool
    ) -> tuple[str, bytes]:
        """``(sha, git mode)`` of one entry that is not a folder."""
        dir_fd = folder.fd
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            return self._objects.put(b"blob", os.readlink(name, dir_fd=dir_fd)), b"120000"
        if not stat.S_ISREG(mode):
            return self._objects.put(b"blob", _special(mode)), b"100644"
        git_mode = b"100755" if mode & 0o111 else b"100644"
        key = (st.st_dev, st.st_ino)
        sha = self._file(dir_fd, name, st, keep, key)
        if st.st_nlink > 1:
            # Another name of a file: in full under the first name met, summarised under the
            # others (20,000 names of a 16 MiB file are one file to read and to diff).
            first = self._named.get(key)
            if first is not None:
                note = _LINK_NOTE % (first, st.st_size, sha.encode())
                return self._objects.put(b"blob", note), git_mode
            self._named[key] = _shown_path(folder, name)
        return sha, git_mode

    def _file(
        self, dir_fd: int, name: bytes, st: os.stat_result, keep: bool, key: tuple[int, int]
    ) -> str:
        hit = self._cache.get(key)
        # A file the agent touched has a newer ctime, which nothing it runs can set back.
        if hit and (hit.size, hit.mtime, hit.ctime, hit.keep) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            keep,
        ):
            return hit.sha
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
        try:
            now = os.fstat(fd)
            if not stat.S_ISREG(now.st_mode):
                return self._objects.put(b"blob", _special(now.st_mode))
            sha = self._objects.put_file(fd, now, keep)
        finally:
            os.close(fd)
        self._cache[key] = _Cached(now.st_size, now.st_mtime_ns, now.st_ctime_ns, keep, sha)
        return sha

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
        """The diff from the baseline (see ``changes``)."""
        return self.changes(cap).text

    def changes(self, cap: int = DEFAULT_DIFF_CAP) -> FileChanges:
        """The diff from the baseline (see the module docstring), and what it does not show
        whole; the output is streamed, and what passes ``cap`` bytes is counted, not kept.
        Past a bound (the text to compare, git's memory, the time budget): ``WorkspaceError``
        naming it."""
        self._deadline = time.monotonic() + DIFF_SECONDS
        try:
            after = self._snapshot()
            pairs = [(self._before[kind], after[kind]) for kind in ("work", "git")]
            listing = _Listing(self._objects.text_bytes, DIFF_TOTAL_BYTES, self._objects.cut)
            for kind in _KINDS:
                old, new = self._before[kind], after[kind]
                listing.noting = kind != "ignored"  # ignored paths are listed by name only
                if old != new and not listing.over:
                    args = ["diff-tree", "-r", "-z", "--raw", "--no-renames", old, new]
                    self._run(args, listing.feed)
            if listing.over:
                raise WorkspaceError(
                    f"file_changes: the changed text and paths to diff are over "
                    f"{listing.count:,} bytes, past the limit of {DIFF_TOTAL_BYTES:,} bytes a "
                    "diff may compare; not diffed"
                )
            head = bytearray()
            total = 0
            for old, new in pairs:
                total = self._stream([*_DIFF, old, new], head, total, cap)
            args = ["diff-tree", "-r", "--name-status", "--no-renames"]
            total = self._stream(
                [*args, self._before["ignored"], after["ignored"]],
                head,
                total,
                cap,
                preamble=_IGNORED_NOTE,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            if out_of_space(exc):
                raise  # the scratch folder is full: the run ends (lifecycle says so)
            raise WorkspaceError(f"cannot diff the workspace: {exc}") from None
        text = _cut(bytes(head), total, cap)
        notes = tuple(listing.notes)
        return FileChanges(text, total, cap, listing.paths, notes, listing.more,
                           DIFF_FILE_BYTES, DIFF_FILE_LINES)  # fmt: skip

    def _stream(
        self, args: list[str], head: bytearray, total: int, cap: int, preamble: bytes = b""
    ) -> int:
        """Append git's output to ``head`` up to ``cap + 1`` bytes; count the rest."""
        counted = [total]

        def keep(chunk: bytes) -> bool:
            room = cap + 1 - len(head)
            if room > 0:
                head.extend(chunk[:room])
            counted[0] += len(chunk)
            return True

        self._run(args, keep, preamble)
        return counted[0]

    def _run(self, args: list[str], sink: Callable[[bytes], bool], preamble: bytes = b"") -> None:
        """git's output, chunk by chunk, to ``sink``; when it returns False git is stopped (the
        caller has what it needs). git runs under its memory cap and is killed at the time
        budget's end."""
        self._in_time()
        stopped = False
        with subprocess.Popen(
            _capped(["git", *_GIT_OPTS, f"--git-dir={self.store}", *args]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.store,
            env={**os.environ, **_GIT_ENV},
        ) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), proc.kill)
            timer.start()
            try:
                for chunk in _chunks(proc.stdout, preamble):
                    if not sink(chunk):
                        stopped = True
                        proc.kill()
                        break
                # What git says when it fails is a line or two: more is never read.
                err = proc.stderr.read(1 << 16)
                proc.wait()
            finally:
                timer.cancel()
        if proc.returncode != 0 and not stopped:
            if time.monotonic() >= self._deadline:
                raise WorkspaceError(_past_time())
            text = err.decode(errors="replace")
            if any(word in text.lower() for word in ("memory", "malloc", "mmap")):
                raise WorkspaceError(
                    f"file_changes: git passed its memory cap ({GIT_MEMORY:,} bytes of address "
                    "space) diffing the workspace; not diffed"
                )
            lines = text.strip().splitlines()
            raise _git_error(f"git diff failed in {self.store}: {lines[-1] if lines else '?'}", err)

    def discard(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)


class _Listing:
    """What a diff would compare, counted from git's ``diff-tree -r -z --raw --no-renames`` as
    it streams: the sizes of both sides of every changed file diffed line by line (stand-ins
    and summaries are a line each) and the path of every changed entry, which git holds (and
    shows) whatever the content. Only one entry's bytes are kept at a time.

    ``-z --no-renames``: ``:MODE MODE OLD NEW STATUS`` NUL ``PATH`` NUL, entry after entry, so a
    path is never read as an entry, whatever it looks like."""

    def __init__(self, sizes: dict[str, int], limit: int, cut: dict[str, tuple[str, int]]) -> None:
        self.sizes, self.limit, self.cut = sizes, limit, cut
        self.count = 0
        self._carry = b""  # the part of a field whose NUL has not come yet
        self._entry: bytes | None = None  # the entry whose path comes next
        # What the diff's notes say (``FileChanges``), while ``noting``: changed paths, and
        # the files whose content is not diffed line by line or whose name git quotes.
        self.noting = True
        self.paths = 0
        self.notes: list[ChangedFile] = []
        self.more = 0
        self._noted = 0  # bytes of names in notes

    @property
    def over(self) -> bool:
        return self.count > self.limit

    def feed(self, chunk: bytes) -> bool:
        """Count ``chunk``; False once past the limit (git need not go on)."""
        fields = (self._carry + chunk).split(b"\0")
        self._carry = fields.pop()
        for field_ in fields:
            if self._entry is None:
                self._entry = field_
                continue
            self.count += len(field_) + self._text_of(self._entry)
            if self.noting:
                self._note(self._entry, field_)
            self._entry = None
        # A field with no end yet counts too: no path grows the carry unseen.
        return self.count + len(self._carry) <= self.limit or self._stop()

    def _stop(self) -> bool:
        self.count += len(self._carry)
        return False

    def _note(self, entry: bytes, path: bytes) -> None:
        self.paths += 1
        parts = entry.split(b" ")
        # The new side first, then the old; a regular file's only (a link is its target).
        sides = ((parts[1], parts[3]), (parts[0][1:], parts[2])) if len(parts) == 5 else ()
        shas = [sha.decode() for mode, sha in sides if mode.startswith(b"100")]
        cut = next((self.cut[sha] for sha in shas if sha in self.cut), None)
        quoted = _git_quoted(path)
        if cut is None and quoted is None:
            return
        self._noted += len(path) + len(quoted or b"")
        if self._noted > NOTED_BYTES:
            self.more += 1
            return
        shown = quoted.decode("utf-8", "backslashreplace") if quoted is not None else None
        why, size = cut or (None, None)
        self.notes.append(ChangedFile(path.decode("utf-8", "backslashreplace"), shown, why, size))

    def _text_of(self, entry: bytes) -> int:
        parts = entry.split(b" ")
        if len(parts) != 5:
            return 0
        return self.sizes.get(parts[2].decode(), 0) + self.sizes.get(parts[3].decode(), 0)


def _past_time() -> str:
    return (
        "file_changes: reading and diffing the workspace passed its time budget of "
        f"{DIFF_SECONDS:g} s; not diffed"
    )


def _capped(argv: list[str]) -> list[str]:
    """``argv`` under an address-space cap (``GIT_MEMORY``): through ``prlimit`` where
    util-linux has it, else the shell's ``ulimit -v`` (no ``preexec_fn``: the runner has
    threads, and a fork that runs Python code before exec is not safe in one)."""
    prlimit = shutil.which("prlimit")
    if prlimit:
        return [prlimit, f"--as={GIT_MEMORY}", "--", *argv]
    return ["/bin/sh", "-c", f'ulimit -v {GIT_MEMORY // 1024} && exec "$@"', "sh", *argv]


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
