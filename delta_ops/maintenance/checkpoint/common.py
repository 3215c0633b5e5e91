"""What every checkpoint kind's writer shares: serializing to Parquet in memory, what
verification expects, and putting a verified file under its final name (`writer.py`,
`v2.py`, `streamed.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from delta_ops.errors import CheckpointError, CheckpointRaceLost, DeltaOpsError
from delta_ops.log import Snapshot
from delta_ops.maintenance.checkpoint import actions as act
from delta_ops.maintenance.checkpoint.plan import CheckpointPlan
from delta_ops.maintenance.checkpoint.verify import normalize
from delta_ops.protocol.checkpoint_schema import CheckpointLayout
from delta_ops.protocol.last_checkpoint import LastCheckpoint
from delta_ops.storage import Storage


@dataclass(frozen=True)
class _Written:
    names: list[str]
    num_actions: int
    size_in_bytes: int
    last_checkpoint: LastCheckpoint


# ---- helpers -----------------------------------------------------------------------------------


def _parquet_bytes(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> pa.Buffer:
    # Column statistics cost nothing measurable to write, and their null counts let
    # readers skip, row group by row group, the columns of actions a group does not hold
    # (Spark writes them too).
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink, schema, compression="snappy", use_dictionary=False, write_statistics=True
    ) as writer:
        for batch in batches:
            if batch.num_rows:
                writer.write_batch(batch, row_group_size=act.BATCH_ROWS)
    return sink.getvalue()


def _expected_files(
    files: pa.Table, tombstones: pa.Table, layout: CheckpointLayout
) -> tuple[pa.Table, pa.Table]:
    """The columns verification compares: live files (with their statistics, which the
    checkpoint must keep when its layout carries statistics in some form) and tombstones,
    in file order."""
    add_columns = ["path", "size", "deletionVector"]
    if act.carries_stats(layout):
        add_columns.append("stats")
    return files.select(add_columns), tombstones.select(
        ["path", "deletionVector"]
    )


def _expected_non_file(
    snapshot: Snapshot,
    plan: CheckpointPlan,
    *,
    json: bool = False,
    checkpoint_version: int | None = None,
    sidecars: list[dict[str, Any]] | None = None,
) -> dict[str, list[Any]]:
    if json:
        protocol = normalize(act.json_protocol(snapshot.protocol))
        metadata = normalize(act.json_metadata(snapshot.metadata.raw))
    else:
        protocol = normalize(act.checkpoint_protocol(snapshot.protocol, plan.layout))
        row = act.checkpoint_metadata_row(snapshot.metadata.raw)
        row["format"]["options"] = dict(row["format"]["options"] or [])
        row["configuration"] = dict(row["configuration"] or [])
        metadata = normalize(row)
    out: dict[str, list[Any]] = {
        "protocol": [protocol],
        "metaData": [metadata],
        "txn": [normalize(t.to_dict()) for t in snapshot.txns.values()],
        "domainMetadata": [normalize(d.to_dict()) for d in snapshot.domains.values()],
    }
    if checkpoint_version is not None:
        out["checkpointMetadata"] = [{"version": checkpoint_version}]
        out["sidecar"] = [normalize(s) for s in sidecars or []]
    return out


def _put_verified(
    storage: Storage,
    path: str,
    data: bytes | Path,
    *,
    overwrite: bool,
    plan: CheckpointPlan,
    size: int | None = None,
) -> None:
    """Write a verified file (bytes, or a local file of `size` bytes) under its final name
    and check what landed."""
    expected = len(data) if size is None else size
    if overwrite:
        # A name another writer may use too (classic, multi-part): never replace a file that
        # reads (theirs, landed since the look for an existing checkpoint; a reader may be
        # in it), only a corrupt one (what the look found unusable).
        if not storage.put_if_absent(path, data) and not _same_bytes(storage, path, data):
            if _reads(storage, path):
                raise CheckpointRaceLost(
                    "another writer's checkpoint file appeared under this name while this "
                    "one was written; it was not replaced",
                    table=plan.table, version=plan.version, file=path,
                )
            storage.put_atomic(path, data)
    elif not storage.put_if_absent(path, data):
        raise CheckpointError(
            "a file with this unique name already exists; refusing to overwrite it",
            table=plan.table,
            version=plan.version,
            file=path,
        )
    info = storage.info(path)
    if info is None or info.size != expected:
        raise CheckpointError(
            f"the checkpoint file written has size {None if info is None else info.size}, "
            f"expected {expected}",
            table=plan.table,
            version=plan.version,
            file=path,
        )


def _same_bytes(storage: Storage, path: str, data: bytes | Path) -> bool:
    """Whether the file at `path` holds `data` (a part an earlier, killed run of this same
    checkpoint left: nothing to replace)."""
    info = storage.info(path)
    size = data.stat().st_size if isinstance(data, Path) else len(data)
    if info is None or info.size != size:
        return False
    return storage.read(path) == (data.read_bytes() if isinstance(data, Path) else data)


def _reads(storage: Storage, path: str) -> bool:
    """Whether the checkpoint file at `path` reads: a Parquet footer, or a first JSON line."""
    try:
        if path.endswith(".json"):
            first = storage.read(path).split(b"\n", 1)[0]
            return bool(first.strip()) and isinstance(orjson.loads(first), dict)
        with storage.open_input(path) as fh:
            return pq.ParquetFile(fh).metadata.num_rows >= 0
    except (OSError, pa.ArrowException, orjson.JSONDecodeError, DeltaOpsError):
        return False
