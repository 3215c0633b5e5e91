"""The Dagster pool of each engine.

Every `<table>__maintenance` step runs in the pool of its policy's engine
(`delta_ops_local`, `delta_ops_spark`): set a limit on `delta_ops_spark` in the instance's
concurrency settings (`dagster instance concurrency set delta_ops_spark 2`, or
`concurrency: pools:` in dagster.yaml) so a fleet cannot start many JVMs at once.
"""

from __future__ import annotations

from delta_ops.defs.keys import CHECKPOINT, ROW_TRACKING, VACUUM, VERSION_CHECKSUM

#: Components whose work runs on the table's engine; the others only read and write log
#: files from the run's process.
ENGINE_COMPONENTS = frozenset({CHECKPOINT, VERSION_CHECKSUM, VACUUM, ROW_TRACKING})


def engine_pool(engine: str) -> str:
    """The Dagster pool of the steps of tables on `engine`."""
    return f"delta_ops_{engine}"


__all__ = ["ENGINE_COMPONENTS", "engine_pool"]
