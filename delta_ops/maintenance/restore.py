"""RESTORE: bring a table back to an earlier version's state in one new commit.

Spec sections: "Add File and Remove File" (reconciliation key `(path, deletionVector
unique id)`; `dataChange`), "Deletion Vectors" (a DV travels with its add), "Row Tracking"
(an add that keeps its `baseRowId` and `defaultRowCommitVersion` keeps its rows' IDs;
writers raise the high-water mark over every ID in use), "Column Mapping", "Table
Features" (a protocol is only upgraded), "In-Commit Timestamps", "Commit Provenance
Information".

Follows delta-spark's `RestoreTableCommand`:

* The state of version N (the target) and the latest state are compared by path AND
  deletion vector. Files of N that are not live now are re-added (`dataChange=true`, with
  their DV, their stats and, under row tracking, their `baseRowId` and
  `defaultRowCommitVersion` from N, so every restored row has the ID it had at N); live
  files that N did not have are removed (`dataChange=true`, `deletionTimestamp` now,
  `extendedFileMetadata`, with their DV, stats and row-tracking fields). A file live in both
  with a different DV is removed with its current DV and re-added with N's.
* The metadata becomes N's (schema, partitioning, properties), as Spark's
  `txn.updateMetadata(snapshotToRestore.metadata)`. Three things keep their current value,
  because turning them back would break what later commits rely on: the in-commit
  timestamp enablement properties (timestamps must stay monotonic), row tracking's
  enablement and materialized column names (row IDs stay stable), and
  `delta.columnMapping.maxColumnId` (the larger of the two: a column ID is never handed
  out twice). Whether Spark keeps them too we did not establish; keeping them is the safe
  side. A column-mapping mode change is refused (`InvalidCommitError`): files written
  under one mode would be read under the other's column names.
* The protocol is never downgraded: N's protocol merged into the current one (Spark's
  `sourceProtocol.merge(targetProtocol)`); usually that is the current protocol. Like
  Spark, the commit always carries a `metaData` and a `protocol` action.
* Domain metadata is left as it is now (Spark's `handleDomainMetadataForRestoreTable`
  copies no domain back; it recreates the clustering domain, which delta_ops does not
  write). The row-tracking high-water mark only rises (`commit.Transaction`).
* Before anything is committed, every file to re-add and every deletion vector file it
  needs is looked up in storage (one `info` per file, side by side on the I/O pool); one
  missing (VACUUM, a lifecycle rule, a hand) refuses the restore naming the files
  (`RestoreFilesMissingError`). A file outside the table root cannot be looked up here and
  refuses too. Spark checks only the data files.
* Version N must be reconstructible: its commits, or a checkpoint at or before it with the
  commits after. When log cleanup removed them, the restore is refused
  (`VersionNotFoundError`, naming the version).
* `commitInfo.operation` is `RESTORE`, with Spark's parameters (`version` and
  `timestamp`, the one not given as null)
  and metrics (`tableSizeAfterRestore`, `numOfFilesAfterRestore`, `numRemovedFiles`,
  `numRestoredFiles`, `removedFilesSize`, `restoredFilesSize`).
* Concurrency: the commit is a `commit.Transaction` planned on the latest state that reads
  the whole table. A concurrent commit that adds or removes data, or changes the metadata
  or protocol, is a conflict: the restore is refused (`CommitConflictError`) and nothing is
  written; run it again to plan on the new state. A concurrent commit that changes no
  file and no metadata (a VACUUM START/END record, a txn) is rebased over and retried.
  Spark's `commitLarge` refuses any concurrent commit.
* Restoring the latest version changes nothing: the Result says so and nothing is
  written (Spark refuses it). A dry run (the library's default) plans and checks files,
  and commits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from delta_ops.clock import Clock, system_clock
from delta_ops.engine.threads import io_map
from delta_ops.errors import (
    InvalidCommitError,
    RestoreFilesMissingError,
    VersionNotFoundError,
)
from delta_ops.log import Snapshot, load_snapshot
from delta_ops.protocol.actions import canonical_path, dv_unique_id
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor
from delta_ops.protocol.path_identity import relative_key
from delta_ops.protocol.table_configuration import ICT_TIMESTAMP, ICT_VERSION
from delta_ops.protocol.upgrade import protocol_with_features
from delta_ops.storage import Storage, TableLike

__all__ = ["RestoreResult", "describe", "restore"]

#: Table properties a restore keeps at their current value (see the module docstring).
_KEPT_PROPERTIES = (
    "delta.enableInCommitTimestamps",
    ICT_VERSION,
    ICT_TIMESTAMP,
    "delta.enableRowTracking",
    "delta.rowTracking.materializedRowIdColumnName",
    "delta.rowTracking.materializedRowCommitVersionColumnName",
)
_MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
_MAPPING_MODE = "delta.columnMapping.mode"
#: The most missing files an error names.
SHOWN = 20


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did (or, as a dry run, would do).

    Attributes:
        table: the table root URI.
        read_version: the latest version the restore was planned on.
        restored_version: the version whose state is restored (N).
        version: the version the restore committed (None: a dry run, or nothing to do).
        dry_run: nothing was committed because it was asked.
        restored_files: paths re-added (with N's DV), sorted.
        removed_files: paths removed, sorted.
        metrics: Spark's RESTORE metrics (`tableSizeAfterRestore`, ...).
        operation_parameters: the commitInfo `operationParameters`.
        protocol_upgraded: a merged protocol action was written.
        messages: notes (why nothing was done).
    """

    table: str
    read_version: int
    restored_version: int
    version: int | None
    dry_run: bool
    restored_files: tuple[str, ...]
    removed_files: tuple[str, ...]
    metrics: Mapping[str, int]
    operation_parameters: Mapping[str, Any]
    protocol_upgraded: bool = False
    messages: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "restored_version": self.restored_version,
            "version": self.version,
            "dry_run": self.dry_run,
            "restored_files": list(self.restored_files),
            "removed_files": list(self.removed_files),
            "metrics": dict(self.metrics),
            "operation_parameters": dict(self.operation_parameters),
            "protocol_upgraded": self.protocol_upgraded,
            "messages": list(self.messages),
        }


def _clean(body: Mapping[str, Any]) -> dict[str, Any]:
    """An add from the state's Arrow row as the log writes it: maps as JSON objects, no
    null fields (the log omits absent optional fields)."""
    out = {k: v for k, v in body.items() if v is not None}
    for name in ("partitionValues", "tags"):
        if name in out and not isinstance(out[name], Mapping):
            out[name] = dict(out[name])
    out.setdefault("partitionValues", {})
    if "deletionVector" in out:
        out["deletionVector"] = {k: v for k, v in out["deletionVector"].items() if v is not None}
    return out


def _rows(snap: Snapshot) -> list[dict[str, Any]]:
    return [_clean(r) for r in snap.files.to_pylist()] if snap.num_files else []


def _key(body: Mapping[str, Any], root: str) -> tuple[str, str | None]:
    return canonical_path(body["path"], root), dv_unique_id(body.get("deletionVector"))


def _remove(add: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """Spark's `AddFile.removeWithTimestamp`: dataChange, extended metadata, the DV and
    row-tracking fields carried."""
    out: dict[str, Any] = {
        "path": add["path"],
        "deletionTimestamp": now_ms,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues") or {},
        "size": add.get("size"),
    }
    for name in ("stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
        if add.get(name) is not None:
            out[name] = add[name]
    return out


def _needed_files(adds: list[dict[str, Any]], root: str) -> list[tuple[str, str | None]]:
    """(path as written, storage key or None when outside the root) of every data file
    and DV file the re-added files need."""
    out: list[tuple[str, str | None]] = []
    for a in adds:
        out.append((a["path"], relative_key(a["path"], root)))
        dv = a.get("deletionVector")
        if dv:
            desc = DeletionVectorDescriptor.from_dict(dv)
            if desc.is_inline:
                continue
            rel = desc.relative_path()
            if rel is not None:
                out.append((rel, relative_key(rel, root)))
            else:
                absolute = desc.absolute_path(root) or desc.path_or_inline_dv
                out.append((absolute, relative_key(absolute, root)))
    return list(dict.fromkeys(out))


def _check_files(storage: Storage, adds: list[dict[str, Any]], version: int) -> None:
    """Refuse unless every file the re-added adds need exists (one `info` each)."""
    root = storage.root
    needed = _needed_files(adds, root)
    outside = [p for p, k in needed if k is None]
    inside = [(p, k) for p, k in needed if k is not None]
    infos = io_map(lambda item: storage.info(item[1]), inside)
    missing = [p for (p, _), info in zip(inside, infos, strict=True) if info is None]
    if outside or missing:
        shown = ", ".join((missing + outside)[:SHOWN])
        more = len(missing) + len(outside) - SHOWN
        detail = []
        if missing:
            detail.append(f"{len(missing)} file(s) it needs no longer exist (deleted by "
                          "VACUUM, a lifecycle rule or by hand)")
        if outside:
            detail.append(f"{len(outside)} file(s) it needs lie outside the table root and "
                          "cannot be checked here")
        raise RestoreFilesMissingError(
            f"cannot restore version {version}: " + "; ".join(detail) + f": {shown}"
            + (f" and {more} more" if more > 0 else "") + "; nothing was committed",
            table=root, version=version, file=(missing + outside)[0],
        )


def _metadata(target: Snapshot, latest: Snapshot) -> dict[str, Any]:
    """N's metadata with the properties a restore keeps (module docstring)."""
    old_mode = target.table_configuration.column_mapping_mode
    new_mode = latest.table_configuration.column_mapping_mode
    if old_mode != new_mode:
        raise InvalidCommitError(
            f"cannot restore version {target.version}: its column mapping mode is "
            f"{old_mode!r} and the table's is now {new_mode!r}; a restore does not change "
            "the column mapping mode",
            table=latest.storage.root, version=target.version,
        )
    md = dict(target.metadata.raw)
    conf = dict(md.get("configuration") or {})
    current = latest.metadata.configuration
    for name in _KEPT_PROPERTIES:
        if name in current:
            conf[name] = current[name]
        else:
            conf.pop(name, None)
    ids = [int(c[_MAX_COLUMN_ID]) for c in (conf, current)
           if str(c.get(_MAX_COLUMN_ID, "")).isdigit()]
    if ids:
        conf[_MAX_COLUMN_ID] = str(max(ids))
    md["configuration"] = conf
    return md


def _protocol(target: Snapshot, latest: Snapshot) -> dict[str, Any] | None:
    """N's protocol merged into the latest one (never a downgrade); None: nothing to add."""
    cfg = target.table_configuration
    names = set(cfg.reader_features) | set(cfg.writer_features)
    merged = protocol_with_features(latest.protocol, names)
    if merged is None:
        return None
    # A legacy reader version above the merged one (column mapping's 2) is kept; reader
    # version 3 comes with its feature list from `protocol_with_features` or not at all.
    if cfg.min_reader_version < 3 or "readerFeatures" in merged:
        merged["minReaderVersion"] = max(merged["minReaderVersion"], cfg.min_reader_version)
    return merged


def _resolve(storage: Storage, version: int | None,
             timestamp: datetime | int | None) -> tuple[Snapshot, dict[str, Any]]:
    if (version is None) == (timestamp is None):
        raise ValueError("restore needs a version or a timestamp (one of the two)")
    try:
        target = load_snapshot(storage, version, timestamp=timestamp)
    except VersionNotFoundError as exc:
        raise VersionNotFoundError(
            f"cannot restore {'version ' + str(version) if version is not None else 'that time'}"
            f": {exc.reason} (log cleanup may have removed its commits and no checkpoint "
            "reconstructs it)",
            table=storage.root, version=version, file=exc.file,
        ) from exc
    # Spark writes both keys, the one not given as null.
    if timestamp is None:
        params: dict[str, Any] = {"version": target.version, "timestamp": None}
    else:
        ts = timestamp if isinstance(timestamp, datetime) else datetime.fromtimestamp(
            timestamp / 1000).astimezone()
        params = {"version": None, "timestamp": ts.isoformat(sep=" ")}
    return target, params


def restore(
    table: TableLike,
    *,
    version: int | None = None,
    timestamp: datetime | int | None = None,
    dry_run: bool = True,
    clock: Clock | None = None,
    max_retries: int = 10,
    storage_options: Mapping[str, Any] | None = None,
) -> RestoreResult:
    """Restore the table to the state of `version` (or the version current at `timestamp`)
    in one commit, as delta-spark's RESTORE does (module docstring).

    Args:
        table: a DeltaTable, Storage or table URI.
        version: the version to restore.
        timestamp: or the time (a datetime, or ms since the epoch): the newest version at
            or before it is restored.
        dry_run: plan and check the files only (the default); False commits.
        clock: milliseconds since the epoch (the removes' `deletionTimestamp`, the commit).
        max_retries: rebased retries after a concurrent commit that changed nothing the
            restore depends on.
        storage_options: for a URI `table`.

    Raises:
        ValueError: neither or both of `version` and `timestamp`.
        VersionNotFoundError: the version (or time) is not in the log, or its log was
            removed by cleanup and no checkpoint reconstructs it.
        RestoreFilesMissingError: a data or DV file the version needs no longer exists
            (names them); nothing is committed.
        InvalidCommitError: the column mapping mode differs between the version and now.
        AppendOnlyError: the table is append-only (`delta.appendOnly`) and the restore
            would remove files.
        CommitConflictError: a concurrent commit changed data, metadata or protocol.
        UnsupportedFeatureError: the table has features delta_ops cannot write.
    """
    from delta_ops.commit import Transaction

    storage = Storage.of(table, storage_options)
    clock = clock or system_clock
    latest = load_snapshot(storage)
    target, params = _resolve(storage, version, timestamp)
    root = storage.root
    if target.version > latest.version:
        raise VersionNotFoundError(
            f"cannot restore version {target.version}: the latest version is {latest.version}",
            table=root, version=target.version,
        )
    latest.table_configuration.ensure_supported("commit")
    now = int(clock())
    target_rows, latest_rows = _rows(target), _rows(latest)
    target_keys = {_key(a, root) for a in target_rows}
    latest_keys = {_key(a, root) for a in latest_rows}
    adds = [{**a, "dataChange": True} for a in target_rows if _key(a, root) not in latest_keys]
    removes = [_remove(a, now) for a in latest_rows if _key(a, root) not in target_keys]
    metrics = {
        "numRestoredFiles": len(adds),
        "restoredFilesSize": sum(int(a.get("size") or 0) for a in adds),
        "numRemovedFiles": len(removes),
        "removedFilesSize": sum(int(r.get("size") or 0) for r in removes),
        "numOfFilesAfterRestore": len(target_rows),
        "tableSizeAfterRestore": sum(int(a.get("size") or 0) for a in target_rows),
    }
    common = {
        "table": root, "read_version": latest.version, "restored_version": target.version,
        "restored_files": tuple(sorted(a["path"] for a in adds)),
        "removed_files": tuple(sorted(r["path"] for r in removes)),
        "metrics": metrics, "operation_parameters": params,
    }
    if target.version == latest.version:
        return RestoreResult(
            **common, version=None, dry_run=dry_run,
            messages=(f"version {target.version} is the latest version: nothing to restore",),
        )
    _check_files(storage, adds, target.version)
    metadata = _metadata(target, latest)
    protocol = _protocol(target, latest)
    if dry_run:
        return RestoreResult(**common, version=None, dry_run=True,
                             protocol_upgraded=protocol is not None)
    txn = Transaction(
        storage, snapshot=latest, operation="RESTORE", operation_parameters=params,
        operation_metrics=metrics, reads_whole_table=True, clock=clock,
        max_retries=max_retries,
    )
    # Like Spark, the commit carries the metadata and the protocol (merged, or as it is).
    txn.set_protocol(protocol if protocol is not None else latest.protocol)
    txn.set_metadata(metadata)
    txn.remove_files(removes)
    txn.add_files(adds)
    committed = txn.commit()
    return RestoreResult(**common, version=committed.version, dry_run=False,
                         protocol_upgraded=protocol is not None)


def describe(result: RestoreResult) -> str:
    """The text `delta-ops restore` prints."""
    m = result.metrics
    if result.version is not None:
        head = f"restored version {result.restored_version} as version {result.version}"
    elif result.messages:
        head = result.messages[0]
    else:
        head = f"dry run: would restore version {result.restored_version} (nothing committed)"
    lines = [
        f"table       {result.table}",
        f"read        version {result.read_version}",
        head,
        f"restored    {m['numRestoredFiles']} file(s), {m['restoredFilesSize']} bytes",
        f"removed     {m['numRemovedFiles']} file(s), {m['removedFilesSize']} bytes",
        f"after       {m['numOfFilesAfterRestore']} file(s), {m['tableSizeAfterRestore']} bytes",
    ]
    if result.protocol_upgraded:
        lines.append("protocol    the version's features were merged into the protocol")
    return "\n".join(lines)
