"""What a job asks of a Ray node: its containers' declared limits as Ray's ``num_cpus`` and
``memory``, beside the one ``gradebox`` slot, so that the scheduler packs nodes by what the
graders may take, and a test no node could hold is refused before anything runs.

A test's containers run in phases: the target (alone), then its graders, up to
``GRADER_THREADS`` side by side (a node's worker runs a test's graders on that many threads).
Its need is the larger phase: the sum of its largest ``GRADER_THREADS`` graders' limits (CPU
and memory each), its target's, or a workspace hook's (the default limits). Built-in and LLM
assertions, and a target answered on the host (mock, replay, a model), run in the worker
itself and ask for nothing but the slot.
Pure: nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.sizes import format_bytes
from ..graders.assertion import GraderAssertion, leaves
from ..sandbox.defaults import DEFAULT_LIMITS, Limits

__all__ = ["GRADER_THREADS", "TARGET_RUN", "Need", "grader_need", "test_need", "too_large"]

GRADER_THREADS = 4  # a node's worker runs one test's graders this many at a time
SLOT = "gradebox"  # the resource every node that runs gradebox jobs offers, one per job


@dataclass(frozen=True, order=True)
class Need:
    """What one job asks of a node besides its ``gradebox`` slot: cores and bytes."""

    cpus: float = 0.0
    memory: int = 0

    def ray_options(self) -> dict[str, Any]:
        """The task's resource request (Ray keeps four decimals of a CPU)."""
        return {"num_cpus": round(self.cpus, 4), "memory": self.memory, "resources": {SLOT: 1}}

    def fits(self, resources: Mapping[str, float]) -> bool:
        """Whether a node with these total resources could ever run the job."""
        return (
            resources.get(SLOT, 0) >= 1
            and resources.get("CPU", 0) >= round(self.cpus, 4)
            and resources.get("memory", 0) >= self.memory
        )

    def __str__(self) -> str:
        return f"{self.cpus:g} CPU and {format_bytes(self.memory)}"


def _phase(limits: Iterable[Limits], at_once: int) -> Need:
    """Containers that may run together: the largest ``at_once`` of each resource, summed."""
    items = list(limits)
    cpus = sorted((float(lim.cpus) for lim in items), reverse=True)[:at_once]
    memory = sorted((int(lim.memory) for lim in items), reverse=True)[:at_once]
    return Need(sum(cpus), sum(memory))


def test_need(suite: Any, test: Any) -> Need:
    """One test of ``suite``: the larger of its target's limits and its graders' at once."""
    graders = [
        a.grader.limits for a in leaves(test.every_assertion()) if isinstance(a, GraderAssertion)
    ]
    target = test.target or suite.spec.target
    phases = [_phase(graders, GRADER_THREADS)]
    if target is not None and not target.on_host:  # a mock, replay or model one: no container
        phases.append(_phase([target.limits], 1))
    ws = test.workspace
    if ws is not None and (ws.before_all or ws.before_each or ws.after_each):
        phases.append(_phase([DEFAULT_LIMITS], 1))  # a hook: alone, at ``run_hook``'s limits
    return Need(max(p.cpus for p in phases), max(p.memory for p in phases))


def grader_need(limits: Limits | None) -> Need:
    """A record graded by one grader (``batch``, ``trials``): its limits."""
    return _phase([limits or DEFAULT_LIMITS], 1)


# A trial's target run (``jobs.run_target_once``): the default limits, whatever the grader's.
TARGET_RUN = grader_need(None)


def too_large(needs: Mapping[str, Need], sizes: Iterable[Mapping[str, float]]) -> list[str]:
    """One line for each job (by its label) that fits none of the node ``sizes`` (their
    total resources), naming its need and the largest node's."""
    nodes = list(sizes)
    if not nodes:
        return []
    best = max(nodes, key=lambda r: (r.get("CPU", 0), r.get("memory", 0)))
    largest = Need(float(best.get("CPU", 0)), int(best.get("memory", 0)))
    return [
        f"{name} asks for {need} (its containers' limits at once); the largest node "
        f"offering `gradebox` has {largest}"
        for name, need in needs.items()
        if not any(need.fits(n) for n in nodes)
    ]
