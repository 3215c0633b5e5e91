"""Commit rewritten bins: their removes and adds in one `dataChange=false` commit per batch.

Spec sections: "Add File and Remove File" (a rewrite that changes no data writes removes
and adds with `dataChange=false`; removes carry `deletionTimestamp`, `size`,
`partitionValues`, `extendedFileMetadata` and the file's deletion vector, which is part of
its key), "Deletion Vectors" (the key of a file action is its path and DV unique id),
"Row Tracking" (removes carry the last add's `baseRowId`/`defaultRowCommitVersion`; new
adds get fresh `baseRowId`s above the high-water mark and `defaultRowCommitVersion` = the
commit's version, assigned by `delta_ops.commit.Transaction`; the materialized columns hold
the preserved values), "Change Data Feed" (a commit that changes no data writes no `cdc`
files), "Commit Provenance Information" (commitInfo as Spark writes it: operation
`OPTIMIZE` with `predicate`, `zOrderBy`, `clusterBy`, `auto`; `REORG` with `predicate` and
`applyPurge`; metrics `numAddedFiles`, `numRemovedFiles`, `numAddedBytes`,
`numRemovedBytes`, `minFileSize`, `p25FileSize`, `p50FileSize`, `p75FileSize`,
`maxFileSize`, `numDeletionVectorsRemoved`; isolation level `SnapshotIsolation`), "Table
Features" (the gate, `ensure_layout_supported`).

Isolation, Spark's rules for a rewrite that changes no data: a concurrent append never
conflicts (new files are not inputs); a concurrent remove of an input, or a new deletion
vector on one (a remove and re-add of its path), makes the bins holding that input fail,
so no deleted row is ever brought back; the other bins of the batch commit. A lost race
is retried by `Transaction` (which checks the winners); a logical conflict is resolved
here by reading the table again, dropping the bins whose inputs are no longer live
unchanged, and committing the rest. A change of the table's protocol or metadata since
the plan fails the whole batch (the files were written for the old schema).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from delta_ops.commit import Transaction
from delta_ops.errors import CommitConflictError, UnsupportedFeatureError
from delta_ops.layout.plan import Bin, InputFile
from delta_ops.layout.rewrite import BinOutput
from delta_ops.log import Snapshot, load_snapshot
from delta_ops.protocol.path_identity import dv_unique_id, relative_key
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage

__all__ = [
    "REFUSED_FEATURES",
    "BatchOutcome",
    "commit_batch",
    "ensure_layout_supported",
    "operation_metrics",
]

#: Table features whose writers must do more than copy rows, with why this writer refuses
#: them (checked besides the commit gate, which already refuses features delta_ops cannot
#: write at all: catalogManaged, checkpointProtection, collations, unknown ones).
REFUSED_FEATURES: dict[str, str] = {
    "clustering": "OPTIMIZE on a clustered table must cluster its rows by the clustering "
    "columns (Spark's liquid clustering); this writer only bin-packs",
    "icebergCompatV1": "Iceberg compatibility (UniForm) needs the Iceberg metadata "
    "converted with every data change, which only Spark does",
    "icebergCompatV2": "Iceberg compatibility (UniForm) needs the Iceberg metadata "
    "converted with every data change, which only Spark does",
    "variantShredding": "shredded variant files carry per-file typed columns this writer "
    "does not rebuild",
    "variantShredding-preview": "shredded variant files carry per-file typed columns this "
    "writer does not rebuild",
}

#: How many times a batch is re-checked against the table after logical conflicts.
MAX_REPLANS = 5


def ensure_layout_supported(config: TableConfiguration, operation: str) -> None:
    """Refuse, before anything is written, a table this writer cannot rewrite data files of.

    Raises:
        UnsupportedFeatureError: names the features (the commit gate's, or
            `REFUSED_FEATURES`) and why.
    """
    config.ensure_supported("commit")
    present = sorted(
        name for name in REFUSED_FEATURES
        if name in config.writer_features or name in config.reader_features
    )
    if present:
        why = "; ".join(f"{name}: {REFUSED_FEATURES[name]}" for name in present)
        raise UnsupportedFeatureError(
            f"cannot {operation}: the table supports {', '.join(present)} ({why}); nothing "
            "was written",
            features=present,
            table=config.table,
            version=config.version,
        )


def _quantile(sizes: Sequence[int], q: float) -> int:
    ordered = sorted(sizes)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def operation_metrics(removed: Sequence[InputFile], adds: Sequence[Mapping[str, Any]]
                      ) -> dict[str, int]:
    """Spark's OPTIMIZE/REORG `operationMetrics` for one commit (sizes of added files)."""
    sizes = [int(a["size"]) for a in adds] or [0]
    return {
        "numAddedFiles": len(adds),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(int(a["size"]) for a in adds),
        "numRemovedBytes": sum(f.size for f in removed),
        "minFileSize": min(sizes),
        "p25FileSize": _quantile(sizes, 0.25),
        "p50FileSize": _quantile(sizes, 0.5),
        "p75FileSize": _quantile(sizes, 0.75),
        "maxFileSize": max(sizes),
        "numDeletionVectorsRemoved": sum(1 for f in removed if f.deletion_vector),
    }


def operation_parameters(operation: str, predicate: str | None) -> dict[str, Any]:
    """Spark's commitInfo `operationParameters` of OPTIMIZE / REORG ... APPLY (PURGE)."""
    preds = json.dumps([predicate] if predicate else [])
    if operation == "purge":
        return {"predicate": preds, "applyPurge": True}
    return {"predicate": preds, "zOrderBy": "[]", "clusterBy": "[]", "auto": False}


def _planned_extras(planned: Snapshot, removed: Sequence[InputFile]
                    ) -> list[tuple[str | None, dict[str, str] | None]]:
    """(stats, tags) of each removed file's add, from its row of the planned snapshot (the
    plan keeps row numbers, not the strings).

    Raises:
        ValueError: a file is not the add at its row of `planned` (bins planned on another
            snapshot), naming the file and the version.
    """
    files = planned.files
    rows = [f.row for f in removed]
    taken = files.take(rows) if rows else files.slice(0, 0)
    paths = taken.column("path").to_pylist()
    stats = (taken.column("stats").to_pylist() if "stats" in taken.column_names
             else [None] * len(rows))
    tags = (taken.column("tags").to_pylist() if "tags" in taken.column_names
            else [None] * len(rows))
    for f, path in zip(removed, paths, strict=True):
        if path != f.path:
            raise ValueError(
                f"input {f.path} is not row {f.row} of the planned snapshot (version "
                f"{planned.version}, table {planned.storage.root}): the bins were planned on "
                "another snapshot; nothing was committed")
    return [(s, dict(t) if t else None) for s, t in zip(stats, tags, strict=True)]


def _remove(f: InputFile, now: int, stats: str | None,
            tags: Mapping[str, str] | None) -> dict[str, Any]:
    rm: dict[str, Any] = {
        "path": f.path,
        "deletionTimestamp": now,
        "dataChange": False,
        "extendedFileMetadata": True,
        "partitionValues": dict(f.partition_values),
        "size": f.size,
    }
    if f.deletion_vector:
        rm["deletionVector"] = dict(f.deletion_vector)
    if stats is not None:
        rm["stats"] = stats
    if tags:
        rm["tags"] = dict(tags)
    if f.base_row_id is not None:
        rm["baseRowId"] = f.base_row_id
    if f.default_row_commit_version is not None:
        rm["defaultRowCommitVersion"] = f.default_row_commit_version
    return rm


def _live_keys(snap: Snapshot) -> set[tuple[str, str | None]]:
    files = snap.files
    root = snap.storage.root
    out: set[tuple[str, str | None]] = set()
    paths = files.column("path").to_pylist()
    dvs = files.column("deletionVector").to_pylist()
    for path, dv in zip(paths, dvs, strict=True):
        key = relative_key(path, root)
        if key is None:
            continue
        if dv is not None and dv.get("storageType") is None:
            dv = None
        out.add((key, dv_unique_id(dv)))
    return out


@dataclass(frozen=True)
class BatchOutcome:
    """What one batch's commit did.

    Attributes:
        version: The version committed, None when no bin of the batch could commit.
        committed: Indexes of the bins committed.
        failed: Bin index -> why it did not commit (an input removed or changed by a
            concurrent commit, or the table's metadata changed).
        metrics: The commit's operationMetrics (empty without a commit).
    """

    version: int | None
    committed: tuple[int, ...]
    failed: Mapping[int, str]
    metrics: Mapping[str, int]


def commit_batch(
    storage: Storage,
    planned: Snapshot,
    bins: Sequence[Bin],
    outputs: Sequence[BinOutput],
    *,
    operation: str,
    predicate: str | None,
    clock: Callable[[], int] | None = None,
    engine: Any = None,
) -> BatchOutcome:
    """Commit the rewritten `bins` (with their `outputs`, same order) in one commit.

    Args:
        storage: The table.
        planned: The snapshot the plan was made on (its protocol and metadata must still
            be the table's).
        bins, outputs: The bins and what their tasks wrote.
        operation: "optimize" or "purge".
        predicate: The `where` text (commitInfo `predicate`).
        clock: Milliseconds (removes' deletionTimestamp and the commit's timestamp).
        engine: Reads Parquet footers if a row count is needed and missing.
    """
    from delta_ops.clock import system_clock

    clock = clock or system_clock
    failed: dict[int, str] = {}
    pending = list(zip(bins, outputs, strict=True))
    snap = planned
    for _attempt in range(MAX_REPLANS + 1):
        if snap is not planned:
            same = (snap.protocol == planned.protocol
                    and snap.metadata.raw == planned.metadata.raw)
            if not same:
                for b, _ in pending:
                    failed[b.index] = (
                        f"the table's protocol or metadata changed after version "
                        f"{planned.version} (now {snap.version}); plan again")
                return BatchOutcome(None, (), failed, {})
        # Every input is live in the planned snapshot (the plan took it from there, and
        # `_planned_extras` checks each one is its row); a snapshot read after a conflict
        # is checked file by file.
        live = None if snap is planned else _live_keys(snap)
        keep = []
        for b, out in pending:
            gone = [] if live is None else [f for f in b.files if f.file_key() not in live]
            if gone:
                failed[b.index] = (
                    f"input {gone[0].path} was removed or got a new deletion vector in a "
                    f"concurrent commit (table version {snap.version})")
            else:
                keep.append((b, out))
        pending = keep
        if not pending:
            return BatchOutcome(None, (), failed, {})
        now = int(clock())
        removed = [f for b, _ in pending for f in b.files]
        adds = [a for _, out in pending for a in out.adds]
        metrics = operation_metrics(removed, adds)
        txn = Transaction(
            storage,
            snapshot=snap,
            operation="REORG" if operation == "purge" else "OPTIMIZE",
            operation_parameters=operation_parameters(operation, predicate),
            operation_metrics=metrics,
            isolation_level="SnapshotIsolation",
            clock=clock,
            engine=engine,
            row_counts={a["path"]: _num_records(a) for a in adds if _num_records(a) is not None},
        )
        extras = _planned_extras(planned, removed)
        txn.remove_files(_remove(f, now, stats, tags)
                         for f, (stats, tags) in zip(removed, extras, strict=True))
        txn.add_files(adds)
        try:
            result = txn.commit()
        except CommitConflictError as exc:
            if type(exc) is not CommitConflictError:
                raise
            snap = load_snapshot(storage)
            continue
        return BatchOutcome(result.version, tuple(b.index for b, _ in pending), failed, metrics)
    for b, _ in pending:
        failed[b.index] = f"still conflicting after {MAX_REPLANS} re-checks against the table"
    return BatchOutcome(None, (), failed, {})


def _num_records(add: Mapping[str, Any]) -> int | None:
    stats = add.get("stats")
    if not stats:
        return None
    value = json.loads(stats).get("numRecords")
    return value if isinstance(value, int) else None
