"""Models for grading: named targets, one hub per run (SDKs, retries, cache, ledger), LLM
graders, and the proxy through which a script grader may call a model.

May import: core, protocol, engine, images, files, sandbox.
"""

from .client import Completion, ModelError, ModelHub
from .targets import ModelTarget, TargetSet, load_targets

__all__ = ["Completion", "ModelError", "ModelHub", "ModelTarget", "TargetSet", "load_targets"]
