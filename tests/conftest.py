"""Shared fixtures. Docker tests never skip: without an engine they fail, loudly."""

from __future__ import annotations

import ast
import os
import pwd
import shutil
import signal
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradebox.core.private_cache import cache_dir
from gradebox.engine import Engine
from gradebox.images import qualified
from gradebox.sandbox.docker import DockerSandbox
from gradebox.sandbox.labels import LABEL_OWNER, LABEL_SESSION

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, and so
# would every gradebox it starts (an ignored signal stays ignored across exec): the Ctrl-C
# tests need the signal as a terminal delivers it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_used_engine: list[Engine] = []


@pytest.fixture(scope="session")
def engine() -> Engine:
    eng = Engine.connect()  # raises EngineUnavailable: the test errors, it is not skipped
    _used_engine.append(eng)
    return eng


@pytest.fixture(scope="session")
def box(engine: Engine) -> Iterator[DockerSandbox]:
    sandbox = DockerSandbox(engine)
    yield sandbox
    sandbox.close()


# Every backend that the conformance suite runs against and that claims isolation. The attack
# battery (tests/docker/test_adversarial.py) runs each attack against each of them.
# "oci" runs the runtime ``auto`` picks (crun where installed), "oci-runc" runc: both pass.
ISOLATED_BACKENDS = ["docker", "oci", "oci-runc"]


@pytest.fixture(scope="session", params=ISOLATED_BACKENDS)
def sandbox(request, engine: Engine) -> Iterator[object]:
    from gradebox.sandbox import get_sandbox

    # get_sandbox raises when a backend is unusable here: its tests fail, they never skip.
    if request.param == "docker":
        box = DockerSandbox(engine)
    elif request.param == "oci-runc":
        from gradebox.sandbox.oci import OciSandbox

        box = OciSandbox(engine, runtime="runc")
    else:
        box = get_sandbox(request.param)
    yield box
    box.close()


@pytest.fixture(scope="session")
def python_image(box: DockerSandbox) -> str:
    return box.resolve_image(qualified("python"))


@pytest.fixture(scope="session")
def shell_image(box: DockerSandbox) -> str:
    return box.resolve_image(qualified("shell"))


@pytest.fixture(scope="session", autouse=True)
def no_container_outlives_the_suite() -> Iterator[None]:
    yield
    if not _used_engine:
        return
    mine = f"{os.uname().nodename}:{os.getpid()}"
    left = [
        c["Names"]
        for c in _used_engine[0].containers({LABEL_SESSION: None})
        if c["Labels"].get(LABEL_OWNER, "").endswith(f":{os.getpid()}")
        or c["Labels"].get(LABEL_OWNER) == mine
    ]
    assert not left, f"gradebox containers outlived the test suite: {left}"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "answer.txt").write_text("42\n")
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("print('hi')\n")
    return ws


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def compile_context(suite_dir: Path, flavor: str = "gradebox") -> Any:
    """A ``graders.assertion.CompileContext`` for an entry of ``suite.yaml`` in ``suite_dir``
    (its custom assertions discovered there)."""
    from gradebox.graders import assertion, custom

    return assertion.CompileContext(
        file="suite.yaml",
        lines={},
        suite_dir=suite_dir,
        customs=custom.discover(suite_dir),
        flavor=flavor,  # type: ignore[arg-type]
    )


def loaded_by(modules: list[str], watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` a fresh interpreter has loaded once it imported ``modules``."""
    listed = f"print([m for m in {watched!r} if m in sys.modules])"
    code = f"import sys\nimport {', '.join(modules)}\n{listed}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(ast.literal_eval(out.stdout.strip()))


# The rootfs cache of this user, as it is before any test points GRADEBOX_CACHE elsewhere.
_OWN_ROOTFS = cache_dir() / "rootfs"


def seeded_cache(cache: Path) -> Path:
    """``cache`` (a GRADEBOX_CACHE of a test's own: its compiled graders, targets and sealed
    init start empty) with the python image's root already unpacked, hard-linked from this
    user's own cache (~0.3 s): a test about something else does not export and unpack it
    (~5 s) for nothing. Where it cannot be linked (not unpacked yet, another filesystem), the
    test unpacks it as before."""
    target = cache / "rootfs"
    if target.exists():
        return cache
    if not _python_root:
        try:
            image = Engine.connect().image(qualified("python"))["Id"]
        except Exception:  # noqa: BLE001 - no engine, no image: nothing to seed
            image = None
        _python_root.append(image.removeprefix("sha256:") if image else "")
    root = _OWN_ROOTFS / _python_root[0]
    if _python_root[0] and (root / ".gradebox-complete").exists():
        target.mkdir(parents=True)
        done = subprocess.run(["cp", "-al", str(root), str(target / root.name)],
                              capture_output=True)  # fmt: skip
        if done.returncode != 0:
            subprocess.run(["rm", "-rf", str(target / root.name)], check=False)
    return cache


_python_root: list[str] = []


def leftovers_of(engine: Engine, pid: int, running: bool = False) -> list[str]:
    """Containers of the runner with this pid, on every backend: Docker containers by their
    owner label, OCI containers by the pid in their id (state or bundle still there)."""
    from gradebox.sandbox.oci import state_root

    found = [
        c["Names"][0]
        for c in engine.containers({LABEL_OWNER: None})
        if c["Labels"][LABEL_OWNER].endswith(f":{pid}") and (not running or c["State"] == "running")
    ]
    folders = sorted(state_root().glob("runtime*"))  # each runtime's state folder
    folders += [] if running else [state_root() / "bundles"]
    for folder in folders:
        if folder.is_dir():
            found += [p.name for p in folder.iterdir() if p.name.startswith(f"gradebox-{pid}-")]
    if not running:  # its cgroups: a container's own, or a slot's (and the server in it)
        from gradebox.sandbox import cgroups
        from gradebox.sandbox.oci import _cgroup_parent

        root = Path("/sys/fs/cgroup")
        parents = [*root.glob("*/gradebox*"), *root.glob("gradebox*")]  # v1, then v2 (root)
        parents += cgroups.parents(_cgroup_parent())  # a non-root user's delegated tree
        for parent in set(parents):
            found += [f"{parent}:{p.name}" for p in parent.glob(f"gradebox-{pid}-*")]
    return found


def shared_corpus(name: str) -> Path:
    """A tarball of ``shared/corpus`` (AgentV's repository, plaited's harness), found beside the
    repository root or above it (CI keeps ``../shared/corpus`` next to the clone). Absent: the
    test is skipped here, and fails under CI=true, where the corpus must be."""
    root = Path(__file__).resolve().parents[1]
    for folder in (root.parent, *root.parent.parents):
        found = sorted((folder / "shared" / "corpus").glob(f"{name}-*.tar.gz"))
        if found:
            return found[-1]
    why = f"no shared/corpus/{name}-*.tar.gz beside {root} or above it"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def agentv_checkout(tmp_path_factory) -> Path:
    """AgentV's repository at the commit the corpus holds, unpacked once per session."""
    import tarfile

    tarball = shared_corpus("agentv")
    where = tmp_path_factory.mktemp("agentv-corpus")
    with tarfile.open(tarball) as tar:
        tar.extractall(where, filter="data")
    (top,) = [p for p in where.iterdir() if p.is_dir()]
    return top


@pytest.fixture(scope="module")
def other_user(request) -> Iterator[pwd.struct_passwd]:
    """Another local user of a shared machine, made for the module that asks (its name from
    the module's and this run's: two runs at once never share one), removed after."""
    if os.geteuid() != 0:
        pytest.fail("these tests make a local user: run them as root (make test does)")
    tag = zlib.crc32(request.module.__name__.encode()) % 1000
    name = f"gbx{tag}u{os.getpid() % 100000}"
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "-r", name], check=False, capture_output=True)


@pytest.fixture
def shared(tmp_path) -> Iterator[Path]:
    """A folder of root's in /tmp itself, where another local user can reach (pytest's own
    folders are 0700: nobody else could), removed after."""
    folder = Path(f"/tmp/gbx-shared-{os.getpid()}-{tmp_path.name}")
    folder.mkdir(mode=0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
