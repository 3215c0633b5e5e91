"""SparkEngine: the Engine on Spark executors (PySpark, imported lazily).

The only package of delta_ops that imports pyspark, and only inside functions: importing it
starts no JVM. The session is started on first use (`SparkEngine.session`), from a
`SparkSessionConfig` (embedded `local[*]` by default, any master URL, or Spark Connect).

Every job uses the DataFrame API only (`createDataFrame` from Arrow, `repartition`,
`mapInArrow`, `where` with SQL text, a left anti-join, `toArrow`), so the same code runs on
a classic session and over Spark Connect; nothing uses RDDs or `pyspark.sql.functions`
(whose columns follow a process-wide classic/Connect switch). Size histograms aggregate in
two steps: each task bins its share, the driver adds the per-task bins.

Storage I/O happens in the executors' Python workers through `delta_ops.storage`: each
task rebuilds the table's `Storage` from `Storage.to_config()` (carried in the pickled task
function, never in Spark conf, plans or logs, since it may hold credentials) and runs the
reference `LocalEngine` on its share of the work. Results are therefore those of the local
engine by construction; only the splitting, the anti-join and the histogram aggregation are
Spark's. A delta_ops error raised in a task is raised again on the driver with the same
class and fields (see `tasks._translate`).

Protocol sections: none directly; VACUUM, checkpoints (V2 sidecars), version checksums and
the row-tracking backfill use this engine for their heavy parts.

Modules: `engine` (the `SparkEngine` and how it splits each job), `tasks` (the functions
executors run, and how their errors come back to the driver), `startup` (starting or joining
a classic or Spark Connect session).
"""

from __future__ import annotations

from delta_ops.engine.spark.engine import SparkEngine
from delta_ops.engine.spark.startup import spark_home

__all__ = ["SparkEngine", "spark_home"]
