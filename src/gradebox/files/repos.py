"""Remote repositories a suite places in its workspace (``workspace.repos`` naming a git URL):
fetched on the host before any sandbox starts, into a cache of bare mirrors, then checked out
for the run at the commit they resolved to.

- **The cache.** One bare mirror per URL in the user's private cache folder
  (``cache_dir()/repos/``, refused when another user could change it, as every cache of
  ours), made with ``git clone --mirror`` once and ``git fetch``ed after. A full 40-hex commit
  already in the mirror is used as it is, for good (no fetch); a branch, a tag or a short
  commit is fetched and resolved once per run (``resolve``), and the run records the commit.
  Runs sharing the cache take a lock per mirror (``flock`` on ``NAME.lock``) around every change
  to it; a mirror is made under a temporary name and renamed, so a killed fetch leaves none.
- **Offline** (``--offline``, ``GRADEBOX_OFFLINE``): nothing is fetched; what the cache lacks
  is refused in one line naming the repository.
- **Hostile input.** The URL and the ref come from an eval file, whoever wrote it. Only
  ``https://``, ``http://``, ``git://``, ``ssh://`` (and ssh's ``user@host:path``) are taken;
  git is told the same (``GIT_ALLOW_PROTOCOL``), so no ``ext::``, ``file::`` or ``fd::``
  transport, nor a redirect to one; a URL or ref starting with ``-`` is refused and every URL
  follows ``--``. Git runs from the cache folder (never a folder of the suite's, whose
  ``.git/config`` could name a helper), with the operator's own settings (global config,
  ssh agent, proxies: the credentials are the operator's) and no prompt. Each network call is
  bounded in time, and a mirror past its size cap is stopped and removed (``--allow limits``
  lifts the cap). A commit holding a submodule or Git LFS files is refused in one line:
  gradebox would otherwise hand the agent an empty folder or pointer files.
- **The checkout** is a plain clone of the mirror (objects copied, no link to the cache, which
  a container never sees), detached at the commit, its ``origin`` the URL.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from ..core import settings
from ..core.fstree import chown_tree, normalise_sub_path, real_folder_below
from ..core.private_cache import cache_dir
from ..core.sizes import format_bytes
from ..core.untrusted import unshared
from ..errors import ConfigError, WorkspaceError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FETCH_TIMEOUT",
    "Fetched",
    "checkout",
    "clone_into",
    "is_remote",
    "local_commit",
    "offline",
    "refuse_url",
    "repo_folder",
    "resolve",
]

DEFAULT_MAX_BYTES = 2 << 30
"""A mirror past this is stopped and removed (``--allow limits`` lifts it); a commit whose
files checked out would pass it is refused."""
MAX_ENTRIES = 1_000_000
"""A commit naming more paths than this is refused under the cap (empty files cost nothing
to fetch, an inode each to check out)."""
FETCH_TIMEOUT = 600.0
"""Seconds one clone or fetch may take."""
LOCK_WAIT = FETCH_TIMEOUT + 60
PROTOCOLS = "https:http:git:ssh"

_SCHEME = re.compile(r"^(https?|git|ssh)://[^\s/]+(/[^\s]*)?$", re.I)
_PASSWORD = re.compile(r"^[a-z+]+://[^/@]*:[^/@]*@", re.I)
# ssh's short form: user@host:path, no scheme; neither part may start with "-" (ssh options)
_SCP = re.compile(r"^(?:[A-Za-z0-9._][A-Za-z0-9._-]*@)?[A-Za-z0-9._][A-Za-z0-9.-]*:[^\s:-][^\s]*$")
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_REF = re.compile(r"^[A-Za-z0-9._/+@-]+(~[0-9]+)?$")


def is_remote(source: str) -> bool:
    """Does a repository's ``source`` name a URL (else a local folder)?"""
    return "://" in source or "::" in source or bool(_SCP.match(source))


def refuse_url(url: str) -> str | None:
    """Why ``url`` may not be fetched, or None."""
    if url.startswith("-"):
        return f"{url!r} starts with '-' (git would read it as an option)"
    if "::" in url.split("://", 1)[0] or url.split(":", 1)[0].lower() in ("ext", "fd", "file"):
        return f"{url!r} names a git transport that runs commands or reads the host"
    if any(ord(c) < 32 or c == "\x7f" for c in url):
        return f"{url!r} holds a control character"
    if "://" in url:
        if not _SCHEME.match(url):
            scheme = url.split("://", 1)[0]
            return f"{url!r}: the scheme {scheme!r} is not https, http, git or ssh"
        # user@host:port, as git reads it (percent-decoded): ssh would take a part starting
        # with "-" as its option (-oProxyCommand=...). git refuses it too; we do not rely on it.
        authority = unquote(url.split("://", 1)[1].split("/", 1)[0])
        if any(part.startswith("-") for part in re.split(r"[@:]", authority)):
            return f"{url!r}: a user, host or port starting with '-' (ssh would read an option)"
        if _PASSWORD.match(url):
            return (
                "the URL carries a password: credentials come from whoever runs gradebox "
                "(git's credential helper, an ssh agent), never from an eval file"
            )
        return None
    if _SCP.match(url):
        return None
    return f"{url!r} is not a URL (https://, http://, git://, ssh:// or user@host:path)"


def refuse_ref(ref: str) -> str | None:
    """Why ``ref`` (a commit, branch or tag, ``~N`` allowed) may not be resolved, or None."""
    if ref.startswith("-") or not _REF.match(ref) or ".." in ref or ref.endswith((".", "/")):
        return f"{ref!r} is not a commit, branch or tag name"
    return None


def offline(flag: bool = False) -> bool:
    """``--offline``, else ``GRADEBOX_OFFLINE``."""
    return flag or settings.current().offline


@dataclass(frozen=True)
class Fetched:
    """A repository as the run will check it out: the URL, what the suite asked for, the
    commit it resolved to and its mirror."""

    url: str
    ref: str | None
    commit: str
    mirror: Path

    def describe(self) -> str:
        return f"{self.url}@{self.commit}"


# A branch or tag is resolved once per run (one process), then that commit is used for every
# test and every file of the run.
_resolved: dict[tuple[str, str | None], Fetched] = {}
_resolved_lock = threading.Lock()


def forget() -> None:
    """Drop this process's resolutions (a new run in the same process: tests)."""
    with _resolved_lock:
        _resolved.clear()


def resolve(
    url: str,
    ref: str | None,
    *,
    offline_run: bool = False,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    root: Path | None = None,
) -> Fetched:
    """The commit ``url`` at ``ref`` (None: its default branch) is, fetched into the cache when
    it is not there (never with ``offline_run``). Raises a one-line ``ConfigError``."""
    why = refuse_url(url) or (refuse_ref(ref) if ref else None)
    if why:
        raise ConfigError(f"repository {url}: refused: {why}")
    key = (url, ref)
    with _resolved_lock:
        if key in _resolved:
            return _resolved[key]
    folder = _repos_folder(root)
    mirror = folder / _mirror_name(url)
    with _locked(folder / (mirror.name + ".lock"), url):
        commit = _resolve_locked(url, ref, mirror, offline_run, max_bytes)
        _refuse_unfetchable(url, mirror, commit, max_bytes)
    fetched = Fetched(url, ref, commit, mirror)
    with _resolved_lock:
        # Under its commit too: the run stages it by the commit it recorded, with the checks
        # (and the cap) this resolution passed.
        _resolved.setdefault((url, commit), fetched)
        return _resolved.setdefault(key, fetched)


def checkout_env() -> dict[str, str]:
    """git's environment for a checkout into a workspace: no config but the clone's own (not
    the system's, not a global one, no HOME: a stage's ``.gitconfig`` or
    ``.config/git/{config,attributes}``, the template's or a repository's checked out at its
    root, would be read, its ``core.fsmonitor`` run on the host), and never a prompt."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": "/nonexistent",
    }


def local_commit(folder: Path, ref: str) -> str | None:
    """The commit ``ref`` names in the local repository ``folder`` now, or None when it names
    none (or git cannot say: another user's repository, a timeout)."""
    try:
        return _rev_parse(None, ref, "-C", str(folder))
    except (OSError, subprocess.TimeoutExpired):
        return None


def checkout(
    fetched: Fetched, stage: Path, where: str, owner: tuple[int, int] | None = None
) -> None:
    """Place ``fetched`` at ``stage/where``: a clone of its mirror (objects copied: nothing of
    the cache is linked into the workspace), detached at its commit, ``origin`` its URL."""
    dest = repo_folder(stage, where)
    # Under the mirror's lock: another run's fetch may be removing a mirror past its cap.
    with _locked(fetched.mirror.with_name(fetched.mirror.name + ".lock"), fetched.url):
        clone_into(
            dest,
            str(fetched.mirror),
            fetched.commit,
            detach=True,
            where=where,
            what=fetched.describe(),
            origin=fetched.url,
            cwd=stage,
            timeout=FETCH_TIMEOUT,
        )
    if owner is not None:
        chown_tree(dest, owner)


def repo_folder(stage: Path, where: str) -> Path:
    """The folder at ``where`` in ``stage`` that a repository goes into (made; no link
    followed, an earlier repository's included)."""
    try:
        return real_folder_below(stage, normalise_sub_path(where))
    except ValueError as exc:
        raise WorkspaceError(f"repository path: {exc}") from None


def clone_into(
    dest: Path,
    source: str,
    ref: str,
    *,
    detach: bool = False,
    where: str,
    what: str,
    origin: str | None = None,
    cwd: Path | None = None,
    timeout: float,
) -> None:
    """A clone of the local repository ``source`` into the empty folder ``dest`` (objects
    copied, none linked), checked out at ``ref`` (``detach``: detached), its ``origin`` set to
    ``origin``: no hook run, no config read but the clone's own (``checkout_env``)."""
    # git checkout would read such a ref as its option (--orphan=x, --pathspec-from-file=...);
    # the source follows "--", refused all the same: whatever a caller checked or forgot.
    if ref.startswith("-"):
        raise WorkspaceError(f"repository {what}: {ref!r} is not a commit, branch or tag name")
    if source.startswith("-"):
        raise WorkspaceError(f"repository {what}: the source {source!r} starts with '-'")
    if any(dest.iterdir()):
        raise WorkspaceError(f"repository path {where!r} is not empty in the workspace")
    base = ["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always"]
    into, at = str(dest), ["--detach", ref] if detach else [ref]
    steps = [
        ["clone", "--quiet", "--no-hardlinks", "--no-checkout", "--", source, into],
        ["-C", into, "-c", "advice.detachedHead=false", "checkout", "--quiet", *at],
    ]
    if origin is not None:
        steps.append(["-C", into, "remote", "set-url", "origin", origin])
    for args in steps:
        proc = subprocess.run(
            [*base, *args],
            capture_output=True,
            text=True,
            env=checkout_env(),
            cwd=cwd,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise WorkspaceError(f"repository {what}: git {args[0]} failed: {_tail(proc.stderr)}")


def cached(url: str, ref: str | None, root: Path | None = None) -> bool:
    """Is ``url`` at ``ref`` in the cache (what ``--offline`` can use)? No fetch, no lock."""
    if refuse_url(url) or (ref and refuse_ref(ref)):
        return False
    mirror = _repos_folder(root) / _mirror_name(url)
    return mirror.is_dir() and _rev_parse(mirror, ref) is not None


# ---------------------------------------------------------------------------------------------


def _repos_folder(root: Path | None) -> Path:
    folder = (root or cache_dir()) / "repos"
    why = unshared(folder.parent, missing_ok=True)
    if why is not None:
        raise ConfigError(
            f"the repository cache {folder} could be changed by another user ({why}); set "
            "GRADEBOX_CACHE to a folder only you can write"
        )
    folder.mkdir(mode=0o700, exist_ok=True)
    why = unshared(folder)
    if why is not None:
        raise ConfigError(f"the repository cache {folder} could be changed by another user ({why})")
    return folder


def _mirror_name(url: str) -> str:
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])
    tail = tail.removesuffix(".git").strip(".-")[:40] or "repo"
    return f"{tail}-{hashlib.sha256(url.encode()).hexdigest()[:16]}.git"


class _locked:
    """An ``flock`` on ``path``, waited for (another run may be fetching the same mirror)."""

    def __init__(self, path: Path, url: str) -> None:
        self.path, self.url, self.fd = path, url, -1

    def __enter__(self) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(self.path, flags, 0o600)
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                os.close(self.fd)
                raise ConfigError(
                    f"repository {self.url}: another run has held its cache entry for "
                    f"{LOCK_WAIT:.0f} s ({self.path}); try again once it ends"
                )
            time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _git_env() -> dict[str, str]:
    """What git runs with when it fetches: the operator's own settings (credentials, ssh,
    proxies, global config), only the protocols we allow, and never a prompt."""
    env: dict[str, str] = {}
    for name, value in (
        ("PATH", os.environ.get("PATH")),
        ("HOME", os.environ.get("HOME")),
        ("USER", os.environ.get("USER")),
        ("LANG", "C"),
        ("XDG_CONFIG_HOME", os.environ.get("XDG_CONFIG_HOME")),
        ("GIT_CONFIG_GLOBAL", os.environ.get("GIT_CONFIG_GLOBAL")),
        ("GIT_SSH_COMMAND", os.environ.get("GIT_SSH_COMMAND")),
        ("GIT_ASKPASS", os.environ.get("GIT_ASKPASS")),
        ("SSH_AUTH_SOCK", os.environ.get("SSH_AUTH_SOCK")),
        ("http_proxy", os.environ.get("http_proxy")),
        ("https_proxy", os.environ.get("https_proxy")),
        ("HTTP_PROXY", os.environ.get("HTTP_PROXY")),
        ("HTTPS_PROXY", os.environ.get("HTTPS_PROXY")),
        ("no_proxy", os.environ.get("no_proxy")),
        ("NO_PROXY", os.environ.get("NO_PROXY")),
        ("ALL_PROXY", os.environ.get("ALL_PROXY")),
        ("SSL_CERT_FILE", os.environ.get("SSL_CERT_FILE")),
        ("GIT_SSL_CAINFO", os.environ.get("GIT_SSL_CAINFO")),
    ):
        if value:
            env[name] = value
    env.setdefault("PATH", "/usr/bin:/bin")
    env.update(
        GIT_ALLOW_PROTOCOL=PROTOCOLS,
        GIT_TERMINAL_PROMPT="0",
        GCM_INTERACTIVE="never",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_LFS_SKIP_SMUDGE="1",
    )
    if "GIT_SSH_COMMAND" not in env:
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"
    return env


# Every fetch: no submodules followed, no hooks, no protocol but ours, and a redirect only
# on the first request (as git's default), never to another protocol.
_SAFE = [
    "-c", "protocol.allow=never",
    "-c", "protocol.https.allow=always",
    "-c", "protocol.http.allow=always",
    "-c", "protocol.git.allow=always",
    "-c", "protocol.ssh.allow=always",
    "-c", "core.hooksPath=/dev/null",
    "-c", "fetch.recurseSubmodules=false",
    "-c", "submodule.recurse=false",
    "-c", "credential.interactive=false",
]  # fmt: skip


def _git_argv(mirror: Path | None, args: list[str] | tuple[str, ...]) -> list[str]:
    return ["git", *_SAFE, *(["--git-dir", str(mirror)] if mirror is not None else []), *args]


def _git(mirror: Path | None, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    cwd = mirror if mirror is not None and mirror.is_dir() else None
    return subprocess.run(
        _git_argv(mirror, args),
        capture_output=True,
        text=True,
        env=_git_env(),
        cwd=cwd or "/",
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _rev_parse(mirror: Path | None, ref: str | None, *where: str) -> str | None:
    """The commit ``ref`` names in ``mirror`` (or where ``where`` points git: ``-C FOLDER``)."""
    spec = f"{ref or 'HEAD'}^{{commit}}"
    proc = _git(mirror, *where, "rev-parse", "--verify", "--quiet", "--end-of-options", spec)
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and _FULL_SHA.match(out) else None


def _resolve_locked(
    url: str, ref: str | None, mirror: Path, offline_run: bool, max_bytes: int | None
) -> str:
    full = bool(ref and _FULL_SHA.match(ref.lower()))
    if mirror.is_dir():
        have = _rev_parse(mirror, ref)
        if have is not None and (full or offline_run):
            return have  # a full commit never changes; offline, the cache is what there is
    if offline_run:
        what = "" if ref is None else f" at {ref}"
        lacks = "is not in the cache" if not mirror.is_dir() else f"has no {ref or 'HEAD'}"
        raise ConfigError(
            f"repository {url}{what} {lacks} and the run is offline (--offline or "
            "GRADEBOX_OFFLINE): run once without it to fetch it"
        )
    if not mirror.is_dir():
        _clone_mirror(url, mirror, max_bytes)
    else:
        _fetch(url, mirror, max_bytes, ())
    commit = _rev_parse(mirror, ref)
    if commit is None and ref and re.fullmatch(r"[0-9a-fA-F]{7,40}(~[0-9]+)?", ref):
        # A commit on no branch (a pull request's): fetched by itself, kept by a ref of ours.
        bare = ref.split("~", 1)[0]
        _fetch(url, mirror, max_bytes, (f"+{bare}:refs/gradebox/keep/{bare}",), quiet_fail=True)
        commit = _rev_parse(mirror, ref)
    if commit is None:
        raise ConfigError(f"repository {url} has no commit, branch or tag {ref or 'HEAD'!r}")
    return commit


def _clone_mirror(url: str, mirror: Path, max_bytes: int | None) -> None:
    temp = mirror.with_name(f"{mirror.name}.tmp-{os.getpid()}-{os.urandom(3).hex()}")
    try:
        _bounded(
            url,
            temp,
            ["clone", "--mirror", "--quiet", "--no-recurse-submodules", "--", url, str(temp)],
            max_bytes,
            None,
        )
        os.rename(temp, mirror)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _fetch(
    url: str, mirror: Path, max_bytes: int | None, refspecs: tuple[str, ...], quiet_fail=False
) -> None:
    try:
        where = ["--", url, *refspecs] if refspecs else ["origin"]
        args = ["fetch", "--quiet", "--prune", "--no-recurse-submodules", *where]
        _bounded(url, mirror, args, max_bytes, mirror)
    except ConfigError:
        if not quiet_fail:
            raise


def _bounded(
    url: str, folder: Path, args: list[str], max_bytes: int | None, mirror: Path | None
) -> None:
    """Run git, stopping it past ``FETCH_TIMEOUT`` or once ``folder`` passes ``max_bytes``."""
    proc = subprocess.Popen(
        _git_argv(mirror, args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_git_env(),
        cwd=folder.parent,
        start_new_session=True,
    )
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + FETCH_TIMEOUT
    too_large = (
        f"is larger than the {format_bytes(max_bytes or 0)} a fetched repository may take: "
        "run with --allow limits to lift the cap"
    )
    why = None
    while proc.poll() is None:
        if time.monotonic() > deadline:
            why = f"took longer than {FETCH_TIMEOUT:.0f} s"
        elif max_bytes is not None and _size(folder) > max_bytes:
            why = too_large
        if why:
            os.killpg(proc.pid, 9)
            proc.wait()
            break
        time.sleep(0.2)
    reader.join(5)
    if why is None and max_bytes is not None and _size(folder) > max_bytes:
        why = too_large
    if why is not None:
        if mirror is not None:  # a half-fetched mirror: made again next time
            shutil.rmtree(mirror, ignore_errors=True)
        raise ConfigError(f"repository {url}: {why}")
    if proc.returncode != 0:
        raise ConfigError(f"repository {url}: git {args[0]} failed: {_tail(''.join(errors))}")


def _size(folder: Path) -> int:
    total = 0
    stack = [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def _refuse_unfetchable(url: str, mirror: Path, commit: str, max_bytes: int | None) -> None:
    """A submodule or Git LFS files at ``commit`` are refused: the checkout would hold an empty
    folder or pointer files where the author meant content. So is a tree that checked out
    would pass ``max_bytes`` (the mirror's cap): git stores a blob once however many paths
    name it, and compressed, so a mirror of kilobytes could fill the host's disk with
    terabytes when each workspace is staged."""
    proc = subprocess.Popen(
        ["git", "--git-dir", str(mirror), "ls-tree", "-r", "-z", "-l", "--full-tree", commit],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=_git_env(),
        cwd=mirror,
    )
    assert proc.stdout is not None
    attributes: list[str] = []
    found: str | None = None
    total = count = 0
    capped, cap = max_bytes is not None, max_bytes or 0
    buffer = b""
    while found is None and not (capped and (total > cap or count > MAX_ENTRIES)):
        chunk = proc.stdout.read(1 << 16)
        if not chunk:
            break
        buffer += chunk
        *entries, buffer = buffer.split(b"\0")
        for entry in entries:
            meta, _, name = entry.partition(b"\t")
            path = name.decode("utf-8", "replace")
            if meta.startswith(b"160000 "):
                found = path
                break
            size = meta.rsplit(b" ", 1)[-1]
            total += int(size) if size.isdigit() else 0
            count += 1
            if path == ".gitattributes" or path.endswith("/.gitattributes"):
                attributes.append(path)
    proc.kill()
    proc.wait()
    if capped and (total > cap or count > MAX_ENTRIES):
        what = format_bytes(cap) if total > cap else f"{MAX_ENTRIES:,} paths"
        raise ConfigError(
            f"repository {url} at {commit[:12]}: its files checked out pass the {what} a "
            "fetched repository may take: run with --allow limits to lift the cap"
        )
    if found is not None:
        raise ConfigError(
            f"repository {url} at {commit[:12]} has a submodule ({found}): gradebox fetches no "
            "submodule (it would be an empty folder); pin a commit without one, or vendor it"
        )
    for path in attributes:
        text = _git(mirror, "cat-file", "blob", f"{commit}:{path}").stdout
        if re.search(r"filter\s*=\s*lfs", text):
            raise ConfigError(
                f"repository {url} at {commit[:12]} stores files in Git LFS ({path}): gradebox "
                "fetches no LFS object (the agent would see pointer files); pin a commit "
                "without them"
            )


def _tail(stderr: str) -> str:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"
