"""Which engine runs a table's heavy work, and the Dagster pool of each engine.

A table's policy names its engine: `local` (in the run's process), `spark` (the Spark
resource's session), or `auto`: local while the table has fewer live files than
`spark_min_files` (default 10,000; counted from `_last_checkpoint`'s `numOfAddFiles`, a
table without a checkpoint counting as small), Spark from there on.

Every maintenance step runs in the pool of its policy's engine (`delta_ops_local`,
`delta_ops_spark`, `delta_ops_auto`): set a limit on `delta_ops_spark` (and
`delta_ops_auto`) in the instance's concurrency settings (`dagster instance concurrency set
delta_ops_spark 2`, or `concurrency: pools:` in dagster.yaml) so a fleet cannot start many
JVMs at once.
"""

from __future__ import annotations

from delta_ops.defs.keys import CHECKPOINT, ROW_TRACKING, VACUUM, VERSION_CHECKSUM

#: Components whose work runs on the table's engine; the others only read and write log
#: files from the run's process.
ENGINE_COMPONENTS = frozenset({CHECKPOINT, VERSION_CHECKSUM, VACUUM, ROW_TRACKING})
#: The default `spark_min_files` of the `auto` engine.
DEFAULT_SPARK_MIN_FILES = 10_000


def engine_pool(engine: str) -> str:
    """The Dagster pool of the steps of tables on `engine`."""
    return f"delta_ops_{engine}"


def auto_engine(live_files: int | None, spark_min_files: int) -> str:
    """`local` or `spark` for a table of `live_files` live files (None: unknown, small)."""
    return "spark" if live_files is not None and live_files >= spark_min_files else "local"


__all__ = ["DEFAULT_SPARK_MIN_FILES", "ENGINE_COMPONENTS", "auto_engine", "engine_pool"]
