"""Engines run the heavy parts of maintenance: `local` (threads) or `spark` (PySpark)."""

from delta_ops.engine.base import Engine
from delta_ops.engine.local import LocalEngine

__all__ = ["Engine", "LocalEngine"]
