"""Engines run the heavy parts of maintenance: `local` (threads) or `spark` (PySpark).

`make_engine("spark", spark_master=..., spark_remote=...)` builds either; the Spark engine
imports pyspark only when its session is first used.

The names below load on first use (module `__getattr__`): importing a light submodule such
as `delta_ops.engine.config` or `delta_ops.engine.session` (the command line's engine
flags) imports neither pyarrow nor the local engine.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine
    from delta_ops.engine.local import LocalEngine
    from delta_ops.engine.session import SparkSessionConfig, make_engine

__all__ = ["Engine", "LocalEngine", "SparkSessionConfig", "make_engine"]

#: Where each public name lives.
_HOMES = {
    "Engine": "delta_ops.engine.base",
    "LocalEngine": "delta_ops.engine.local",
    "SparkSessionConfig": "delta_ops.engine.session",
    "make_engine": "delta_ops.engine.session",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
