"""Reading an S3 Inventory report for VACUUM (`inventory.py` says what is done with it).

No protocol section: the report's format (AWS S3 Inventory): `manifest.json` with
`sourceBucket`, `destinationBucket`, `fileFormat`, `fileSchema`, `files[].key` and
`creationTimestamp`; CSV data files gzip-compressed, without a header, keys URL-encoded;
Parquet data files with the snake_case columns (`bucket`, `key`, `size`,
`last_modified_date`, `is_latest`, `is_delete_marker`).
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote_plus

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.engine.progress import INVENTORY, Progress
from delta_ops.errors import InventoryError
from delta_ops.storage import Storage

#: The S3 Inventory fields VACUUM needs, by their normalized names (lower case, no `_`).
_REPORT_NEEDS = ("bucket", "key", "size", "lastmodifieddate")


@dataclass(frozen=True)
class ReportRows:
    """The rows of a report below the table root.

    Attributes:
        created_ms: The manifest's `creationTimestamp`.
        paths: Paths relative to the root.
        sizes: Their sizes.
        mtimes: Their modification times (ms).
        outside: Rows of the bucket outside the table's prefix (skipped).
    """

    created_ms: int
    paths: list[str]
    sizes: list[int]
    mtimes: list[int]
    outside: int


def _clean_relative(rel: str) -> str | None:
    """`rel` when it is a plain relative path (no empty or dot segments), else None."""
    if not rel or rel.startswith("/") or rel.endswith("/"):
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return rel

def _bucket_and_prefix(root: str) -> tuple[str, str] | None:
    """(bucket, key prefix with a trailing `/`) of an S3 root, None for other schemes."""
    for scheme in ("s3://", "s3a://", "s3n://"):
        if root.startswith(scheme):
            rest = root[len(scheme):].rstrip("/")
            bucket, _, prefix = rest.partition("/")
            return bucket, (f"{prefix}/" if prefix else "")
    return None

def _split(uri: str) -> tuple[str, str]:
    """(directory URI, file name) of a URI or local path."""
    stripped = uri.rstrip("/")
    head, _, name = stripped.rpartition("/")
    if not head:
        head = "."
    return head, name

def _norm(name: str) -> str:
    return name.replace("_", "").replace(" ", "").lower()

def _report_fields(manifest: dict[str, Any], kind: str) -> list[str]:
    schema = manifest.get("fileSchema")
    if not isinstance(schema, str) or not schema.strip():
        return []
    if kind == "csv":
        return [f.strip() for f in schema.split(",")]
    # Parquet: `message s3.inventory { required binary bucket (STRING); ... }`
    body = schema[schema.find("{") + 1 : schema.rfind("}")] if "{" in schema else schema
    names = []
    for decl in body.split(";"):
        words = decl.replace("(", " ").split()
        if len(words) >= 3:
            names.append(words[2])
    return names


def read_report(
    path: str, table: str, options: dict[str, Any] | None, progress: Progress
) -> ReportRows:
    """Read a report from its `manifest.json` at `path`, keeping the rows below `table`.

    Raises:
        InventoryError: Lacking fields, of another bucket, or naming paths that are not
            plain paths below the root.
    """
    head, name = _split(path)
    manifest_store = Storage.for_uri(head, options)
    try:
        manifest = orjson.loads(manifest_store.read(name))
    except orjson.JSONDecodeError as exc:
        raise InventoryError(
            f"inventory manifest {path} is not JSON: {exc}", table=table,
            file=path,
        ) from exc
    if not isinstance(manifest, dict):
        raise InventoryError(
            f"inventory manifest {path} is not a JSON object", table=table,
            file=path,
        )
    missing = [k for k in ("sourceBucket", "fileFormat", "fileSchema", "files",
                           "creationTimestamp") if k not in manifest]
    if missing:
        raise InventoryError(
            f"inventory manifest {path} lacks {', '.join(missing)}: not an S3 "
            "Inventory manifest.json",
            table=table, file=path,
        )
    kind = str(manifest["fileFormat"]).lower()
    if kind not in ("csv", "parquet"):
        raise InventoryError(
            f"inventory {path} is in {manifest['fileFormat']} format; CSV and "
            "Parquet reports are read",
            table=table, file=path,
        )
    names = _report_fields(manifest, kind)
    normalized = [_norm(n) for n in names]
    lacking = [n for n in _REPORT_NEEDS if n not in normalized]
    if lacking:
        wanted = {"bucket": "Bucket", "key": "Key", "size": "Size",
                  "lastmodifieddate": "LastModifiedDate"}
        raise InventoryError(
            f"inventory {path} lacks the field(s) "
            f"{', '.join(wanted[n] for n in lacking)} (its fileSchema: "
            f"{manifest.get('fileSchema')!r}); VACUUM needs Bucket, Key, Size and "
            "LastModifiedDate",
            table=table, file=path,
        )
    try:
        created = int(manifest["creationTimestamp"])
    except (TypeError, ValueError) as exc:
        raise InventoryError(
            f"inventory {path} has a creationTimestamp that is not a number of ms: "
            f"{manifest['creationTimestamp']!r}",
            table=table, file=path,
        ) from exc
    where = _bucket_and_prefix(table)
    source_bucket = str(manifest["sourceBucket"])
    if where is None or where[0] != source_bucket:
        raise InventoryError(
            f"inventory {path} is a report of bucket {source_bucket!r}, which does "
            f"not hold the table: its paths are outside the table root",
            table=table, file=path,
        )
    bucket, prefix = where
    dest = str(manifest.get("destinationBucket") or "")
    dest_bucket = dest.rsplit(":", 1)[-1] if dest else ""
    files = manifest["files"]
    if not isinstance(files, list) or not all(isinstance(f, dict) and "key" in f for f in files):
        raise InventoryError(
            f"inventory manifest {path} has no list of files with a key each",
            table=table, file=path,
        )
    data_store = (
        Storage.for_uri(f"s3://{dest_bucket}", options) if dest_bucket else manifest_store
    )
    paths: list[str] = []
    sizes: list[int] = []
    mtimes: list[int] = []
    outside = 0
    progress.begin(INVENTORY, total_files=None)
    for entry in files:
        key = str(entry["key"])
        raw = data_store.read(key)
        if kind == "csv":
            rows = _csv_rows(raw, names, key)
        else:
            rows = _parquet_rows(raw, names, key)
        count = 0
        for row_bucket, row_key, size, mtime in rows:
            count += 1
            if row_bucket != bucket:
                raise InventoryError(
                    f"inventory {path} names s3://{row_bucket}/{row_key}, outside the "
                    f"table's bucket {bucket!r}",
                    table=table, file=path,
                )
            if not row_key.startswith(prefix):
                outside += 1
                continue
            rel = _clean_relative(row_key[len(prefix):])
            if rel is None:
                raise InventoryError(
                    f"inventory {path} names s3://{row_bucket}/{row_key}, which is "
                    "not a plain path below the table root (empty or dot segments)",
                    table=table, file=path,
                )
            paths.append(rel)
            sizes.append(size)
            mtimes.append(mtime)
        progress.advance(INVENTORY, pages=1, files=count)
    progress.end(INVENTORY)
    return ReportRows(created, paths, sizes, mtimes, outside)


def _csv_rows(raw: bytes, names: list[str], key: str) -> Iterable[tuple[str, str, int, int]]:
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    index = {_norm(n): i for i, n in enumerate(names)}
    latest = index.get("islatest")
    marker = index.get("isdeletemarker")
    for row in csv.reader(io.StringIO(raw.decode("utf-8"))):
        if not row:
            continue
        if len(row) != len(names):
            raise InventoryError(
                f"inventory data file {key} has a row of {len(row)} fields, its fileSchema "
                f"names {len(names)}", file=key,
            )
        if latest is not None and row[latest].strip().lower() == "false":
            continue
        if marker is not None and row[marker].strip().lower() == "true":
            continue
        size_text = row[index["size"]].strip()
        yield (
            row[index["bucket"]],
            unquote_plus(row[index["key"]]),
            int(size_text) if size_text else 0,
            _parse_time(row[index["lastmodifieddate"]], key),
        )


def _parse_time(text: str, key: str) -> int:
    text = text.strip()
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InventoryError(
            f"inventory data file {key} has a LastModifiedDate that is not a date: {text!r}",
            file=key,
        ) from exc
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return int(stamp.timestamp() * 1000)


def _parquet_rows(raw: bytes, names: list[str], key: str) -> Iterable[tuple[str, str, int, int]]:
    import pyarrow.parquet as pq

    data = pq.read_table(io.BytesIO(raw))
    columns = {_norm(n): n for n in data.column_names}
    lacking = [n for n in _REPORT_NEEDS if n not in columns]
    if lacking:
        raise InventoryError(
            f"inventory data file {key} lacks column(s) {', '.join(lacking)}", file=key,
        )
    mask = None
    if "islatest" in columns:
        mask = pc.fill_null(data.column(columns["islatest"]), True)
    if "isdeletemarker" in columns:
        live = pc.invert(pc.fill_null(data.column(columns["isdeletemarker"]), False))
        mask = live if mask is None else pc.and_(mask, live)
    if mask is not None:
        data = data.filter(mask)
    stamps = data.column(columns["lastmodifieddate"])
    if pa.types.is_timestamp(stamps.type):
        stamps = stamps.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    elif not pa.types.is_integer(stamps.type):
        raise InventoryError(
            f"inventory data file {key}: last_modified_date is {stamps.type}, not a time",
            file=key,
        )
    yield from zip(
        data.column(columns["bucket"]).to_pylist(),
        data.column(columns["key"]).to_pylist(),
        (s or 0 for s in data.column(columns["size"]).to_pylist()),
        stamps.to_pylist(),
        strict=True,
    )
