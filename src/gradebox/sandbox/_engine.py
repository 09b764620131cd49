"""The engine as the sandbox backends have always imported it: ``gradebox.engine`` (the Docker
SDK's one edge) now sits below both ``images/`` and ``sandbox/``, and is public there."""

from __future__ import annotations

from ..engine import Engine, NotFound, default_engine_calls

__all__ = ["Engine", "NotFound", "default_engine_calls"]
