"""The driver's side of a cluster run: connect, check every node, send the jobs, take the results as
they finish, clean up. ``RayExecutor`` is ``gradebox.lifecycle.executor``'s interface on Ray:
``run``, ``batch`` and ``trials`` hand it the same jobs they hand the local executor.

Ray schedules: each test (or record) is a task that needs one ``gradebox`` resource, so a node
runs as many at once as it offers. The driver only bounds how many are in flight, sends again
the work of a node that died (at most ``MAX_ATTEMPTS`` times in all), and records each item
exactly once. Ray's own task retries are off: a retry the driver does not see could not be
counted.
"""

from __future__ import annotations

import logging
import secrets
import socket
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ClusterError, GradeboxError
from ..graders.assertion import GraderAssertion, leaves
from ..graders.run import build_command, helper_files, translate_args
from ..lifecycle.executor import Done, Executor
from ..lifecycle.jobs import Job, decode
from .bundle import pack
from .image_transfer import put_archive
from .node import RunSpec, node_op, run_item

__all__ = ["MAX_ATTEMPTS", "RayCluster", "RayExecutor"]

log = logging.getLogger("gradebox.cluster")

MAX_ATTEMPTS = 3  # a test whose node died is sent again, up to this many times in all
PREFLIGHT_TIMEOUT = 600.0  # a node may build a grader's own image before it answers
SWEEP_TIMEOUT = 60.0
STALL_CHECK = 10.0  # with nothing finishing for this long, check that a node is left


def _ray() -> Any:
    try:
        import ray  # lazy: ray is an optional extra
    except ImportError:
        raise ClusterError(
            "--ray needs Ray on this machine and on every node: pip install 'gradebox[ray]'"
        ) from None
    return ray


class RayCluster:
    """A connection to a Ray cluster whose nodes offer a ``gradebox`` resource.

    Example::

        cluster = RayCluster("auto")            # or "127.0.0.1:6379", or $RAY_ADDRESS
        print(cluster.slots(), "tests at once")
    """

    def __init__(self, address: str = "auto") -> None:
        ray = _ray()
        if not ray.is_initialized():
            _reachable(address)
            try:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc)
                raise ClusterError(
                    f"cannot reach a Ray cluster at {address!r} ({reason}); start one with "
                    "`ray start --head` and give its address to --ray"
                ) from None
        self.ray = ray
        self.item = ray.remote(num_cpus=0, resources={"gradebox": 1}, max_retries=0)(run_item)
        self.op = ray.remote(num_cpus=0, max_retries=0)(node_op)

    def nodes(self) -> list[dict[str, Any]]:
        """Live nodes that offer gradebox slots."""
        return [
            n
            for n in self.ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("gradebox", 0) > 0
        ]

    def slots(self) -> int:
        """Tests the cluster runs at once: the sum of its nodes' ``gradebox`` resources."""
        return int(sum(n["Resources"]["gradebox"] for n in self.nodes()))

    def on_every_node(self, timeout: float, *args: Any, **kw: Any) -> list[tuple[str, Any]]:
        """``node_op(*args)`` pinned to each live gradebox node: ``(name, report)`` for each,
        where ``report`` is the exception when the op failed or did not answer in time. A
        node that dies meanwhile is left out: it is no longer part of the cluster."""
        # lazy: ray is an optional extra
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pending = {}
        for n in self.nodes():
            pinned = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ref = self.op.options(scheduling_strategy=pinned).remote(*args, **kw)
            pending[ref] = (n["NodeID"], f"{n['NodeID'][:12]} ({n.get('NodeManagerAddress')})")
        out: list[tuple[str, Any]] = []
        deadline = time.monotonic() + timeout
        gone = (self.ray.exceptions.TaskUnschedulableError, self.ray.exceptions.NodeDiedError)
        while pending:
            ready, _ = self.ray.wait(list(pending), num_returns=len(pending), timeout=1.0)
            for ref in ready:
                _, name = pending.pop(ref)
                try:
                    out.append((name, self.ray.get(ref)))
                except gone:
                    pass  # the node died between the listing and the op
                except self.ray.exceptions.RayError as exc:
                    out.append((name, exc))
            alive = {n["NodeID"] for n in self.nodes()}
            late = time.monotonic() > deadline
            for ref, (node_id, name) in list(pending.items()):
                if node_id not in alive or late:
                    self.ray.cancel(ref, force=True)
                    del pending[ref]
                    if late and node_id in alive:
                        out.append((name, TimeoutError(f"did not answer within {timeout:.0f} s")))
        return out

    def start(self, **fields: Any) -> RayExecutor:
        """Put a run's files in the object store, then check every node (``RayExecutor``)."""
        root, exclude = fields.pop("root"), fields.pop("exclude", ())
        bundle = self.ray.put(pack(root, exclude))
        spec = RunSpec(
            run_id=fields.pop("run_id", None) or secrets.token_hex(6), bundle=bundle, **fields
        )
        run = RayExecutor(self, spec)
        run.preflight()
        return run


class RayExecutor(Executor):
    """One run on the cluster: checked on every node, its jobs mapped over the nodes, swept.
    Each job runs on a node through ``jobs.run_job``, as a local one does."""

    remote = True

    def __init__(self, cluster: RayCluster, spec: RunSpec) -> None:
        self.cluster, self.spec = cluster, spec
        self.ray = cluster.ray
        self.run_id = spec.run_id
        self.spec_ref = self.ray.put(spec)
        self.reports: list[dict[str, Any]] = []  # what each node said at the preflight
        self.sent = ""  # the images sent to nodes that lacked them, in a few words

    def close(self) -> None:
        """The run is over: sweep every node (its files, and what killed workers left)."""
        self.sweep()

    def preflight(self) -> None:
        """Refuse, before anything runs, every node that cannot run the jobs as planned:
        no engine or runtime, other image ids, another gradebox, another copy of a test.
        When the only problem is runtime images some nodes lack, send those and check again."""
        problems, lacking = self._check_nodes()
        # Each node that lacks images says so in one problem: these were the only ones.
        if lacking and len(lacking) == len(problems):
            self.send_images({name for names in lacking for name in names})
            problems, lacking = self._check_nodes()
        if not self.reports and not problems:
            raise ClusterError(
                "no node of the Ray cluster offers a `gradebox` resource; start workers with "
                "`ray start --address HEAD --resources '{\"gradebox\": 4}'`"
            )
        if problems:
            self.sweep()
            raise ClusterError(
                f"{len(problems)} problem(s) on the cluster; nothing ran:\n  "
                + "\n  ".join(problems)
            )

    def _check_nodes(self) -> tuple[list[str], list[list[str]]]:
        """Every node's problems, and the images each node that lacks only images lacks
        (which the driver can send, once)."""
        problems, lacking = [], []
        self.reports = []
        for name, report in self.cluster.on_every_node(
            PREFLIGHT_TIMEOUT, "preflight", self.spec_ref
        ):
            if isinstance(report, BaseException):
                problems.append(f"node {name}: {_first_line(report)}")
                continue
            if report.get("missing") and not self.spec.images_sent:
                lacking.append(report["missing"])
            problems += [f"node {report['node']}: {p}" for p in report["problems"]]
            self.reports.append(report)
        return problems, lacking

    def send_images(self, names: set[str]) -> None:
        """Put the archive of ``names`` (the ids the driver planned) in the object store, in
        chunks, and hand it to every node from now on: a node lacking them loads it once."""
        # lazy: the engine's SDK; only a run whose nodes lack images needs it here
        from ..engine import Engine

        ids = {name: self.spec.images[name] for name in names}
        try:
            refs, size = put_archive(Engine.connect(), ids, self.ray.put)
        except GradeboxError as exc:
            self.sweep()
            raise ClusterError(
                f"nodes lack image {', '.join(sorted(names))} and the driver cannot send it: {exc}"
            ) from None
        self.sent = f"sent image {', '.join(sorted(names))} ({size >> 20} MiB, {len(refs)} chunks)"
        log.info("%s to the nodes that lack it", self.sent)
        self.spec = replace(self.spec, images_sent=tuple(refs))
        self.spec_ref = self.ray.put(self.spec)

    def describe(self) -> str:
        """The checked cluster in a few words: nodes, their sandboxes, slots."""
        sandboxes = Counter(r.get("sandbox", "?") for r in self.reports)
        kinds = ", ".join(f"{name} on {n}" for name, n in sorted(sandboxes.items()))
        sent = f"; {self.sent}" if self.sent else ""
        return f"{len(self.reports)} nodes ({kinds}), {self.cluster.slots()} slots{sent}"

    def map(self, jobs: Sequence[Job], in_flight: int) -> Iterator[Done]:
        """Each job on some node, at most ``in_flight`` at once, in the order they finish.

        A job whose node or worker died is sent again; an interruption (Ctrl-C) or an early
        exit cancels what is in flight. ``close`` then sweeps every node."""
        ray = self.ray
        todo = deque((job, 1) for job in jobs)
        pending: dict[Any, tuple[Job, int]] = {}
        last = time.monotonic()
        try:
            while todo or pending:
                while todo and len(pending) < max(1, in_flight):
                    item, attempt = todo.popleft()
                    pending[self.cluster.item.remote(self.spec_ref, item)] = (item, attempt)
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                if not ready:
                    if time.monotonic() - last > STALL_CHECK:
                        last = time.monotonic()
                        if not self.cluster.nodes():
                            raise ClusterError(
                                f"no node offers `gradebox` any more; {len(todo) + len(pending)}"
                                " tests were not run (finished ones are kept)"
                            )
                    continue
                last = time.monotonic()
                for ref in ready:
                    item, attempt = pending.pop(ref)
                    done = self._collect(ref, item, attempt)
                    if done is None:
                        todo.appendleft((item, attempt + 1))
                    else:
                        yield done
        except BaseException:
            self.cancel(list(pending))
            raise

    def _collect(self, ref: Any, item: Job, attempt: int) -> Done | None:
        """What came back; None: the node was lost and the job goes out again."""
        exceptions = self.ray.exceptions
        try:
            status, value, node = self.ray.get(ref)
        except exceptions.RayTaskError as exc:  # our code raised on the node: no retry
            return Done(item, None, f"on the cluster: {_first_line(exc)}", None, attempt)
        except exceptions.RayError as exc:  # the node or its worker died under it
            if attempt < MAX_ATTEMPTS:
                log.warning(
                    "%s: its node was lost (%s); sending it again (attempt %d)",
                    item,
                    type(exc).__name__,
                    attempt + 1,
                )
                return None
            why = f"its node was lost {attempt} times ({type(exc).__name__}); not run again"
            return Done(item, None, why, None, attempt)
        if status == "refused":
            return Done(item, None, value, node, attempt)
        return Done(item, decode(item, value), None, node, attempt)

    def cancel(self, refs: list[Any]) -> None:
        """Stop work in flight: first as Ctrl-C does inside the task (its containers are
        removed there), then by killing the workers that did not stop."""
        ray = self.ray
        for ref in refs:
            ray.cancel(ref, force=False)
        _, left = ray.wait(refs, num_returns=len(refs), timeout=10) if refs else ([], [])
        for ref in left:
            ray.cancel(ref, force=True)
        if left:
            ray.wait(left, num_returns=len(left), timeout=10)

    def sweep(self) -> list[dict[str, Any]]:
        """On every live node: remove the run's folder, and containers and scratch that
        killed workers left."""
        reports = []
        for name, report in self.cluster.on_every_node(SWEEP_TIMEOUT, "sweep", run_id=self.run_id):
            if isinstance(report, BaseException):
                log.warning("sweep: node %s: %s", name, _first_line(report))
            else:
                reports.append(report)
        return reports


def _reachable(address: str) -> None:
    """Fail at once on a ``host:port`` nothing listens on (Ray itself would wait minutes)."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        raise ClusterError(
            f"cannot reach a Ray cluster at {address!r} ({exc.strerror or exc}); start one "
            "with `ray start --head` and give its address to --ray"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def suite_paths(suite: Any) -> list[Path]:
    """Every file and folder a suite's tests need: the suite, templates, graders, custom
    assertions, model targets, a replay target's recordings, repositories and references."""
    paths = [suite.path]
    target = suite.spec.target
    if target is not None and isinstance(target.command, list):
        paths += [suite.root / rel for rel in translate_args(target.command, suite.root)[1]]
    if target is not None and target.replay is not None:
        paths += [Path(p) for p in (target.replay.fixtures, target.replay.transcripts) if p]
    for test in suite.tests:
        template = suite.template_dir(test.workspace)
        if template is not None:
            paths.append(template)
        cfg = test.workspace
        for repo in cfg.repos if cfg else ():
            source = Path(str(repo.source))
            if "://" not in str(repo.source):
                paths.append(source if source.is_absolute() else suite.root / source)
        case = test.case
        for rel in (case.reference_workspace, case.reference_patch):
            if rel:
                paths.append(suite.root / rel)
        paths += [Path(f) for f in case.input_files]
        for a in leaves(test.every_assertion()):
            if isinstance(a, GraderAssertion):
                source = a.grader.source_dir
                if source is not None:  # its folder, the files its command names (../), helpers
                    paths += [source, *(source / rel for rel in build_command(a.grader)[1])]
                    paths += [source / rel for rel, _ in helper_files(a.grader)]
                if a.file:
                    paths.append(Path(a.file))
    paths += [c.path for c in suite.customs.values()]
    if suite.targets is not None:
        paths += [Path(f) for f in suite.targets.sources.values() if f]
    return [p for p in paths if p.exists()]
