"""The driver's side of a cluster run: connect, check every node, send the jobs, take the results as
they finish, clean up. ``RayExecutor`` is ``gradebox.lifecycle.executor``'s interface on Ray:
``run``, ``batch`` and ``trials`` hand it the same jobs they hand the local executor.

Ray schedules: each test (or record) is a task named after it that needs one ``gradebox``
resource and the CPU and memory its containers' limits declare (``sizing``), so a node runs as
many at once as it holds. The driver only bounds how many are in flight, sends again the work
of a node that died (at most ``MAX_ATTEMPTS`` times in all), and records each item exactly
once. Ray's own task retries are off: a retry the driver does not see could not be counted.

Nodes come and go: pending tasks are what make an autoscaler start nodes (a cluster may start
with none), and the driver waits up to ``scale_up_timeout`` for a node that can take them. A
node that fails the preflight, or whose jobs fail ``DRAIN_AFTER`` times in a row for our
infrastructure's reasons (its engine went away, or the node or its worker died under them) is
set aside: later tasks carry a label selector that keeps them off it, and its refused work goes
elsewhere. Each task tells its node first, so a task lost to its node's death counts against it,
and the job's next attempt is kept off that node too while another can take it.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import time
from collections import Counter, deque
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ClusterError, GradeboxError
from ..graders.run import build_command, helper_files, translate_args
from ..lifecycle.executor import Done, Executor
from ..lifecycle.jobs import Job, TestJob, TrialJob, decode
from .bundle import pack
from .image_transfer import put_archive
from .node import RunSpec, node_op, run_item
from .sizing import TARGET_RUN, Need, too_large

__all__ = ["MAX_ATTEMPTS", "RayCluster", "RayExecutor"]

log = logging.getLogger("gradebox.cluster")

MAX_ATTEMPTS = 3  # a test whose node died is sent again, up to this many times in all
PREFLIGHT_TIMEOUT = 600.0  # a node may build a grader's own image before it answers
SWEEP_TIMEOUT = 60.0
STALL_CHECK = 2.0  # with nothing finishing for this long, check that a node is left
SCALE_UP_TIMEOUT = 300.0  # for a node to join: a cloud machine takes minutes to boot
DEFAULT_IN_FLIGHT = 64  # pending tasks beyond the slots up now: the autoscaler's demand
DRAIN_AFTER = 3  # a node's jobs failing in a row for infrastructure reasons: set it aside
NODE_ID_LABEL = "ray.io/node-id"  # every Ray node's label with its id
TASK_NAME_CAP = 200  # characters of a job's name kept in its task's (Ray stores each)


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

    def __init__(self, address: str = "auto", scale_up_timeout: float = SCALE_UP_TIMEOUT) -> None:
        self.scale_up_timeout = scale_up_timeout
        ray = _ray()
        if not ray.is_initialized():
            _reachable(address)
            try:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc)
                raise _unreachable(address, reason) from None
        self.ray = ray
        # Streaming: a task tells its node first, then its result (``run_item``).
        self.item = ray.remote(
            num_cpus=0, resources={"gradebox": 1}, max_retries=0, num_returns="streaming"
        )(run_item)
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

    def in_flight(self) -> int:
        """Tasks in flight when not told (``--max-in-flight``): the slots up now, and at least
        ``DEFAULT_IN_FLIGHT`` so that an autoscaler sees demand beyond them (from zero too)."""
        return max(self.slots(), DEFAULT_IN_FLIGHT)

    def sizes(self, set_aside: Collection[str] = ()) -> list[dict[str, float]] | None:
        """The total resources of every node a job could land on: the live ones (but those
        ``set_aside``) and the node types an autoscaler declared (when it reports them to the
        cluster, as autoscaler v2 and KubeRay do). None when an autoscaler runs whose node
        types cannot be read: a larger node may yet come, so only the scale-up timeout can
        tell."""
        sizes = [dict(n["Resources"]) for n in self.nodes() if n["NodeID"] not in set_aside]
        try:
            # lazy, private: Ray's only reader of the autoscaler's reported configuration
            from ray._private.state import state

            config = state.get_cluster_config()
        except Exception:  # any failure: no node types known
            config = None
        if config is not None and config.node_group_configs:
            return sizes + [dict(g.resources) for g in config.node_group_configs]
        return None if self.autoscaled() else sizes

    def autoscaled(self) -> bool:
        """Whether an autoscaler with node types of its own runs this cluster. Ray's monitor
        runs on every head; without an autoscaling configuration (a cluster of `ray start`
        nodes) its read-only provider names each node's type ``node_<its id>``."""
        try:
            # lazy, private: where the monitor writes its status
            from ray.experimental.internal_kv import _internal_kv_get

            status = _internal_kv_get("__autoscaling_status")
            types = json.loads(status)["autoscaler_report"]["node_type_mapping"] if status else {}
        except Exception:  # unreadable: no autoscaler we can tell of
            return False
        return any(kind != f"node_{node}" for node, kind in (types or {}).items())

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

    def start(
        self,
        root: Path,
        exclude: Collection[Path] = (),
        needs: dict[str, Need] | None = None,
        need: Need = Need(),  # noqa: B008 (frozen)
        **fields: Any,
    ) -> RayExecutor:
        """Put a run's files in the object store, then check every node (``RayExecutor``).
        ``needs``: each job's request by its name (``str(job)``); ``need``: any other's;
        ``fields``: the rest of the ``RunSpec``."""
        bundle = self.ray.put(pack(root, exclude))
        spec = RunSpec(run_id=secrets.token_hex(6), bundle=bundle, **fields)
        run = RayExecutor(self, spec, needs, need)
        run.preflight()
        return run


class RayExecutor(Executor):
    """One run on the cluster: checked on every node, its jobs mapped over the nodes, swept.
    Each job runs on a node through ``jobs.run_job``, as a local one does."""

    remote = True

    def __init__(
        self,
        cluster: RayCluster,
        spec: RunSpec,
        needs: dict[str, Need] | None = None,
        need: Need = Need(),  # noqa: B008 (frozen)
    ) -> None:
        self.cluster, self.spec = cluster, spec
        self.ray = cluster.ray
        self.run_id = spec.run_id
        self.spec_ref = self.ray.put(spec)
        self.reports: list[dict[str, Any]] = []  # what each node said at the preflight
        self.sent = ""  # the images sent to nodes that lacked them, in a few words
        self.needs, self.need = needs or {}, need
        self.set_aside: dict[str, str] = {}  # node id -> why no job goes there any more
        self.failing: Counter[str] = Counter()  # node id -> infrastructure errors in a row
        # Told while no node can take the work (the text), and once one can (None): the
        # command shows it on its progress line.
        self.on_wait: Any = lambda text: log.warning("%s", text) if text else None

    def close(self) -> None:
        """The run is over: sweep every node (its files, and what killed workers left)."""
        self.sweep()

    def preflight(self) -> None:
        """Check every node before anything runs: one that cannot run the jobs as planned (no
        engine or runtime, other image ids, another gradebox, another copy of a test) is set
        aside with one line; the run stops (nothing ran) only when every node is. Nodes that
        lack only runtime images get them from the driver (once) and are checked again. With
        no node up yet the run waits for one (``map``). A job larger than every node that can
        be known is refused here."""
        refused, lacking = self._preflight_nodes()
        if lacking:
            self.send_images(lacking)
            refused, lacking = self._preflight_nodes()
        if refused and not self.reports:
            self.sweep()
            raise ClusterError(
                f"{len(refused)} problem(s) on the cluster, no usable node; nothing ran:\n  "
                + "\n  ".join(f"node {name}: {why}" for name, why in refused)
            )
        for name, why in refused:
            self._set_aside(name, why, "fails the preflight")
        sizes = self.cluster.sizes(self.set_aside)
        if sizes is not None:  # else: an autoscaler may start a larger node: wait and see
            named = {f"test {k}": v for k, v in self.needs.items()} or {"each job": self.need}
            lines = too_large(named, sizes)
            if lines:
                self.sweep()
                more = f" (and {len(lines) - 1} more tests)" if len(lines) > 1 else ""
                raise ClusterError(f"{lines[0]}{more}; nothing ran")

    def _set_aside(self, name: str, why: str, what: str) -> None:
        """No job goes to this node any more (``name``: as ``node_name`` gives it)."""
        node_id = next(
            (n["NodeID"] for n in self.ray.nodes() if n["NodeID"].startswith(name[:12])), None
        )
        if node_id is None or node_id in self.set_aside:
            return
        self.set_aside[node_id] = why
        log.warning("node %s %s and is set aside: %s", name, what, why)

    def usable(self) -> list[dict[str, Any]]:
        """Live gradebox nodes not set aside."""
        return [n for n in self.cluster.nodes() if n["NodeID"] not in self.set_aside]

    def _kept_off(self, item: Job, lost: tuple[str, ...]) -> list[str]:
        """The usable nodes ``item`` was ``lost`` on (their ids' first characters, as
        ``node_name`` gives them) while another usable node can take it, else none: a node
        that flaps without being drained yet could take all of its attempts."""
        if not lost:  # a first attempt, as most are: no need to ask Ray for its nodes
            return []
        usable, need = self.usable(), self._need(item)
        there = [n["NodeID"] for n in usable if n["NodeID"].startswith(lost)]
        elsewhere = any(need.fits(n["Resources"]) for n in usable if n["NodeID"] not in there)
        return there if elsewhere else []

    def _task(self, item: Job, off: Sequence[str] = ()) -> Any:
        """The Ray task for one job: named after it, asking for what it needs, kept off the
        nodes set aside and ``off`` (``_kept_off``)."""
        options: dict[str, Any] = {"name": _task_name(item), **self._need(item).ray_options()}
        avoid = [*self.set_aside, *off]
        if avoid:
            options["label_selector"] = {NODE_ID_LABEL: f"!in({','.join(avoid)})"}
        return self.cluster.item.options(**options)

    def _need(self, item: Job) -> Need:
        if isinstance(item, TrialJob):  # a target run, not the grader's: limits of its own
            return TARGET_RUN
        return self.needs.get(str(item), self.need)

    def _preflight_nodes(self) -> tuple[list[tuple[str, str]], set[str]]:
        """The nodes refused, each with why, and the images the nodes that lack only images
        lack (which the driver can send, once). The others' reports are kept."""
        refused: list[tuple[str, str]] = []  # (node, why)
        lacking: set[str] = set()
        self.reports = []
        for name, report in self.cluster.on_every_node(
            PREFLIGHT_TIMEOUT, "preflight", self.spec_ref
        ):
            if isinstance(report, BaseException):
                refused.append((name, _first_line(report)))
            elif report["problems"]:
                if report.get("missing") and not self.spec.images_sent:
                    lacking.update(report["missing"])
                refused.append((report["node"], "; ".join(report["problems"])))
            else:
                self.reports.append(report)
        return refused, lacking

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
        aside = f", {len(self.set_aside)} set aside" if self.set_aside else ""
        if not self.reports:
            return f"no node offers `gradebox` yet{aside}: the tests' demand may start one"
        slots = sum(n["Resources"]["gradebox"] for n in self.usable())
        return f"{len(self.reports)} nodes ({kinds}), {slots:g} slots{aside}{sent}"

    def map(self, jobs: Sequence[Job], in_flight: int) -> Iterator[Done]:
        """Each job on some node, at most ``in_flight`` at once, in the order they finish.

        A job whose node or worker died is sent again; an interruption (Ctrl-C) or an early
        exit cancels what is in flight. ``close`` then sweeps every node."""
        ray = self.ray
        # a job, its attempt, the nodes it was lost on (as ``_kept_off`` takes them)
        todo: deque[tuple[Job, int, tuple[str, ...]]] = deque((job, 1, ()) for job in jobs)
        pending: dict[Any, tuple[Job, int, tuple[str, ...]]] = {}  # a task's stream -> its job
        where: dict[Any, str] = {}  # a task's stream -> the node it started on
        kept_off: set[Any] = set()  # the tasks sent kept off a node they were lost on
        last = time.monotonic()
        waiting = _Wait(self.cluster.scale_up_timeout, self.on_wait)
        try:
            while todo or pending:
                while todo and len(pending) < max(1, in_flight):
                    item, attempt, lost = todo.popleft()
                    off = self._kept_off(item, lost)
                    task = self._task(item, off).remote(self.spec_ref, item)
                    pending[task] = (item, attempt, lost)
                    if off:
                        kept_off.add(task)
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                if not ready:
                    if time.monotonic() - last > STALL_CHECK or waiting.since is not None:
                        last = time.monotonic()
                        # A task kept off where it was lost, not started, that no other
                        # usable node can take any more (they died, or were set aside since):
                        # else it would wait forever. It goes out again, the same attempt.
                        for task in [t for t in kept_off if t not in where]:
                            item, attempt, lost = pending[task]
                            if not self._kept_off(item, lost):
                                ray.cancel(task, force=False)
                                kept_off.discard(task)
                                del pending[task]
                                todo.appendleft((item, attempt, lost))
                        self._check_nodes(waiting, [j for j, *_ in pending.values()], len(todo))
                    continue
                last = time.monotonic()
                waiting.over()
                for task in ready:
                    ref = next(task)
                    if task not in where and (node := self._started(ref)) is not None:
                        where[task] = node  # running there: its result comes next
                        continue
                    item, attempt, lost = pending.pop(task)
                    node = where.pop(task, None)
                    kept_off.discard(task)
                    done = self._collect(ref, item, attempt, node)
                    if isinstance(done, int):
                        lost += (node.split(" ", 1)[0],) if node else ()
                        todo.appendleft((item, done, lost))
                    else:
                        yield done
        except BaseException:
            self.cancel(list(pending))
            raise

    def _check_nodes(self, waiting: _Wait, pending: list[Job], queued: int) -> None:
        """Nothing finishes: is there a node that can take the pending work? Waits up to the
        scale-up timeout for one (from zero, after every node was lost or set aside, or for
        a node large enough), then stops the run (finished jobs are kept)."""
        usable = self.usable()
        up_to = f"{self.cluster.scale_up_timeout:.0f} s"
        sizes = [n["Resources"] for n in usable]
        stuck = [j for j in pending if not any(self._need(j).fits(n) for n in sizes)]
        if not usable:
            gone = "any more" if self.reports or self.set_aside else "yet"
            offering = "for a node offering gradebox"
            text = f"no node offers `gradebox` {gone}: waiting up to {up_to} {offering}"
            why = f"no usable node offers `gradebox` {gone} (waited {up_to}"
        elif stuck and len(stuck) == len(pending):
            text = f"waiting up to {up_to} for a node large enough for {_label(stuck[0])}"
            line = too_large({_label(stuck[0]): self._need(stuck[0])}, sizes)
            why = f"{line[0]} (waited {up_to} for a larger one"
        else:
            waiting.over()
            return
        left = len(pending) + queued
        waiting.wait(
            text,
            f"{why}, --scale-up-timeout); {left} tests were not run (finished ones are kept)",
        )

    def _started(self, ref: Any) -> str | None:
        """A task's first item: the node it started on; None when it was lost before (its
        error is then what ``_collect`` takes from the same item)."""
        try:
            return str(self.ray.get(ref))
        except self.ray.exceptions.RayError:
            return None

    def _collect(self, ref: Any, item: Job, attempt: int, node: str | None) -> Done | int:
        """What came back from ``node`` (where the task started; None: lost before it
        started); an int: the job goes out again, as that attempt (its node was lost,
        refused it or failed under it)."""
        exceptions = self.ray.exceptions
        try:
            status, value = self.ray.get(ref)
        except exceptions.RayTaskError as exc:  # our code raised on the node: no retry
            return Done(item, None, f"on the cluster: {_first_line(exc)}", node, attempt)
        except exceptions.RayError as exc:  # the node or its worker died under it
            if node is not None:  # it had started there: the loss counts against that node
                self._failed(node, type(exc).__name__)
            if attempt < MAX_ATTEMPTS:
                log.warning(
                    "%s: its node was lost (%s); sending it again (attempt %d)",
                    item,
                    type(exc).__name__,
                    attempt + 1,
                )
                return attempt + 1
            why = f"its node was lost {attempt} times ({type(exc).__name__}); not run again"
            return Done(item, None, why, node, attempt)
        assert node is not None  # a task tells its node before it answers
        node_id = node.split(" ", 1)[0]
        if status == "refused":  # nothing ran there: the job goes elsewhere as it was
            self._set_aside(node, value, "fails the preflight")
            if any(i.startswith(node_id) for i in self.set_aside):
                return attempt
            return Done(item, None, f"node {node}: {value}", node, attempt)
        if status == "infra":
            self._failed(node, value)
            if attempt < MAX_ATTEMPTS:
                log.warning("%s: failed on node %s (%s); sending it again", item, node, value)
                return attempt + 1
            return Done(item, None, f"node {node}: {value}", node, attempt)
        self.failing[node_id] = 0
        return Done(item, decode(item, value), None, node, attempt)

    def _failed(self, node: str, why: str) -> None:
        """A job failed on ``node`` for our infrastructure's reasons: drained at
        ``DRAIN_AFTER`` in a row."""
        node_id = node.split(" ", 1)[0]
        self.failing[node_id] += 1
        if self.failing[node_id] >= DRAIN_AFTER:
            text = f"{self.failing[node_id]} jobs in a row failed there (last: {why})"
            self._set_aside(node, text, "is drained")

    def cancel(self, tasks: list[Any]) -> None:
        """Stop work in flight: first as Ctrl-C does inside the task (its containers are
        removed there), then by killing the workers that did not stop."""
        ray = self.ray
        for task in tasks:
            ray.cancel(task, force=False)
        ends = {task.completed(): task for task in tasks}  # a task's end, not its next item
        _, left = ray.wait(list(ends), num_returns=len(ends), timeout=10) if ends else ([], [])
        for ref in left:
            ray.cancel(ends[ref], force=True)
        if left:
            ray.wait(left, num_returns=len(left), timeout=10)

    def sweep(self) -> None:
        """On every live node: remove the run's folder, and containers and scratch that
        killed workers left."""
        for name, report in self.cluster.on_every_node(SWEEP_TIMEOUT, "sweep", run_id=self.run_id):
            if isinstance(report, BaseException):
                log.warning("sweep: node %s: %s", name, _first_line(report))


def _reachable(address: str) -> None:
    """Fail at once on a ``host:port`` nothing listens on (Ray itself would wait minutes)."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        raise _unreachable(address, exc.strerror or exc) from None


def _unreachable(address: str, reason: object) -> ClusterError:
    return ClusterError(
        f"cannot reach a Ray cluster at {address!r} ({reason}); start one with "
        "`ray start --head` and give its address to --ray"
    )


class _Wait:
    """How long the run has waited for a node that can take its work: told to the command
    once (``on_wait``), given up on (exit 4) past ``timeout``."""

    def __init__(self, timeout: float, on_wait: Any) -> None:
        self.timeout, self.on_wait = timeout, on_wait
        self.since: float | None = None

    def wait(self, text: str, fail: str) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self.on_wait(text)
        elif time.monotonic() - self.since > self.timeout:
            raise ClusterError(fail)

    def over(self) -> None:
        if self.since is not None:
            self.since = None
            self.on_wait(None)


def _task_name(job: Job) -> str:
    """A job's name as Ray stores and `ray list tasks` shows it: a test id is any string, so
    only its printable characters (others as U+FFFD: controls, bidi overrides, newlines), and
    at most ``TASK_NAME_CAP`` of them."""
    text = str(job)[:TASK_NAME_CAP]
    return text if text.isprintable() else "".join(c if c.isprintable() else "\ufffd" for c in text)


def _label(job: Job) -> str:
    return f"test {job}" if isinstance(job, TestJob) else str(job)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def suite_paths(suite: Any) -> list[Path]:
    """Every file and folder a suite's tests need: the suite, templates, graders, custom
    assertions, model targets, a replay target's recordings, repositories and references."""
    paths = [suite.path, *(c.path for c in suite.customs.values())]
    target = suite.spec.target
    if target is not None and isinstance(target.command, list):
        paths += [suite.root / rel for rel in translate_args(target.command, suite.root)[1]]
    if target is not None and target.replay is not None:
        paths += [Path(p) for p in (target.replay.fixtures, target.replay.transcripts) if p]
    if suite.targets is not None:
        paths += [Path(f) for f in suite.targets.sources.values() if f]
    for test in suite.tests:
        case, cfg = test.case, test.workspace
        paths += [suite.root / r for r in (case.reference_workspace, case.reference_patch) if r]
        paths += [Path(f) for f in case.input_files]
        template = suite.template_dir(cfg)
        if template is not None:
            paths.append(template)
        repos = cfg.repos if cfg else []
        paths += [suite.root / str(r.source) for r in repos if "://" not in str(r.source)]
    for a in suite.graders():
        source = a.grader.source_dir
        if source is not None:  # its folder, the files its command names (../), helpers
            paths += [source, *(source / rel for rel in build_command(a.grader)[1])]
            paths += [source / rel for rel, _ in helper_files(a.grader)]
        if a.file:
            paths.append(Path(a.file))
    return [p for p in paths if p.exists()]
