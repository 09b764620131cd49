"""What runs on a cluster node, inside a Ray worker process.

A node keeps one ``_Context`` per process for the run at hand: the bundle unpacked once per
node, the node's own sandbox (``auto`` picks oci or docker there), its image resolver, and a
``jobs.Worker`` over the loaded suite (or grader). Building it checks the node: the same
gradebox, reachable engine and runtime, the driver's image ids, the same tests, the model keys.
The preflight reports those checks; a node that joined later meets them at its first job,
which is then refused. A job then runs exactly as it does locally: ``jobs.run_job``, the
function the local executor's threads call.

Files of a run live in ``$TMPDIR/gradebox-ray-RUN`` on each node (the bundle, staged
templates); per-test scratch is named after the worker's pid, as locally. ``sweep`` removes
the run's folder and whatever killed workers left (``gradebox gc``'s rules).
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..core.scratch import collect_scratch
from ..core.untrusted import unshared
from ..drivers.batch import load_grader_ref
from ..errors import GradeboxError, ImageError
from ..files.workspace import remove_tree, unmount_below
from ..images.archive import IterStream
from ..images.catalog import qualified
from ..lifecycle.jobs import Job, Worker, encode, run_job
from ..sandbox import collect_garbage, get_sandbox
from ..sandbox.watchdog import watch_from_outside
from ..suite import load_suite
from ..suite.plan import plan_suite
from ..suite.preflight import models_used, remote_repos
from .bundle import unpack
from .image_transfer import load_once
from .sizing import GRADER_THREADS

__all__ = ["RUN_PREFIX", "MissingImages", "RunSpec", "node_op", "run_dir", "run_item"]

RUN_PREFIX = "gradebox-ray-"


def run_dir(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{RUN_PREFIX}{run_id}"


@dataclass(frozen=True)
class RunSpec:
    """Everything a node needs for one run (its jobs aside); put in the object store once."""

    run_id: str
    kind: str  # "suite": TestJobs; "grader": GradeJobs and TrialJobs
    bundle: Any  # ObjectRef of the packed files (bundle.pack)
    entry: str  # the suite or grader file, relative to the bundle
    images: dict[str, str]  # reference -> id the driver resolved (against its lock)
    sandbox: str | None = None
    allow: tuple[str, ...] = ()
    format: str | None = None
    target: str | None = None  # kind suite: run --target, in place of the file's
    workspace: str | None = None  # kind grader: the folder mounted for the grader
    fingerprints: dict[str, str] = field(default_factory=dict)  # kind suite: the driver's
    use_cache: bool = True
    model_calls: int = 4
    references: bool = False
    # kind suite: each remote repository's commit as the driver resolved it (source NUL ref
    # -> commit): a node checks out that commit, never a branch that moved since; and
    # whether the run is offline (a node then fetches nothing its cache lacks).
    repos: dict[str, str] = field(default_factory=dict)
    offline: bool = False
    # ObjectRefs of the chunks of an images archive (``image_transfer``): the images some
    # node lacked at the preflight, which a node lacking them loads once.
    images_sent: tuple[Any, ...] = ()
    version: str = __version__


class NodeRefused(GradeboxError):
    """This node cannot run the run's jobs as the driver planned them."""


class MissingImages(NodeRefused):
    """Images of the driver's lock that this node does not hold at all: the driver can send
    them (other bytes under a name are a plain ``NodeRefused``)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(
            f"image {', '.join(names)} is not here and the driver sent none: it sends them to "
            "the nodes it checks as a run starts, so run again (or `gradebox images save "
            "ARCHIVE` on the driver, then `gradebox images load ARCHIVE` here)"
        )


@functools.cache
def node_name() -> str:
    """This node as results and errors name it: Ray's node id, its address, its host."""
    import ray  # lazy: ray is an optional extra

    node_id = ray.get_runtime_context().get_node_id()
    address = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id), "?")
    return f"{node_id[:12]} ({address}, {socket.gethostname()})"


class _Context:
    """One run as this worker process sees it (see the module's docstring)."""

    def __init__(self, spec: RunSpec) -> None:
        import ray  # lazy: ray is an optional extra

        _watched()
        self.spec, self.dir = spec, run_dir(spec.run_id)
        if spec.version != __version__:
            raise NodeRefused(
                f"runs gradebox {__version__}, the driver {spec.version}: install the same "
                "version on every node"
            )
        # The node's folder for this run, in the shared temp folder: made 0700 and checked
        # through the door before anything (the bundle, the images' lock) is put in it, so a
        # folder another local user made (or linked) under this name is refused, not used.
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        why = unshared(self.dir)
        if why is not None:
            raise NodeRefused(f"its run folder {self.dir} is not its own: {why}")
        # Only the first process of a node fetches the files from the object store.
        self.root = unpack(lambda: ray.get(spec.bundle), self.dir / "bundle")
        self.worker: Worker | None = None
        self.problems: list[str] = []  # why this node may not run the jobs; [] when it may
        self.box = get_sandbox(spec.sandbox)  # the engine and runtime checks of this node
        try:
            # Not `locked` here: the driver enforced the lock when it planned, and this node
            # must hold the very ids the driver resolved (stricter): _same_images checks.
            self.images = self.box.images(
                build_network="network" in spec.allow, build="build" in spec.allow
            )
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        spec = self.spec
        self._same_images()
        if spec.kind == "suite":
            suite = load_suite(self.root / spec.entry, format=spec.format, target=spec.target)
            plan_suite(suite, self.images, spec.allow)  # type: ignore[arg-type]
            self.problems = _suite_problems(suite, spec.fingerprints) + _pin_repos(suite, spec)
            # Graders of one test run side by side, as they do locally (``sizing`` asks for them).
            self.worker = Worker(
                self.box,
                self.images,
                spec.run_id,
                suite=suite,
                threads=GRADER_THREADS,
                use_cache=spec.use_cache,
                model_calls=spec.model_calls,
                references=spec.references,
                scratch=self.dir / f"stage-{os.getpid()}",
            )
        else:
            grader = load_grader_ref(self.root / spec.entry)
            if spec.workspace is not None:
                workspace = self.root / spec.workspace
            else:
                workspace = self.dir / "empty"
                workspace.mkdir(exist_ok=True)
            self.worker = Worker(
                self.box, self.images, spec.run_id, grader=grader, workspace=workspace, threads=1
            )

    def _same_images(self) -> None:
        """Every image the driver planned must be the same bytes here. A runtime image this
        node lacks comes from the driver when it sent one (``spec.images_sent``), loaded once
        per node; one held here with other bytes is refused. A grader's own Dockerfile is
        built on each node from the bundle (pinned by its inputs' hash)."""
        spec = self.spec
        lacking, refusals = _image_gaps(spec.images, self.images)
        if lacking and not refusals and spec.images_sent:
            import ray  # lazy: ray is an optional extra

            sendable = {r: i for r, i in spec.images.items() if qualified(r) != r}
            problems = load_once(
                self.dir / ".images.lock",
                lambda: bool(_image_gaps(spec.images, self.images)[0]),
                self.images.engine,
                # Each chunk fetched when the reader reaches it: a node holds one at a time.
                lambda: IterStream(map(ray.get, spec.images_sent)),
                sendable,
            )
            wrong = sorted((n, why) for n, why in (problems or {}).items() if why)
            if wrong:
                name, why = wrong[0]
                raise NodeRefused(f"image {name} the driver sent {why} once loaded here")
            lacking, refusals = _image_gaps(spec.images, self.images)
        if refusals:
            raise NodeRefused("; ".join(refusals))
        if lacking:
            raise MissingImages(lacking)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        self.box.close()


def _image_gaps(planned: dict[str, str], images: Any) -> tuple[list[str], list[str]]:
    """The driver's runtime images (short names) that are not here at all, which it can
    send; and why the others may not run here: other bytes under the name, or a full
    reference missing (no archive carries one: `docker save` names it by tag)."""
    lacking, refusals = [], []
    for ref, wanted in sorted(planned.items()):
        if ref.startswith("build:"):
            continue
        try:
            got: str | None = images.resolve(ref)
        except ImageError:
            got = None
        if got == wanted:
            continue
        if got is None and qualified(ref) != ref:
            lacking.append(ref)
            continue
        what = "is missing" if got is None else f"is {got[7:19]}"
        refusals.append(
            f"image {ref} {what}, the driver's is {wanted[7:19]}: copy the driver's images, "
            "`gradebox images save ARCHIVE` on the driver, then `gradebox images load "
            "ARCHIVE` on this node"
        )
    return lacking, refusals


def _suite_problems(suite: Any, driver: dict[str, str]) -> list[str]:
    """Checked once per process: this node's copy of every test is the driver's, and the
    model keys its graders call are set here (those of the model targets it calls: its
    graders, a model target under test; not every target a targets file lists)."""
    problems = []
    differ = [t.id for t in suite.tests if driver.get(t.id) != suite.fingerprint(t, portable=True)]
    missing = sorted(set(driver) - {t.id for t in suite.tests})
    if differ or missing:
        problems.append(
            f"its copy of the suite differs from the driver's in {len(differ) + len(missing)} "
            f"tests (first: {(missing or differ)[0]}); what the suite reads from the "
            "environment ({{ env.X }}, ${{ X }}) must be set alike on every node"
        )
    keys = {u.target.api_key_env for u in models_used(suite) if u.target is not None}
    unset = sorted(k for k in keys if k and not os.environ.get(k))
    if unset:
        problems.append(
            f"the model keys {', '.join(unset)} are not set in this node's environment "
            "(keys never travel with a job: set them where `ray start` runs)"
        )
    return problems


def _pin_repos(suite: Any, spec: RunSpec) -> list[str]:
    """Each remote repository held to the commit the driver resolved, and to its --offline."""
    problems = []
    for repo in remote_repos(suite):
        commit = spec.repos.get(repo_key(repo))
        if commit is None:
            problems.append(f"the driver resolved no commit for repository {repo.source}")
        repo._commit, repo._offline = commit, spec.offline
    return problems


def repo_key(repo: Any) -> str:
    """How ``RunSpec.repos`` names a remote repository of the suite."""
    return f"{repo.source}\0{repo.ref or ''}"


_current: dict[str, _Context] = {}  # this process's context, by run id (one at a time)


@functools.cache
def _watched() -> None:
    """A worker killed with SIGKILL (Ray kills a job's workers, a node is lost, the OOM
    killer) leaves no container running and no scratch: its watchdog, started once per
    worker process, removes them at once, as a command's does. A worker whose interpreter
    ends normally dismisses it last (exit handlers run last-registered first: its sandboxes'
    ``close`` has removed their containers by then), so no sweep runs for nothing."""
    atexit.register(watch_from_outside())


def _context(spec: RunSpec) -> _Context:
    ctx = _current.get(spec.run_id)
    if ctx is None:
        for run_id in list(_current):  # a later run: the earlier one is over here
            _forget(run_id)
        ctx = _current[spec.run_id] = _Context(spec)
    return ctx


def _forget(run_id: str) -> None:
    ctx = _current.pop(run_id, None)
    if ctx is not None:
        ctx.close()


def run_item(spec: RunSpec, job: Job) -> Iterator[Any]:
    """One job on this node, a Ray task of two items. First this node's name, as soon as the
    task starts: the driver then knows where a task lost to its node's (or worker's) death ran,
    and counts it against that node. Then ``("ok", result as JSON text)``; ``("refused", why)``
    when this node fails the preflight (the driver sets it aside and sends the job
    elsewhere); ``("infra", why)`` when our infrastructure failed under the job (the engine
    went away): the driver sends it again, and drains a node that keeps doing it."""
    failure = "refused"  # NodeRefused, or no engine or runtime here
    try:
        yield node_name()
        ctx = _context(spec)
        if ctx.problems:  # a node that joined after the preflight is held to it here
            raise NodeRefused("; ".join(ctx.problems))
        assert ctx.worker is not None
        failure = "infra"  # e.g. the engine went away under a test
        answer = "ok", encode(job, run_job(ctx.worker, job))
    except GradeboxError as exc:
        _forget(spec.run_id)
        answer = failure, str(exc)
    except KeyboardInterrupt:
        # Cancelled by the driver (Ctrl-C): kill this run's containers here, now.
        _forget(spec.run_id)
        raise
    yield answer


def node_op(op: str, spec: RunSpec | None = None, run_id: str | None = None) -> dict[str, Any]:
    """Work pinned to one node: ``preflight`` (may this node run the jobs?) and ``sweep``
    (remove the run's files and whatever killed workers left here)."""
    if op == "preflight":
        assert spec is not None
        report: dict[str, Any] = {"node": node_name(), "problems": []}
        try:
            ctx = _context(spec)
            report["sandbox"] = ctx.box.name
            report["problems"] = ctx.problems
        except GradeboxError as exc:
            _forget(spec.run_id)
            report["problems"] = [str(exc)]
            if isinstance(exc, MissingImages):  # the driver may send them (``image_transfer``)
                report["missing"] = exc.names
        return report
    if op == "sweep":
        assert run_id is not None
        _forget(run_id)
        return {"node": node_name(), **sweep(run_id)}
    raise ValueError(op)


def sweep(run_id: str) -> dict[str, Any]:
    """The run's folder on this node, then containers and scratch of workers that are gone
    (a cancelled or killed test's), by ``gradebox gc``'s rules: a live runner's are kept."""
    folder = run_dir(run_id)
    # Before the folders: the containers' workspaces are mounts there.
    removed = collect_garbage(engine_timeout=30, need_engine=False)
    unmount_below(folder)
    remove_tree(folder)
    scratch = collect_scratch()
    return {"containers": removed, "scratch": len(scratch)}
