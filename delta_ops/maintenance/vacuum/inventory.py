"""VACUUM from an inventory: the table's files from a report instead of a listing.

Spec sections: "VACUUM Protocol Check" and "Add File and Remove File" (what is kept is
decided by the log exactly as for a listing: an inventory only says which files exist);
"Delta Table Specification" (hidden directories, applied by `listing._select` as for a
listing).

Two sources are read (`read_inventory`):

* an S3 Inventory report, through its `manifest.json`: `sourceBucket`,
  `destinationBucket`, `fileFormat` (CSV or Parquet), `fileSchema` (the CSV column names,
  `Bucket, Key, Size, LastModifiedDate, ...`, or the Parquet message schema with
  `bucket`, `key`, `size`, `last_modified_date`), `files[].key` (the data files, in the
  destination bucket) and `creationTimestamp` (ms since the epoch: when the report began
  scanning the bucket). CSV files are gzip-compressed, without a header, and their keys
  URL-encoded (decoded here, `+` as a space); Parquet keys are as stored. With the
  optional `IsLatest` and `IsDeleteMarker` fields only the current version of each object
  counts, and delete markers do not.
* a listing in delta-spark's `VACUUM ... USING INVENTORY` schema (`path` string, fully
  qualified, `length` long, `isDir` boolean, `modificationTime` long, ms), as one Parquet
  file, a directory of Parquet files, or a Delta table (its live files).

Which time the inventory stands for (`Inventory.created_ms`): the manifest's
`creationTimestamp`; for a Parquet or Delta listing the `inventory_time_ms` given
(`--inventory-time`), else the newest modification time of the files it was read from
(they were written after the listing was taken). Refused with the reason
(`InventoryError`), before anything is deleted:

* fields missing (the report's `Bucket`/`Key`/`Size`/`LastModifiedDate`, or delta-spark's
  four columns with their types), or a manifest that cannot be read;
* an inventory older than the retention window (`created_ms` before `delete_before`: files
  it does not know of may since have become deletable and be reported as never seen), or
  dated after now;
* paths outside the table root: a report of another bucket (or a row of one), a listing
  path that is not below the root, any path with empty or dot segments, or an inventory
  that names no file below the root at all. A bucket-wide report's rows of the same bucket
  outside the table's prefix are skipped (a report covers a bucket), and counted.

What the inventory is trusted for: only which files existed when it was made. Files it
does not name are never candidates (a file written since is not in it); a row whose
modification time is after `created_ms` is dropped (counted). What is referenced comes from
the log, never from the inventory. Each unreferenced old file is then checked again in
storage (`Storage.info`, phase `probe` of the progress): one that no longer exists is left
out, one modified since the retention cut-off (rewritten) is left out, and the sizes are
the current ones; so a plan only holds files that exist, and the proof
(`proof._prove_deletable`) then checks each as for a listing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.base import LISTING_SCHEMA, NESTED_LOG_MARK
from delta_ops.engine.progress import INVENTORY, NO_PROGRESS, PROBE, Progress
from delta_ops.engine.threads import io_map
from delta_ops.errors import DeltaOpsError, InventoryError
from delta_ops.log import FileReferences, SpilledReferences, has_log
from delta_ops.maintenance.vacuum.inventory_s3 import BAD_RELATIVE, _split, read_report
from delta_ops.maintenance.vacuum.listing import is_hidden
from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.filenames import LOG_DIR
from delta_ops.storage import FileInfo, Storage

__all__ = ["Inventory", "InventorySource", "inventory_candidates", "read_inventory"]

#: delta-spark's `VacuumCommand.INVENTORY_SCHEMA`.
DELTA_INVENTORY_FIELDS: dict[str, pa.DataType] = {
    "path": pa.string(),
    "length": pa.int64(),
    "isDir": pa.bool_(),
    "modificationTime": pa.int64(),
}


@dataclass(frozen=True)
class InventorySource:
    """Where an inventory is and how to read it.

    Attributes:
        path: A `manifest.json` of an S3 Inventory report, a Parquet file, a directory of
            Parquet files, or a Delta table (URI or local path).
        storage_options: Options of the store the inventory lies in (default: the
            table's).
        inventory_time_ms: The time a Parquet or Delta listing was taken (ms since the
            epoch); default: the newest modification time of its files. Ignored for an S3
            report (its `creationTimestamp` says).
    """

    path: str
    storage_options: dict[str, Any] | None = None
    inventory_time_ms: int | None = None


@dataclass(frozen=True)
class Inventory:
    """An inventory read and checked against one table root.

    Attributes:
        source: Where it was read from.
        kind: `s3-report` or `listing` (delta-spark's schema).
        created_ms: The time it stands for (see the module).
        files: The files below the root, as `LISTING_SCHEMA` (paths relative to the
            root, one row per path: its newest), directories left out.
        skipped_outside: Rows of the same bucket outside the table's prefix (reports).
        skipped_newer: Rows modified after `created_ms` (never candidates).
    """

    source: str
    kind: str
    created_ms: int
    files: pa.Table
    skipped_outside: int = 0
    skipped_newer: int = 0

    def check_fresh(self, *, table: str, now_ms: int, delete_before: int) -> None:
        """Refuse an inventory older than the retention window or dated after now.

        Raises:
            InventoryError: Naming the inventory and both times.
        """
        if self.created_ms > now_ms:
            raise InventoryError(
                f"refusing to VACUUM from inventory {self.source}: it is dated "
                f"{_iso(self.created_ms)}, after now ({_iso(now_ms)}); check the clock or "
                "--inventory-time",
                table=table, file=self.source,
            )
        if self.created_ms < delete_before:
            raise InventoryError(
                f"refusing to VACUUM from inventory {self.source}: it was made at "
                f"{_iso(self.created_ms)}, older than the retention window (files modified "
                f"before {_iso(delete_before)} are deleted); files it does not know of would "
                "be left, and it cannot stand for the table now: use a newer inventory",
                table=table, file=self.source,
            )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------
# Paths: from what an inventory names to a path relative to the table root
# --------------------------------------------------------------------------------------


def _root_prefixes(root: str) -> tuple[str, ...]:
    """Every spelling of `<root>/` a fully qualified path below the root starts with."""
    base = root.rstrip("/")
    if base.startswith("file://"):
        local = base[len("file://"):]
        if local.startswith("localhost/"):
            local = local[len("localhost"):]
        return (f"file://{local}/", f"file:{local}/", f"file://localhost{local}/", f"{local}/")
    if base.startswith(("s3://", "s3a://", "s3n://")):
        rest = base.split("://", 1)[1]
        return tuple(f"{s}://{rest}/" for s in ("s3", "s3a", "s3n"))
    return (f"{base}/",)


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def read_inventory(
    source: InventorySource,
    *,
    table: str,
    storage_options: dict[str, Any] | None,
    progress: Progress = NO_PROGRESS,
) -> Inventory:
    """Read an inventory and keep the files below `table` (see the module).

    Args:
        source: Where it is.
        table: The table root URI (`Storage.root`).
        storage_options: The table's storage options (used unless the source has its own).
        progress: Hears of each data file read (phase `inventory`).

    Raises:
        InventoryError: It cannot be read, lacks fields, or names paths outside the root.
    """
    options = source.storage_options if source.storage_options is not None else storage_options
    try:
        if source.path.rstrip("/").endswith(".json"):
            got = read_report(source.path, table, options, progress)
            return _finish(source.path, "s3-report", got.created_ms, got.paths, got.sizes,
                           got.mtimes, got.outside, table)
        return _read_listing(source, table, options, progress)
    except InventoryError:
        raise
    except (DeltaOpsError, OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        raise InventoryError(
            f"cannot read inventory {source.path}: {exc}", table=table, file=source.path
        ) from exc


def _listing_files(store: Storage) -> list[FileInfo]:
    """The Parquet files of a directory inventory (or of a Delta table's live files)."""
    if has_log(store):
        from delta_ops.log import load_snapshot
        from delta_ops.protocol.path_identity import relative_key

        snap = load_snapshot(store)
        out = []
        for p in snap.files.column("path").to_pylist():
            rel = relative_key(p, store.root)
            info = store.info(rel) if rel is not None else None
            if info is None:
                raise InventoryError(
                    f"Delta inventory {store.root} names data file {p!r}, which is missing",
                    table=store.root, version=snap.version, file=p,
                )
            out.append(info)
        return out
    return sorted(
        (i for i in store.walk("") if i.path.endswith(".parquet")
         and not any(part.startswith(("_", ".")) for part in i.path.split("/"))),
        key=lambda i: i.path,
    )


def _read_listing(
    source: InventorySource, table: str, options: dict[str, Any] | None, progress: Progress
) -> Inventory:
    import pyarrow.parquet as pq

    path = source.path.rstrip("/")
    store = Storage.for_uri(path, options)
    parent, name = _split(path)
    single = name.endswith(".parquet") and Storage.for_uri(parent, options).exists(name)
    if single:
        store = Storage.for_uri(parent, options)
        found = [store.info(name)]
        infos = [i for i in found if i is not None]
    else:
        infos = _listing_files(store)
    if not infos:
        raise InventoryError(
            f"inventory {source.path} holds no Parquet file", table=table, file=source.path
        )
    prefixes = _root_prefixes(table)
    parts: list[pa.Table] = []
    progress.begin(INVENTORY, total_files=None)
    for info in infos:
        with store.open_input(info.path) as fh:
            parquet = pq.ParquetFile(fh)
            _check_listing_schema(parquet.schema_arrow, source.path, info.path, table)
            data = parquet.read(columns=list(DELTA_INVENTORY_FIELDS))
        data = data.filter(pc.invert(pc.fill_null(data.column("isDir"), False)))
        parts.append(_relative_rows(data, prefixes, source.path, table))
        progress.advance(INVENTORY, pages=1, files=data.num_rows)
    progress.end(INVENTORY)
    created = source.inventory_time_ms
    if created is None:
        created = max(i.modification_time for i in infos)
    rows = pa.concat_tables(parts)
    return _finish(source.path, "listing", int(created), rows.column(0), rows.column(1),
                   rows.column(2), 0, table)


def _relative_rows(
    data: pa.Table, prefixes: tuple[str, ...], where: str, table: str
) -> pa.Table:
    """`path` made relative to the root (one of its fully qualified spellings), with
    `length` and `modificationTime`.

    Raises:
        InventoryError: A path not below the root, not a plain relative path once made
            relative, or a row without a modification time.
    """
    paths = data.column("path").cast(pa.string())
    rel = pa.nulls(len(paths), pa.string())
    for prefix in prefixes:
        hit = pc.and_(pc.fill_null(pc.starts_with(paths, prefix), False), pc.is_null(rel))
        rel = pc.if_else(hit, pc.utf8_slice_codeunits(paths, len(prefix)), rel)
    bad = pc.or_(
        pc.fill_null(pc.match_substring_regex(rel, BAD_RELATIVE), True),
        pc.is_null(data.column("modificationTime")),
    )
    if pc.any(bad).as_py():
        first = paths.filter(bad)[0].as_py()
        raise InventoryError(
            f"inventory {where} names {first!r}, which is not a file below the table root "
            f"{table} (an inventory in delta-spark's schema lists one table, with fully "
            "qualified paths)",
            table=table, file=where,
        )
    return pa.table({
        "path": rel,
        "size": pc.fill_null(data.column("length").cast(pa.int64()), 0),
        "mtime": data.column("modificationTime").cast(pa.int64()),
    })


def _check_listing_schema(schema: pa.Schema, where: str, file: str, table: str) -> None:
    problems = []
    for name, typ in DELTA_INVENTORY_FIELDS.items():
        idx = schema.get_field_index(name)
        if idx < 0:
            problems.append(f"{name} ({typ}) is missing")
            continue
        got = schema.field(idx).type
        ok = got == typ or (typ == pa.string() and got == pa.large_string()) or (
            pa.types.is_integer(typ) and pa.types.is_integer(got)
        )
        if not ok:
            problems.append(f"{name} is {got}, not {typ}")
    if problems:
        raise InventoryError(
            f"inventory {where} does not have delta-spark's inventory schema (path string, "
            f"length long, isDir boolean, modificationTime long): {'; '.join(problems)}",
            table=table, file=file,
        )


def _finish(
    source: str,
    kind: str,
    created: int,
    paths: pa.ChunkedArray | pa.Array,
    sizes: pa.ChunkedArray | pa.Array,
    mtimes: pa.ChunkedArray | pa.Array,
    outside: int,
    table: str,
) -> Inventory:
    if not len(paths):
        raise InventoryError(
            f"inventory {source} names no file below the table root {table}: it is not an "
            "inventory of this table",
            table=table, file=source,
        )
    rows = pa.table([paths, sizes, mtimes], schema=LISTING_SCHEMA)
    newer = pc.greater(rows.column("modification_time"), pa.scalar(created, pa.int64()))
    skipped_newer = int(pc.sum(newer).as_py() or 0)
    if skipped_newer:
        rows = rows.filter(pc.invert(newer))
    # One row per path: its newest (as delta-spark keeps the newest of duplicates).
    rows = rows.sort_by([("path", "ascending"), ("modification_time", "descending")])
    if rows.num_rows:
        path_col = rows.column("path").combine_chunks()
        first = pc.not_equal(path_col.slice(1), path_col.slice(0, len(path_col) - 1))
        keep = pa.concat_arrays([pa.array([True]), first.cast(pa.bool_())])
        rows = rows.filter(keep)
    return Inventory(
        source=source, kind=kind, created_ms=created, files=rows,
        skipped_outside=outside, skipped_newer=skipped_newer,
    )


# --------------------------------------------------------------------------------------
# The candidates: what a listing's anti-join would give
# --------------------------------------------------------------------------------------


def find_unreferenced_in_inventory(
    storage: Storage,
    inventory: Inventory,
    refs: FileReferences | SpilledReferences,
    delete_before: int,
    *,
    progress: Progress = NO_PROGRESS,
    info: Callable[[str], FileInfo | None] | None = None,
) -> tuple[pa.Table, list[str]]:
    """The inventory's files not referenced and older than `delete_before`, each checked
    again in storage (as `Engine.find_unreferenced` gives a listing's); and notes.

    Returns:
        (LISTING_SCHEMA sorted by path, notes for the result's messages).
    """
    rows = inventory.files
    # Files of a nested table's log, whatever their age, as the engines return them
    # (`NESTED_LOG_MARK`): the plan learns of nested tables from them; never deleted.
    nested_log = rows.filter(pc.match_substring(rows.column("path"), NESTED_LOG_MARK))
    log_dir = pc.starts_with(rows.column("path"), f"{LOG_DIR}/")
    old = pc.less(rows.column("modification_time"), pa.scalar(delete_before, pa.int64()))
    rows = rows.filter(pc.and_(old, pc.invert(log_dir)))
    paths = rows.column("path").combine_chunks() if rows.num_rows else string_array([])
    if rows.num_rows:
        named = pc.is_in(paths, value_set=string_array([]))
        for keep in refs.keep_chunks():
            if len(keep):
                named = pc.or_(named, pc.is_in(paths, value_set=keep.cast(pa.string())))
        rows = rows.filter(pc.invert(named))
    candidates = rows.column("path").to_pylist()
    stat = info or storage.info
    progress.begin(PROBE, total_files=len(candidates))
    found: list[FileInfo | None] = []
    if candidates:
        def one(path: str) -> FileInfo | None:
            got = stat(path)
            progress.advance(PROBE, files=1, bytes=0 if got is None else max(got.size, 0))
            return got

        found = io_map(one, candidates)
    progress.end(PROBE)
    gone = [p for p, f in zip(candidates, found, strict=True) if f is None]
    changed = [
        p for p, f in zip(candidates, found, strict=True)
        if f is not None and (f.modification_time >= delete_before
                              or f.modification_time > inventory.created_ms)
    ]
    kept = [
        f for f in found
        if f is not None and f.modification_time < delete_before
        and f.modification_time <= inventory.created_ms
    ]
    notes = [
        f"inventory {inventory.source} ({inventory.kind}, made {_iso(inventory.created_ms)}): "
        f"{inventory.files.num_rows} file(s) below the table root; files not in it are "
        "never deleted (a full listing finds those)"
    ]
    if inventory.skipped_outside:
        notes.append(
            f"inventory: {inventory.skipped_outside} row(s) of the bucket outside the table "
            "root were skipped"
        )
    if inventory.skipped_newer:
        notes.append(
            f"inventory: {inventory.skipped_newer} row(s) modified after the inventory was "
            "made were never candidates"
        )
    if gone:
        notes.append(
            f"inventory: {len(gone)} unreferenced file(s) it names no longer exist "
            f"(first: {sorted(gone)[0]}); nothing to delete there"
        )
    if changed:
        notes.append(
            f"inventory: {len(changed)} file(s) were modified since (newer than the "
            f"retention cut-off or the inventory; first: {sorted(changed)[0]}): kept"
        )
    table = pa.table(
        {
            "path": string_array([f.path for f in kept]),
            "size": pa.array([f.size for f in kept], pa.int64()),
            "modification_time": pa.array([f.modification_time for f in kept], pa.int64()),
        },
        schema=LISTING_SCHEMA,
    )
    if nested_log.num_rows:
        table = pa.concat_tables([table, nested_log.select(LISTING_SCHEMA.names).cast(
            LISTING_SCHEMA)])
    return table.sort_by("path"), notes


def inventory_top_dirs(inventory: Inventory, hidden: Callable[[str], bool]) -> list[str]:
    """`listing._listing_dirs`'s answer from the inventory: the root and its top-level
    directories that are not hidden (and not the log)."""
    heads = pc.unique(
        pc.replace_substring_regex(
            inventory.files.column("path").combine_chunks().filter(
                pc.match_substring(inventory.files.column("path").combine_chunks(), "/")
            ),
            r"/.*$", "",
        )
    ).to_pylist()
    return ["", *sorted(d for d in heads if d != LOG_DIR and not hidden(d))]


def inventory_candidates(
    storage: Storage,
    source: InventorySource,
    refs: FileReferences | SpilledReferences,
    prefixes: tuple[str, ...],
    *,
    now_ms: int,
    delete_before: int,
    progress: Progress | None,
) -> tuple[pa.Table, list[str], list[str]]:
    """(candidates as a listing's anti-join gives them, top directories, notes) from an
    inventory: read, checked fresh, anti-joined, each candidate re-checked (what
    `plan._plan` uses instead of `Engine.find_unreferenced` and `listing._listing_dirs`).

    Raises:
        InventoryError: See the module.
    """
    inv = read_inventory(
        source, table=storage.root, storage_options=storage.storage_options,
        progress=progress or NO_PROGRESS,
    )
    inv.check_fresh(table=storage.root, now_ms=now_ms, delete_before=delete_before)
    found, notes = find_unreferenced_in_inventory(
        storage, inv, refs, delete_before, progress=progress or NO_PROGRESS
    )
    return found, inventory_top_dirs(inv, lambda d: is_hidden(d, prefixes)), notes
