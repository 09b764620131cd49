"""Gradebox on a Ray cluster: an executor (``gradebox.lifecycle.executor``) whose jobs (the tests of
a suite, the records of a batch, trials) are Ray tasks on the nodes that offer a ``gradebox``
resource, each run under that node's own sandbox by ``jobs.run_job``, as locally. It sits on
top of the package and plugs into the seam: nothing below imports it.

Example::

    cluster = RayCluster("auto")
    with start_suite(cluster, suite, plan, sandbox="auto") as ray_executor:
        summary = run_suite(suite, box, resolver, RunOptions(out_dir=out),
                            executor=ray_executor)

Ray is an optional extra (``pip install 'gradebox[ray]'``); nothing here imports it until a
cluster is asked for.

May import: core, protocol, engine, images, files, sandbox, llm, graders, suite,
lifecycle, drivers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..suite.preflight import remote_repos
from .bundle import common_root
from .driver import MAX_ATTEMPTS, RayCluster, RayExecutor, suite_paths
from .node import repo_key
from .sizing import grader_need, test_need

if TYPE_CHECKING:
    from ..drivers.runner import RunOptions

__all__ = [
    "MAX_ATTEMPTS",
    "RayCluster",
    "RayExecutor",
    "start_grader",
    "start_suite",
]


def start_suite(
    cluster: RayCluster,
    suite: Any,
    plan: Any,
    *,
    sandbox: str,
    allow: set[str] = frozenset(),  # type: ignore[assignment]
    format: str | None = None,
    options: RunOptions | None = None,
    target: str | None = None,
) -> RayExecutor:
    """Send a suite to the cluster and check every node against the driver's plan
    (``target``: ``run --target``, which each node applies as it loads the suite)."""
    root = common_root(suite_paths(suite))
    repos = remote_repos(suite)
    # What the run chose; without options, RunSpec's defaults (they are RunOptions').
    chosen = ("use_cache", "model_calls", "references")
    return cluster.start(
        root=root,
        exclude=[options.out_dir] if options is not None else [],
        kind="suite",
        entry=str(suite.path.resolve().relative_to(root)),
        images=dict(plan.images),
        sandbox=sandbox,
        format=format,
        target=target,
        allow=tuple(sorted(allow | set(suite.spec.allow))),
        repos={repo_key(r): r._commit for r in repos if r._commit},
        offline=any(r._offline for r in repos),
        fingerprints={t.id: suite.fingerprint(t, portable=True) for t in suite.tests},
        needs={t.id: test_need(suite, t) for t in suite.tests},
        **({k: getattr(options, k) for k in chosen} if options is not None else {}),
    )


def start_grader(
    cluster: RayCluster,
    grader_file: Path,
    image_ids: dict[str, str],
    *,
    sandbox: str,
    workspace: Path | None = None,
    allow: set[str] = frozenset(),  # type: ignore[assignment]
    limits: Any = None,
) -> RayExecutor:
    """Send one grader (``batch``, ``trials``) and its workspace to the cluster; each record
    graded asks for the grader's ``limits`` (a trial's target run for its own, ``sizing``)."""
    root = common_root([grader_file, *([workspace] if workspace else [])])
    return cluster.start(
        root=root,
        kind="grader",
        entry=str(grader_file.resolve().relative_to(root)),
        workspace=str(workspace.resolve().relative_to(root)) if workspace else None,
        images=image_ids,
        sandbox=sandbox,
        allow=tuple(sorted(allow)),
        need=grader_need(limits),
    )
