"""Reading an S3 Inventory report for VACUUM (`inventory.py` says what is done with it).

No protocol section: the report's format (AWS S3 Inventory): `manifest.json` with
`sourceBucket`, `destinationBucket`, `fileFormat`, `fileSchema`, `files[].key` and
`creationTimestamp`; CSV data files gzip-compressed, without a header, keys URL-encoded;
Parquet data files with the snake_case columns (`bucket`, `key`, `size`,
`last_modified_date`, `is_latest`, `is_delete_marker`).
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
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
    paths: pa.ChunkedArray
    sizes: pa.ChunkedArray
    mtimes: pa.ChunkedArray
    outside: int


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
    parts: list[pa.Table] = []
    outside = 0
    progress.begin(INVENTORY, total_files=None)
    for entry in files:
        key = str(entry["key"])
        raw = data_store.read(key)
        rows = _csv_table(raw, names, key) if kind == "csv" else _parquet_table(raw, key)
        below, skipped = _below_prefix(rows, bucket, prefix, path, table)
        parts.append(below)
        outside += skipped
        progress.advance(INVENTORY, pages=1, files=rows.num_rows)
    progress.end(INVENTORY)
    found = pa.concat_tables(parts) if parts else _ROWS.empty_table()
    return ReportRows(created, found.column(0), found.column(1), found.column(2), outside)


# Rows of a report's data file: bucket, key (decoded), size, last modified (ms).
_ROWS = pa.schema([("bucket", pa.string()), ("key", pa.string()), ("size", pa.int64()),
                   ("mtime", pa.int64())])
# A key suffix that is not a plain relative path: empty or dot segments, or empty.
BAD_RELATIVE = r"(^|/)\.\.?(/|$)|//|^/|/$|^$"


def _below_prefix(
    rows: pa.Table, bucket: str, prefix: str, path: str, table: str
) -> tuple[pa.Table, int]:
    """(the rows below the table's prefix as relative paths, sizes and times; how many rows
    of the bucket lie outside it).

    Raises:
        InventoryError: A row of another bucket, or a path below the prefix that is not a
            plain relative path.
    """
    other = pc.fill_null(pc.not_equal(rows.column("bucket"), bucket), True)
    if pc.any(other).as_py():
        bad = rows.filter(other)
        raise InventoryError(
            f"inventory {path} names s3://{bad.column('bucket')[0].as_py()}/"
            f"{bad.column('key')[0].as_py()}, outside the table's bucket {bucket!r}",
            table=table, file=path,
        )
    keys = rows.column("key")
    inside = pc.fill_null(pc.starts_with(keys, prefix), False) if prefix else pc.is_valid(keys)
    below = rows.filter(inside)
    rel = pc.utf8_slice_codeunits(below.column("key"), len(prefix))
    wrong = pc.match_substring_regex(rel, BAD_RELATIVE)
    if pc.any(wrong).as_py():
        first = below.column("key").filter(wrong)[0].as_py()
        raise InventoryError(
            f"inventory {path} names s3://{bucket}/{first}, which is not a plain path below "
            "the table root (empty or dot segments)",
            table=table, file=path,
        )
    out = pa.table({"path": rel, "size": pc.fill_null(below.column("size"), 0),
                    "mtime": below.column("mtime")})
    return out, rows.num_rows - below.num_rows


def _flags(column: pa.ChunkedArray | pa.Array, value: str) -> pa.Array:
    """Which rows of a CSV text column say `value` (`true`/`false`, any case)."""
    return pc.equal(pc.utf8_lower(pc.utf8_trim_whitespace(column)), value)


def _csv_table(raw: bytes, names: list[str], key: str) -> pa.Table:
    import pyarrow.csv as pacsv

    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        data = pacsv.read_csv(
            io.BytesIO(raw),
            read_options=pacsv.ReadOptions(column_names=names),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise InventoryError(
            f"inventory data file {key} does not match its fileSchema ({len(names)} fields): "
            f"{exc}", file=key,
        ) from exc
    index = {_norm(n): n for n in names}
    keep = None
    if "islatest" in index:
        keep = pc.invert(_flags(data.column(index["islatest"]), "false"))
    if "isdeletemarker" in index:
        live = pc.invert(_flags(data.column(index["isdeletemarker"]), "true"))
        keep = live if keep is None else pc.and_(keep, live)
    if keep is not None:
        data = data.filter(keep)
    # CSV keys are URL-encoded (form encoding: `+` is a space).
    keys = [unquote_plus(k) for k in data.column(index["key"]).to_pylist()]
    sizes = pc.utf8_trim_whitespace(data.column(index["size"]))
    sizes = pc.if_else(pc.equal(sizes, ""), "0", sizes)
    stamps = pc.utf8_trim_whitespace(data.column(index["lastmodifieddate"]))
    try:
        size_col = sizes.cast(pa.int64())
        mtime_col = stamps.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    except pa.ArrowInvalid as exc:
        raise InventoryError(
            f"inventory data file {key} has a Size or LastModifiedDate it cannot read: {exc}",
            file=key,
        ) from exc
    return pa.table({"bucket": data.column(index["bucket"]), "key": pa.array(keys, pa.string()),
                     "size": size_col, "mtime": mtime_col}, schema=_ROWS)


def _parquet_table(raw: bytes, key: str) -> pa.Table:
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
    return pa.table({
        "bucket": data.column(columns["bucket"]).cast(pa.string()),
        "key": data.column(columns["key"]).cast(pa.string()),
        "size": data.column(columns["size"]).cast(pa.int64()),
        "mtime": stamps.cast(pa.int64()),
    }, schema=_ROWS)
