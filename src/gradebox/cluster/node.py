"""What runs on a cluster node, inside a Ray worker process.

A node keeps one ``_Context`` per process for the run at hand: the bundle unpacked once per
node, the node's own sandbox (``auto`` picks oci or docker there), its image resolver, and the
loaded suite (or grader). Building it checks the node: the same
gradebox, reachable engine and runtime, the driver's image ids, the same tests, the model keys.
The preflight reports those checks; a node that joined later meets them at its first test,
which is then refused. A test then
runs exactly as it does locally (``runner._SuiteRun.run_test``).

Files of a run live in ``$TMPDIR/gradebox-ray-RUN`` on each node (the bundle, staged
templates); per-test scratch is named after the worker's pid, as locally. ``sweep`` removes
the run's folder and whatever killed workers left (``gradebox gc``'s rules).
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import GradeboxError
from ..workspace import remove_tree, unmount_below
from .bundle import unpack

__all__ = ["RUN_PREFIX", "Job", "node_op", "run_item", "run_dir"]

RUN_PREFIX = "gradebox-ray-"


def run_dir(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{RUN_PREFIX}{run_id}"


@dataclass(frozen=True)
class Job:
    """Everything a node needs for one run; put in the object store once."""

    run_id: str
    kind: str  # "suite": items are test ids; "grader": records to grade or targets to run
    bundle: Any  # ObjectRef of the packed files (bundle.pack)
    entry: str  # the suite or grader file, relative to the bundle
    images: dict[str, str]  # reference -> id the driver resolved (against its lock)
    sandbox: str | None = None
    allow: tuple[str, ...] = ()
    format: str | None = None
    workspace: str | None = None  # kind grader: the folder mounted for the grader
    fingerprints: dict[str, str] = field(default_factory=dict)  # kind suite: the driver's
    use_cache: bool = True
    model_calls: int = 4
    references: bool = False
    version: str = __version__


class NodeRefused(GradeboxError):
    """This node cannot run the job as the driver planned it."""


_name: list[str] = []


def node_name() -> str:
    """This node as results and errors name it: Ray's node id, its address, its host."""
    if not _name:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        address = next(
            (n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id), "?"
        )
        _name.append(f"{node_id[:12]} ({address}, {socket.gethostname()})")
    return _name[0]


class _Context:
    """One run as this worker process sees it (see the module's docstring)."""

    def __init__(self, job: Job) -> None:
        import ray

        from ..sandbox import get_sandbox

        self.job, self.dir = job, run_dir(job.run_id)
        if job.version != __version__:
            raise NodeRefused(
                f"runs gradebox {__version__}, the driver {job.version}: install the same "
                "version on every node"
            )
        # Only the first process of a node fetches the files from the object store.
        self.root = unpack(lambda: ray.get(job.bundle), self.dir / "bundle")
        self.state: Any = None
        self.tests: dict[str, Any] = {}
        self.grader: Any = None
        self.problems: list[str] = []  # why this node may not run the job; [] when it may
        self.box = get_sandbox(job.sandbox)  # the engine and runtime checks of this node
        try:
            # Not `locked` here: the driver enforced the lock when it planned, and this node
            # must hold the very ids the driver resolved (stricter): _same_images checks.
            self.images = self.box.images(
                build_network="network" in job.allow, build="build" in job.allow
            )
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        from ..plan import plan_suite

        job = self.job
        self._same_images()
        if job.kind == "suite":
            from ..runner import _SuiteRun
            from ..suite import load_suite

            suite = load_suite(self.root / job.entry, format=job.format)
            plan_suite(suite, self.images, job.allow)  # type: ignore[arg-type]
            self.tests = {t.id: t for t in suite.tests}
            self.problems = _suite_problems(suite, self.tests, job.fingerprints)
            # Graders of one test run side by side, as they do locally.
            self.state = _SuiteRun(
                suite, self.box, self.images, job.run_id, workers=4, use_cache=job.use_cache,
                model_calls=job.model_calls, references=job.references,
                scratch=self.dir / f"stage-{os.getpid()}",
            )  # fmt: skip
        else:
            from ..batch import load_grader_ref

            self.grader = load_grader_ref(self.root / job.entry)
            if job.workspace is not None:
                self.workspace = self.root / job.workspace
            else:
                self.workspace = self.dir / "empty"
                self.workspace.mkdir(exist_ok=True)

    def _same_images(self) -> None:
        """Every image the driver planned must be the same bytes here. A grader's own
        Dockerfile is built on each node from the bundle (pinned by its inputs' hash)."""
        from ..errors import ImageError

        for ref, wanted in sorted(self.job.images.items()):
            if ref.startswith("build:"):
                continue
            try:
                got: str | None = self.images.resolve(ref)
            except ImageError:
                got = None
            if got != wanted:
                what = "is missing" if got is None else f"is {got[7:19]}"
                raise NodeRefused(
                    f"image {ref} {what}, the driver's is {wanted[7:19]}: copy the driver's "
                    "images, `gradebox images save ARCHIVE` on the driver, then `gradebox "
                    "images load ARCHIVE` on this node"
                )

    def run(self, item: Any) -> Any:
        job = self.job
        if self.problems:  # a node that joined after the preflight is held to it here
            raise NodeRefused("; ".join(self.problems))
        if job.kind == "suite":
            return self.state.run_test(self.tests[item]).model_dump_json()
        what, _n, payload = item
        if what == "target":
            from ..batch import Record
            from ..trials import run_target_once

            record, command, image_id = payload
            answer = run_target_once(Record.model_validate(record), command, image_id, self.box)
            return answer.model_dump(mode="json", by_alias=True)
        from ..batch import Record
        from ..graders.run import run_grader

        record = Record.model_validate(payload)
        result = run_grader(self.grader, record.payload(), self.workspace, self.box,
                            images=self.images)  # fmt: skip
        return result.model_dump_json()

    def close(self) -> None:
        if self.state is not None:
            self.state.close()
        self.box.close()


def _suite_problems(suite: Any, tests: dict[str, Any], driver: dict[str, str]) -> list[str]:
    """Checked once per process: this node's copy of every test is the driver's, and the
    model keys its graders call are set here."""
    problems = []
    differ = [i for i, t in tests.items() if driver.get(i) != suite.fingerprint(t, portable=True)]
    missing = sorted(set(driver) - set(tests))
    if differ or missing:
        problems.append(
            f"its copy of the suite differs from the driver's in {len(differ) + len(missing)} "
            f"tests (first: {(missing or differ)[0]}); what the suite reads from the "
            "environment ({{ env.X }}, ${{ X }}) must be set alike on every node"
        )
    unset = sorted(k for k in _keys_used(suite) if not os.environ.get(k))
    if unset:
        problems.append(
            f"the model keys {', '.join(unset)} are not set in this node's environment "
            "(keys never travel with a job: set them where `ray start` runs)"
        )
    return problems


def _keys_used(suite: Any) -> set[str]:
    """The key variables of the model targets this suite calls (its graders, a model target
    under test), not every target a targets file lists."""
    from ..preflight import models_used

    return {u.target.api_key_env for u in models_used(suite)
            if u.target is not None and u.target.api_key_env}  # fmt: skip


_current: dict[str, _Context] = {}  # this process's context, by run id (one at a time)


def _context(job: Job) -> _Context:
    ctx = _current.get(job.run_id)
    if ctx is None:
        for run_id in list(_current):  # a later run: the earlier one is over here
            _forget(run_id)
        ctx = _current[job.run_id] = _Context(job)
    return ctx


def _forget(run_id: str) -> None:
    ctx = _current.pop(run_id, None)
    if ctx is not None:
        ctx.close()


def run_item(job: Job, item: Any) -> tuple[str, Any, str]:
    """One test (or record) on this node: ``("ok", result, node)``, or ``("refused", why,
    node)`` when this node cannot run it as the driver planned."""
    try:
        try:
            return "ok", _context(job).run(item), node_name()
        except NodeRefused as exc:
            return "refused", f"node {node_name()}: {exc}", node_name()
        except GradeboxError as exc:  # e.g. the engine went away under a test
            _forget(job.run_id)
            return "refused", f"node {node_name()}: {exc}", node_name()
    except KeyboardInterrupt:
        # Cancelled by the driver (Ctrl-C): kill this run's containers here, now.
        _forget(job.run_id)
        raise


def node_op(op: str, job: Job | None = None, run_id: str | None = None) -> dict[str, Any]:
    """Work pinned to one node: ``preflight`` (may this node run the job?) and ``sweep``
    (remove the run's files and whatever killed workers left here)."""
    if op == "preflight":
        assert job is not None
        report: dict[str, Any] = {"node": node_name(), "problems": []}
        try:
            ctx = _context(job)
            report["sandbox"] = ctx.box.name
            report["problems"] = ctx.problems
        except GradeboxError as exc:
            _forget(job.run_id)
            report["problems"] = [str(exc)]
        return report
    if op == "sweep":
        assert run_id is not None
        _forget(run_id)
        return {"node": node_name(), **sweep(run_id)}
    raise ValueError(op)


def sweep(run_id: str) -> dict[str, Any]:
    """The run's folder on this node, then containers and scratch of workers that are gone
    (a cancelled or killed test's), by ``gradebox gc``'s rules: a live runner's are kept."""
    from ..sandbox import oci
    from ..sandbox._engine import Engine
    from ..sandbox.docker import collect_garbage
    from ..scratch import collect_scratch

    folder = run_dir(run_id)
    removed: list[str] = []
    removed += oci.collect_garbage()  # before the folders: their workspaces are mounts there
    with contextlib.suppress(GradeboxError):  # no engine here: nothing of ours ran here
        removed += [c["Id"][:12] for c in collect_garbage(Engine.connect(timeout=30))]
    unmount_below(folder)
    remove_tree(folder)
    scratch = collect_scratch()
    return {"containers": removed, "scratch": len(scratch)}
