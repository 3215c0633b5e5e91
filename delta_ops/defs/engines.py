"""Which engine runs a table's heavy work.

A table whose policy says `engine: local` always runs on the local engine. With
`engine: spark`, the table's size decides when the run starts (`delta_ops.log.segment.table_size`:
the newest `.crc` or `_last_checkpoint` and the commits after it, no replay): more live files
than `spark_above_files` (100,000 by default) or more bytes than `spark_above_bytes` run on
Spark, smaller tables on the local engine in the run's process, so a 66-file VACUUM does not
wait for a JVM. Both thresholds null: always Spark. A size no cheap read tells counts as
large. The choice and its reason are in each engine component's materialization metadata
(`engine`, `engine_reason`).

A run's steps share one Spark session in the run's process (`in_process_executor`), so the
JVMs a fleet starts at once are at most the runs in progress: bound them with the instance's
`concurrency: runs: max_concurrent_runs` (and the watch's `max_runs_in_flight`). A step's
Dagster pool is its table's (`delta_ops.defs.tables.table_pool`): Dagster gives a step one
pool, and keeping two runs off one table is what that pool is for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from delta_ops.defs.keys import CHECKPOINT, OPTIMIZE, ROW_TRACKING, VACUUM, VERSION_CHECKSUM
from delta_ops.defs.policy import Policy

if TYPE_CHECKING:
    from delta_ops.log import TableSize

#: Components whose work runs on the table's engine; the others only read and write log
#: files from the run's process.
ENGINE_COMPONENTS = frozenset({CHECKPOINT, VERSION_CHECKSUM, VACUUM, ROW_TRACKING, OPTIMIZE})


@dataclass(frozen=True)
class EngineChoice:
    """The engine a run uses for a table (`local` or `spark`) and why."""

    name: str
    reason: str


def needs_size(policy: Policy) -> bool:
    """Whether the engine depends on the table's size (engine spark with a threshold)."""
    return policy.engine == "spark" and (
        policy.spark_above_files is not None or policy.spark_above_bytes is not None
    )


def choose_engine(policy: Policy, size: TableSize | None) -> EngineChoice:
    """The engine for a table of `size` under `policy` (`size` only matters when
    `needs_size(policy)`)."""
    if policy.engine == "local":
        return EngineChoice("local", "the table's policy sets engine: local")
    if not needs_size(policy):
        return EngineChoice("spark", "the table's policy sets engine: spark (no size threshold)")
    if size is None or size.num_files is None:
        source = size.source if size is not None else "not read"
        return EngineChoice("spark", f"table size unknown ({source}): Spark")
    files, nbytes = size.num_files, size.size_bytes
    what = f"{files} live files" + (f", {nbytes} bytes" if nbytes is not None else "")
    what += f" at version {size.version} ({size.source})"
    if policy.spark_above_files is not None and files > policy.spark_above_files:
        return EngineChoice("spark", f"{what}: above spark_above_files "
                            f"({policy.spark_above_files})")
    if policy.spark_above_bytes is not None and nbytes is not None and (
        nbytes > policy.spark_above_bytes
    ):
        return EngineChoice("spark", f"{what}: above spark_above_bytes "
                            f"({policy.spark_above_bytes})")
    limits = [f"{k} ({v})" for k, v in (("spark_above_files", policy.spark_above_files),
                                        ("spark_above_bytes", policy.spark_above_bytes))
              if v is not None]
    return EngineChoice("local", f"{what}: not above {' or '.join(limits)}")


def describe_engine(policy: Policy) -> str:
    """The policy's engine rule in words (asset spec metadata)."""
    if not needs_size(policy):
        return policy.engine
    limits = [f"{v} {unit}" for v, unit in ((policy.spark_above_files, "files"),
                                            (policy.spark_above_bytes, "bytes"))
              if v is not None]
    return f"spark above {' or '.join(limits)}, else local"


__all__ = [
    "ENGINE_COMPONENTS",
    "EngineChoice",
    "choose_engine",
    "describe_engine",
    "needs_size",
]
