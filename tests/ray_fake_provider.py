"""Ray's fake multi-node provider (``fake_multinode``, what ``ray.cluster_utils.AutoscalingCluster``
uses), letting a node type declare ``memory`` as a cloud provider's node types do (theirs is
filled in from the instance type). The stock provider passes every resource but CPU and GPU as
a custom one, which Ray refuses for ``memory``: a type without it could never take a task that
asks for memory, so the autoscaler would start nothing for gradebox's tests.

Loaded by the head's autoscaler as an ``external`` provider (tests/ray_cluster.py)."""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider

BOOT_SECONDS = 5.0


class FakeProviderWithMemory(FakeMultiNodeProvider):
    def _create_node_with_resources_and_labels(
        self, node_config: Any, tags: Any, count: int, resources: dict, labels: Any
    ) -> None:
        # A cloud node takes a while to boot; the stock one is up in about a second, before
        # the driver's stall check (2 s) sees that none was: its "waiting up to" line would
        # depend on the machine's speed.
        time.sleep(BOOT_SECONDS)
        resources = dict(resources)
        memory = resources.pop("memory", None)
        original = ray._private.parameter.RayParams

        def params(**kw: Any) -> Any:
            return original(**kw, memory=memory)

        # The stock method builds its RayParams by name; it holds this lock while it does.
        with self.lock:
            ray._private.parameter.RayParams = params
            try:
                super()._create_node_with_resources_and_labels(
                    node_config, tags, count, resources, labels
                )
            finally:
                ray._private.parameter.RayParams = original
