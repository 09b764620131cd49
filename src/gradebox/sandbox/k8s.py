"""A pod per grader run, on paper: the pod and network-policy manifests a Kubernetes backend
would submit, from a ``SandboxSpec``. Pure functions, unit-tested; no cluster API is called
anywhere in gradebox (docs/kubernetes.md is the design).

The pod keeps every default of the local backends: non-root, no capabilities, no privilege
escalation, a read-only root, limits on memory, CPU, pids and scratch space; and what a shared
cluster needs on top: a sandboxed runtime class (gVisor), no service-account token, no service
links, no host namespaces, the image by digest only, and egress denied by a NetworkPolicy that
selects the pod by its run label.
"""

from __future__ import annotations

import re
from typing import Any

from .base import SandboxSpec, default_user

__all__ = ["network_policy", "pod_spec"]

_DIGEST = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def _label(value: str) -> str:
    return _LABEL_VALUE.sub("-", value)[:63].strip("-_.") or "x"


def pod_spec(
    spec: SandboxSpec,
    *,
    image: str,
    name: str,
    namespace: str = "gradebox",
    runtime_class: str | None = "gvisor",
    workspace_claim: str | None = None,
) -> dict[str, Any]:
    """The pod that runs ``spec`` once. ``image`` must be pinned by digest
    (``registry/name@sha256:...``): a tag could be moved under a running suite."""
    if not _DIGEST.match(image):
        raise ValueError(f"{image!r} is not pinned by digest (name@sha256:<64 hex>)")
    if spec.network != "none":
        raise ValueError("a pod backend runs graders without network; egress is denied")
    uid, _, gid = (spec.security.user or default_user()).partition(":")
    limits = spec.limits
    memory = str(int(limits.memory))
    security: dict[str, Any] = {
        "runAsNonRoot": int(uid) != 0,
        "runAsUser": int(uid),
        "runAsGroup": int(gid or uid),
        "allowPrivilegeEscalation": not spec.security.no_new_privileges,
        "readOnlyRootFilesystem": spec.security.read_only_root,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], "add": list(spec.security.capabilities)},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": str(int(limits.tmpfs))}},
    ]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    if workspace_claim is not None:
        volumes.append(
            {"name": "workspace", "persistentVolumeClaim": {"claimName": workspace_claim}}
        )
        read_only = not any(m.target == "/workspace" and not m.read_only for m in spec.mounts)
        mounts.append({"name": "workspace", "mountPath": "/workspace", "readOnly": read_only})
    labels = {
        "app.kubernetes.io/managed-by": "gradebox",
        **{_label(k): _label(v) for k, v in spec.labels.items()},
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": _label(name).lower(), "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": max(1, int(spec.timeout + 0.999)),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "shareProcessNamespace": False,
            "securityContext": {
                "runAsNonRoot": int(uid) != 0,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "grader",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(spec.command),
                    "workingDir": spec.workdir,
                    "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
                    "stdin": True,
                    "stdinOnce": True,
                    "securityContext": security,
                    "resources": {
                        "limits": {
                            "memory": memory,
                            "cpu": str(limits.cpus),
                            "ephemeral-storage": str(int(limits.file_size)),
                        },
                        "requests": {"memory": memory, "cpu": str(limits.cpus)},
                    },
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }
    if runtime_class:
        pod["spec"]["runtimeClassName"] = runtime_class
    return pod


def network_policy(run_label: str, value: str, namespace: str = "gradebox") -> dict[str, Any]:
    """Deny all egress and ingress to the pods of one run (selected by their run label)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"gradebox-deny-{_label(value)}".lower()[:63],
            "namespace": namespace,
        },
        "spec": {
            "podSelector": {"matchLabels": {_label(run_label): _label(value)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    }
