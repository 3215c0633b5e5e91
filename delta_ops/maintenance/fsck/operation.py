"""`fsck`: is the table whole, and (asked and confirmed) repair what can be proven lost.

The checks, in order (each names its spec sections in its module):

1. the log (`delta_ops.log.check_log`): contiguous commits from the checkpoint readers start
   from, complete checkpoints with their sidecars, a sane `_last_checkpoint`, leftovers in
   `_delta_log` (writers' temporary files, incomplete checkpoints, orphan sidecars);
2. the latest `.crc` against the state of its version (`maintenance.checksum`'s
   comparison);
3. the live data files and deletion vectors of the latest version from one listing
   (`data_files.check_data`), Parquet footers with `verify_data`;
4. unreferenced data files: VACUUM's dry-run plan (`leftovers`).

Read-only unless `repair=True` and `confirm=True` (`repair`): then one `FSCK` commit removes
the live files that are missing or whose DV is missing or corrupt, after a second, direct
look at each. A listing error is raised, never taken for "missing".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from delta_ops.clock import Clock
from delta_ops.errors import CorruptLogError, InvalidChecksumError, StorageError
from delta_ops.maintenance.fsck.problems import (
    ERROR,
    WARNING,
    FsckResult,
    Problem,
    RepairEntry,
    RepairResult,
    sort_problems,
)
from delta_ops.protocol.filenames import LogFileKind
from delta_ops.storage import Storage

if TYPE_CHECKING:
    from delta_ops.engine.base import Engine


def _checksum_problems(
    storage: Storage, check: Any, snapshot: Any, engine: Engine
) -> list[Problem]:
    """The newest `.crc` compared with the state of its version."""
    from delta_ops.log import read_checksum
    from delta_ops.maintenance.checksum.compare import compare_with_state

    crcs = [(lf.version, info.path) for lf, info in check.listing.log
            if lf.kind == LogFileKind.CHECKSUM]
    if not crcs:
        return []
    version, path = max(crcs)
    try:
        recorded = read_checksum(storage, version)
    except InvalidChecksumError as exc:
        return [Problem("checksum_mismatch", ERROR, path, exc.reason, version)]
    if recorded is None:
        return []
    if snapshot.version == version and not snapshot.streamed:
        mismatches = [(m.field, m.recorded, m.computed)
                      for m in compare_with_state(recorded, snapshot, engine=engine)]
    else:  # another version, or a streamed state: the checksum's own reading of it
        from delta_ops.maintenance.checksum import verify_checksum

        mismatches = [(m.field, m.recorded, m.computed) for m in verify_checksum(
            storage, version=version, engine=engine).mismatches]
        if version < snapshot.version and [name for name, _, _ in mismatches] == ["version"]:
            # Below where the log now starts: another writer's log cleanup left it.
            return [Problem("stale_checksum", WARNING, path,
                            f"the .crc of version {version}, whose commits log cleanup "
                            f"removed, cannot be verified ({mismatches[0][2]}); no reader "
                            "needs it", version)]
    return [
        Problem("checksum_mismatch", ERROR, path,
                f"{name}: recorded {_short(was)}, the state has {_short(got)}", version)
        for name, was, got in mismatches
    ]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def fsck(
    table_or_storage: Any,
    *,
    repair: bool = False,
    confirm: bool = False,
    verify_data: bool = False,
    leftovers: bool = True,
    engine: Engine | None = None,
    storage_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> FsckResult:
    """Check a table (see the module docstring); with `repair` and `confirm`, remove the live
    files that are proven missing or whose deletion vector is.

    Args:
        table_or_storage: a DeltaTable, Storage or table URI.
        repair: plan the repair (a dry run unless `confirm`).
        confirm: with `repair`, commit it.
        verify_data: read every live data file's Parquet footer and compare its row count
            with the statistics' `numRecords`.
        leftovers: look for unreferenced data files (VACUUM's dry-run plan: a second
            listing of the data directories).
        engine: where listings and footer reads run (default: a local engine, closed
            afterwards).
        storage_options: used when `table_or_storage` is a URI.
        clock: milliseconds since the epoch (the repair's `deletionTimestamp`, VACUUM's
            retention).

    Returns:
        The problems found (errors and warnings) and the repair, when asked.

    Raises:
        NotATableError: no Delta log at the root.
        StorageError: a listing or a direct look failed (the check, and any repair, is
            refused: nothing is committed).
        ValueError: `confirm` without `repair`.
    """
    from delta_ops.engine.arrow_memory import returning_pool
    from delta_ops.engine.local import LocalEngine

    if confirm and not repair:
        raise ValueError("confirm applies to a repair: give repair=True (--repair) as well")
    storage = Storage.of(table_or_storage, storage_options)
    own = engine is None
    run_on: Engine = engine if engine is not None else LocalEngine()
    try:
        # A pool that hands freed batches back: without it the driver's memory grows
        # with the table although no batch does (`delta_ops.engine.arrow_memory`).
        with returning_pool():
            check, snapshot, problems, notes, data = _check(
                storage, run_on, verify_data=verify_data, leftovers=leftovers, clock=clock,
                refusing=repair and confirm,
            )
            repaired = None
            if repair:
                repaired = _repair(storage, snapshot, data, confirm=confirm,
                                   verify_data=verify_data, clock=clock)
    finally:
        if own:
            run_on.close()
    return FsckResult(
        table=storage.root,
        version=snapshot.version if snapshot is not None else (
            check.latest_version if check.latest_version >= 0 else None),
        problems=sort_problems(problems),
        num_files=data.num_files,
        num_deletion_vectors=data.num_deletion_vectors,
        num_outside_table=data.num_outside_table,
        verified_data=verify_data and snapshot is not None,
        notes=tuple(notes),
        repair=repaired,
    )


def _check(
    storage: Storage, run_on: Engine, *, verify_data: bool, leftovers: bool,
    clock: Clock | None, refusing: bool,
) -> tuple[Any, Any, list[Problem], list[str], Any]:
    """The checks; a storage error (a listing that failed) is re-raised, as a refusal when
    a repair was to follow."""
    try:
        return _checks(storage, run_on, verify_data=verify_data, leftovers=leftovers,
                       clock=clock)
    except StorageError as exc:
        if not refusing:
            raise
        raise StorageError(
            f"refusing to repair: {exc.reason}; a file that cannot be listed or read is not "
            "proven missing, so nothing was committed",
            table=exc.table or storage.root, version=exc.version, file=exc.file,
        ) from exc


def _checks(
    storage: Storage, run_on: Engine, *, verify_data: bool, leftovers: bool,
    clock: Clock | None,
) -> tuple[Any, Any, list[Problem], list[str], Any]:
    from delta_ops.log import ReadOptions, StateKind, check_log, choose_state, load_snapshot
    from delta_ops.maintenance.fsck.data_files import DataCheck, check_data
    from delta_ops.maintenance.fsck.leftovers import unreferenced_files

    options = ReadOptions.from_env()
    # A checkpoint too large to hold is read in full by the data check's stream instead.
    check = check_log(storage, verify_up_to_bytes=options.stream_threshold_bytes)
    problems = [Problem(f.code, f.severity, f.file, f.reason, f.version)
                for f in check.findings]
    notes: list[str] = []
    snapshot = None
    if check.segment is not None:
        try:
            # A large state is streamed: the data check holds keys and sizes only.
            kind = choose_state(storage, None, options, may_rebuild=False)
            snapshot = load_snapshot(storage, stream=kind == StateKind.STREAMED)
        except CorruptLogError as exc:
            problems.append(Problem(
                "log_unreadable", ERROR, exc.file or "(the log)", exc.reason, exc.version))
    data = DataCheck()
    if snapshot is None:
        notes.append("data files not checked: the latest version does not read")
    else:
        problems += _checksum_problems(storage, check, snapshot, run_on)
        problems += _row_id_problems(snapshot)
        try:
            data = check_data(storage, snapshot, run_on, verify_data=verify_data)
        except CorruptLogError as exc:  # a streamed checkpoint row group that does not read
            problems.append(Problem(
                "corrupt_checkpoint", ERROR, exc.file or "(the log)", exc.reason, exc.version))
            notes.append("data files not checked: the checkpoint does not read")
            return check, None, problems, notes, DataCheck()
        problems += data.problems
        if leftovers:
            found, note = unreferenced_files(storage, run_on, clock=clock,
                                             live_files=data.num_files)
            problems += found
            if note:
                notes.append(note)
    return check, snapshot, problems, notes, data


def _row_id_problems(snapshot: Any) -> list[Problem]:
    """Row IDs of the live files (spec "Row Tracking"): no two ranges overlap, none above
    the high-water mark, and, once row tracking is enabled, every file has them. Files
    without a row count in their statistics are not judged (no footer is read here); a
    streamed state is not checked."""
    from delta_ops.commit.row_ids import high_water_mark, row_id_findings

    config = snapshot.table_configuration
    if snapshot.streamed or not config.is_feature_supported("rowTracking"):
        return []
    enabled = config.is_row_tracking_enabled
    found = row_id_findings(snapshot.files, high_water_mark=high_water_mark(
        snapshot.domains, table=snapshot.table))
    return [
        Problem("row_ids", ERROR, path, why, snapshot.version)
        for path, kind, why in found
        if kind == "invalid" or (kind == "missing" and enabled)
    ]


def _repair(
    storage: Storage, snapshot: Any, data: Any, *, confirm: bool, verify_data: bool,
    clock: Clock | None,
) -> RepairResult:
    from delta_ops.maintenance.fsck.repair import commit_repair, rows_of, second_look

    if snapshot is None:
        raise CorruptLogError(
            "refusing to repair: the latest version does not read, so which files are live "
            "is unknown (fix the log first; see the problems fsck reports)",
            table=storage.root,
        )
    chosen, kept = [], []
    for key in sorted(data.damaged):
        f = data.damaged[key]
        why = second_look(storage, f, table=storage.root, version=snapshot.version) \
            if confirm else None
        if why is None:
            chosen.append(f)
        else:
            kept.append((key, why))
    entries = tuple(
        RepairEntry(
            path=f.row["path"], key=f.key, data_file_missing=f.missing,
            deletion_vector=f.dv_key, deletion_vector_missing=f.dv_missing,
            deletion_vector_corrupt=f.dv_corrupt, rows=rows_of(f.row),
        )
        for f in chosen
    )
    rows = [e.rows for e in entries]
    metrics = {
        "numMissingFiles": sum(e.data_file_missing for e in entries),
        "numMissingDeletionVectors": sum(
            e.deletion_vector_missing and not e.data_file_missing for e in entries),
        "numCorruptDeletionVectors": sum(
            e.deletion_vector_corrupt and not e.data_file_missing for e in entries),
        "numRemovedFiles": len(entries),
        "numRemovedBytes": sum(f.row["size"] or 0 for f in chosen),
        "numRowsLost": sum(r for r in rows if r is not None),
    }
    version = None
    if confirm and chosen:
        version = commit_repair(storage, snapshot, chosen, metrics,
                                verify_data=verify_data, clock=clock)
    return RepairResult(
        dry_run=not confirm, entries=entries, rows_lost=metrics["numRowsLost"],
        rows_lost_known=all(r is not None for r in rows), version=version,
        kept=tuple(kept), metrics=metrics,
    )


__all__ = ["fsck"]

