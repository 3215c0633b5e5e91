"""Find a valid checkpoint of a given kind that already exists at a version.

Spec sections: "Checkpoints" (naming schemes; "readers must ignore multi-part checkpoints
with missing parts"; a V2 checkpoint whose sidecars are missing is unusable), "Sidecar
File Information", "Last Checkpoint File".

A checkpoint counts as existing when every file it needs is present and readable (Parquet
footers parse, JSON lines parse, every referenced sidecar is there); its action counts are
read from the files so that `_last_checkpoint` can be advanced to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from delta_ops.errors import StorageError
from delta_ops.maintenance.checkpoint.plan import CheckpointKind
from delta_ops.protocol import filenames
from delta_ops.protocol.actions import canonical_path
from delta_ops.protocol.checkpoint_schema import spark_schema_json
from delta_ops.protocol.filenames import LOG_DIR, SIDECAR_DIR, LogFile, LogFileKind
from delta_ops.storage import FileInfo, Storage


@dataclass(frozen=True)
class ExistingCheckpoint:
    """A complete, readable checkpoint found in the log.

    Attributes:
        kind: its kind.
        names: its files relative to `_delta_log` (sidecars as `_sidecars/<name>`).
        num_actions: actions in all its files.
        num_add_files: add actions in all its files.
        size_in_bytes: total size of its files.
        parts: number of parts (multi-part only).
        checkpoint_schema: Spark schema JSON of its (top-level) Parquet file, if Parquet.
        v2_checkpoint: the `_last_checkpoint.v2Checkpoint` object for V2 checkpoints.
    """

    kind: CheckpointKind
    names: tuple[str, ...]
    num_actions: int
    num_add_files: int
    size_in_bytes: int
    parts: int | None = None
    checkpoint_schema: dict | None = None
    v2_checkpoint: dict | None = None


@dataclass
class _Inspected:
    rows: int
    adds: int
    is_v2: bool
    sidecars: list[dict[str, Any]]
    schema: dict | None


class _Invalid(Exception):
    """Internal: the candidate checkpoint is not complete or not readable."""


def _count_adds(pf: pq.ParquetFile) -> int:
    if "add" not in pf.schema_arrow.names:
        return 0
    t = pf.read(columns=["add.path"], use_threads=True)
    if "add" in t.column_names:
        return int(pc.sum(pc.is_valid(t.column("add"))).as_py() or 0)
    return int(pc.sum(pc.is_valid(t.column("add.path"))).as_py() or 0)


def _inspect_parquet(storage: Storage, path: str) -> _Inspected:
    try:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            names = pf.schema_arrow.names
            meta_cols = [c for c in ("checkpointMetadata", "sidecar") if c in names]
            is_v2, sidecars = False, []
            if meta_cols:
                t = pf.read(columns=meta_cols)
                if "checkpointMetadata" in t.column_names:
                    is_v2 = t.column("checkpointMetadata").null_count < t.num_rows
                if "sidecar" in t.column_names:
                    col = t.column("sidecar")
                    sidecars = [
                        s for s in col.filter(pc.is_valid(col)).to_pylist(maps_as_pydicts="strict")
                    ]
            return _Inspected(
                rows=pf.metadata.num_rows,
                adds=_count_adds(pf),
                is_v2=is_v2,
                sidecars=sidecars,
                schema=_schema_json(pf.schema_arrow),
            )
    except (StorageError, OSError, pa.ArrowException) as exc:
        raise _Invalid(str(exc)) from exc


def _schema_json(schema: pa.Schema) -> dict | None:
    try:
        return spark_schema_json(schema)
    except TypeError:
        return None


def _inspect_json(storage: Storage, path: str) -> _Inspected:
    try:
        data = storage.read(path)
        rows = adds = 0
        is_v2, sidecars = False, []
        for line in data.splitlines():
            if not line.strip():
                continue
            obj = orjson.loads(line)
            rows += 1
            if obj.get("add") is not None:
                adds += 1
            elif obj.get("checkpointMetadata") is not None:
                is_v2 = True
            elif obj.get("sidecar") is not None:
                sidecars.append(obj["sidecar"])
        return _Inspected(rows, adds, is_v2, sidecars, None)
    except (StorageError, orjson.JSONDecodeError, AttributeError) as exc:
        raise _Invalid(str(exc)) from exc


def _sidecar_rel(name: str, root: str) -> str:
    if "/" not in name:
        return filenames.sidecar_path(name)
    rel = canonical_path(name, root)
    if not rel.startswith(f"{LOG_DIR}/{SIDECAR_DIR}/"):
        raise _Invalid(f"sidecar {name!r} is not inside {LOG_DIR}/{SIDECAR_DIR}")
    return rel


def _v2(
    storage: Storage, lf: LogFile, info: FileInfo, inspected: _Inspected
) -> tuple[list[str], int, int, int, dict]:
    names = [lf.name]
    rows, adds, size = inspected.rows, inspected.adds, info.size
    files = []
    for sc in inspected.sidecars:
        rel = _sidecar_rel(str(sc.get("path")), storage.root)
        found = storage.info(rel)
        if found is None:
            raise _Invalid(f"sidecar {rel} is missing")
        side = _inspect_parquet(storage, rel)
        names.append(rel[len(LOG_DIR) + 1 :])
        rows += side.rows
        adds += side.adds
        size += found.size
        files.append(
            {
                "path": sc.get("path"),
                "sizeInBytes": found.size,
                "modificationTime": sc.get("modificationTime", found.modification_time),
            }
        )
    v2 = {"path": lf.name, "sizeInBytes": info.size, "modificationTime": info.modification_time}
    if files:
        v2["sidecarFiles"] = files
    return names, rows, adds, size, v2


def find_existing(
    storage: Storage, version: int, kind: CheckpointKind, *, parts: int | None = None
) -> ExistingCheckpoint | None:
    """A valid checkpoint of `kind` at `version`, or None.

    Args:
        storage: the table's storage.
        version: the checkpoint version.
        kind: the kind asked for (classic means a V1 classic file, v2-classic a V2 one).
        parts: for multi-part, the number of parts asked for (None: any).
    """
    listing: list[tuple[LogFile, FileInfo]] = []
    for info in storage.list_dir(LOG_DIR, start=filenames.version_prefix(version)):
        lf = filenames.parse(info.path.rsplit("/", 1)[-1])
        if lf is not None and lf.version == version and lf.is_checkpoint:
            listing.append((lf, info))
        elif lf is not None and lf.version > version:
            break
    if kind is CheckpointKind.MULTI_PART:
        return _find_multipart(storage, listing, parts)
    for lf, info in listing:
        try:
            if kind in (CheckpointKind.CLASSIC, CheckpointKind.V2_CLASSIC):
                if lf.kind != LogFileKind.CHECKPOINT_CLASSIC:
                    continue
                inspected = _inspect_parquet(storage, info.path)
                if inspected.is_v2 != kind.is_v2:
                    continue
            else:
                if lf.kind != LogFileKind.CHECKPOINT_UUID:
                    continue
                if lf.format == "json":
                    inspected = _inspect_json(storage, info.path)
                else:
                    inspected = _inspect_parquet(storage, info.path)
                if not inspected.is_v2:
                    continue
            if not kind.is_v2:
                return ExistingCheckpoint(
                    kind,
                    (lf.name,),
                    inspected.rows,
                    inspected.adds,
                    info.size,
                    checkpoint_schema=inspected.schema,
                )
            names, rows, adds, size, v2 = _v2(storage, lf, info, inspected)
            return ExistingCheckpoint(
                kind,
                tuple(names),
                rows,
                adds,
                size,
                checkpoint_schema=inspected.schema,
                v2_checkpoint=v2,
            )
        except _Invalid:
            continue
    return None


def _find_multipart(
    storage: Storage, listing: list[tuple[LogFile, FileInfo]], parts: int | None
) -> ExistingCheckpoint | None:
    groups: dict[int, dict[int, tuple[LogFile, FileInfo]]] = {}
    for lf, info in listing:
        if lf.kind == LogFileKind.CHECKPOINT_MULTIPART and lf.num_parts and lf.part:
            groups.setdefault(lf.num_parts, {})[lf.part] = (lf, info)
    for num_parts in sorted(groups, reverse=True):
        if parts is not None and num_parts != parts:
            continue
        found = groups[num_parts]
        if num_parts < 2 or len(found) != num_parts:
            continue
        rows = adds = size = 0
        schema = None
        try:
            for part in range(1, num_parts + 1):
                lf, info = found[part]
                inspected = _inspect_parquet(storage, info.path)
                rows += inspected.rows
                adds += inspected.adds
                size += info.size
                schema = schema or inspected.schema
        except _Invalid:
            continue
        names = tuple(found[p][0].name for p in range(1, num_parts + 1))
        return ExistingCheckpoint(
            CheckpointKind.MULTI_PART,
            names,
            rows,
            adds,
            size,
            parts=num_parts,
            checkpoint_schema=schema,
        )
    return None
