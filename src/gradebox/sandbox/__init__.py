"""Sandboxes: run one command in a fresh, isolated, hardened environment, then destroy it."""

from .base import Limits, Mount, RunOutcome, Sandbox, SandboxSpec, Security, get_sandbox

__all__ = ["Limits", "Mount", "RunOutcome", "Sandbox", "SandboxSpec", "Security", "get_sandbox"]
