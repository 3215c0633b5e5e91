"""How the log reads, tuned by one value passed down: `ReadOptions`.

The thresholds that pick a reading strategy (stream the state, rebuild it by bucket, spill
VACUUM's references, reconcile a small log in Python) and the bucket counts are fields of a
frozen `ReadOptions`, which the operations pass to `log/`. Nothing in `log/` reads the
environment: the environment variables below still tune a run, read once where a run starts
(the CLI, the operations' entry points, the Dagster steps) by `ReadOptions.from_env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

#: Checkpoint bytes (parts, V2 top-level file and sidecars) from which maintenance streams
#: the state instead of loading it: 16 MiB is about 500,000 live files with short
#: statistics (30 to 60 bytes per file in a snappy checkpoint), whose loaded state takes
#: about 400 MB; with wide statistics it is fewer files and the same memory.
DEFAULT_STREAM_THRESHOLD_BYTES = 16 * 1024 * 1024
#: JSON bytes of the commits (with no usable checkpoint before them) from which a
#: checkpoint is rebuilt by bucket instead of reconciled in memory: 64 MiB is about 200,000
#: adds with statistics, whose in-memory reconciliation peaks near 400 MB.
DEFAULT_REBUILD_THRESHOLD_BYTES = 64 * 1024 * 1024
#: Estimated file actions from which VACUUM partitions its references: about where the
#: in-memory path's peak (0.75 KB per file at 1M) passes half a GB.
DEFAULT_PARTITION_FILES = 500_000
#: Commit bytes up to which `delta-ops snapshot` reconciles in Python. On M-shaped logs
#: (adds with statistics) this path took less time and memory than the Arrow one at every
#: size measured, up to 120 MB of commits (0.86 s and 79 MB against 1.29 s and 431 MB, two
#: cores): it keeps about 200 bytes per file key, Arrow keeps whole actions. The bound
#: keeps logs beyond what was measured on the Arrow path.
DEFAULT_SMALL_LOG_BYTES = 256 << 20

#: The environment variables `ReadOptions.from_env` reads, one per field.
STREAM_THRESHOLD_ENV = "DELTA_OPS_STREAM_THRESHOLD_BYTES"
REBUILD_THRESHOLD_ENV = "DELTA_OPS_REBUILD_THRESHOLD_BYTES"
REBUILD_BUCKETS_ENV = "DELTA_OPS_REBUILD_BUCKETS"
VACUUM_PARTITION_FILES_ENV = "DELTA_OPS_VACUUM_PARTITION_FILES"
VACUUM_BUCKETS_ENV = "DELTA_OPS_VACUUM_BUCKETS"
SMALL_LOG_BYTES_ENV = "DELTA_OPS_SMALL_LOG_BYTES"


@dataclass(frozen=True)
class ReadOptions:
    """The tuning of the log's reads.

    Attributes:
        stream_threshold_bytes: checkpoint bytes from which the state is streamed
            (`$DELTA_OPS_STREAM_THRESHOLD_BYTES`; 0 streams every table).
        rebuild_threshold_bytes: commits' JSON bytes from which a log without a usable
            checkpoint is rebuilt by bucket (`$DELTA_OPS_REBUILD_THRESHOLD_BYTES`; 0 rebuilds
            every table).
        rebuild_buckets: the bucket count of a rebuild (`$DELTA_OPS_REBUILD_BUCKETS`; None
            or 0: estimated from the log's bytes).
        vacuum_partition_files: estimated file actions from which VACUUM spills its
            references by bucket (`$DELTA_OPS_VACUUM_PARTITION_FILES`; 0 spills every table's).
        vacuum_buckets: the bucket count of the spilled references
            (`$DELTA_OPS_VACUUM_BUCKETS`; None or 0: estimated).
        small_log_bytes: commit bytes up to which `delta-ops snapshot` reconciles in Python
            (`$DELTA_OPS_SMALL_LOG_BYTES`; 0 turns the small path off).
    """

    stream_threshold_bytes: int = DEFAULT_STREAM_THRESHOLD_BYTES
    rebuild_threshold_bytes: int = DEFAULT_REBUILD_THRESHOLD_BYTES
    rebuild_buckets: int | None = None
    vacuum_partition_files: int = DEFAULT_PARTITION_FILES
    vacuum_buckets: int | None = None
    small_log_bytes: int = DEFAULT_SMALL_LOG_BYTES

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ReadOptions:
        """The defaults, with each environment variable that is set (and not empty) in
        its place.

        Raises:
            ValueError: a variable is not a number (the message names it), or a count is
                negative.
        """
        env = os.environ if environ is None else environ
        out = cls()
        stream = env.get(STREAM_THRESHOLD_ENV)
        if stream:
            try:
                out = replace(out, stream_threshold_bytes=int(stream))
            except ValueError:
                raise ValueError(
                    f"{STREAM_THRESHOLD_ENV} must be a number of bytes, not {stream!r}"
                ) from None
        rebuild = _count(env, REBUILD_THRESHOLD_ENV)
        if rebuild is not None:
            out = replace(out, rebuild_threshold_bytes=rebuild)
        out = replace(out, rebuild_buckets=_count(env, REBUILD_BUCKETS_ENV))
        partition = _count(env, VACUUM_PARTITION_FILES_ENV)
        if partition is not None:
            out = replace(out, vacuum_partition_files=partition)
        out = replace(out, vacuum_buckets=_count(env, VACUUM_BUCKETS_ENV))
        small = env.get(SMALL_LOG_BYTES_ENV, "").strip()
        if small:
            try:
                out = replace(out, small_log_bytes=max(0, int(small)))
            except ValueError as exc:
                raise ValueError(
                    f"{SMALL_LOG_BYTES_ENV} must be a number of bytes, got {small!r}"
                ) from exc
        return out


def _count(env: Mapping[str, str], name: str) -> int | None:
    """A non-negative whole number from the variable `name` (None when unset or empty)."""
    text = env.get(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} cannot be negative ({value})")
    return value


__all__ = [
    "DEFAULT_PARTITION_FILES",
    "DEFAULT_REBUILD_THRESHOLD_BYTES",
    "DEFAULT_SMALL_LOG_BYTES",
    "DEFAULT_STREAM_THRESHOLD_BYTES",
    "REBUILD_BUCKETS_ENV",
    "REBUILD_THRESHOLD_ENV",
    "ReadOptions",
    "SMALL_LOG_BYTES_ENV",
    "STREAM_THRESHOLD_ENV",
    "VACUUM_BUCKETS_ENV",
    "VACUUM_PARTITION_FILES_ENV",
]
