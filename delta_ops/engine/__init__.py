"""Engines run the heavy parts of maintenance: `local` (threads) or `spark` (PySpark).

`make_engine("spark", spark_master=..., spark_remote=...)` builds either; the Spark engine
imports pyspark only when its session is first used.
"""

from delta_ops.engine.base import Engine
from delta_ops.engine.local import LocalEngine
from delta_ops.engine.session import SparkSessionConfig, make_engine

__all__ = ["Engine", "LocalEngine", "SparkSessionConfig", "make_engine"]
