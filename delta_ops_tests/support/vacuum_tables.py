"""Generated tables for the VACUUM source tests (listing, inventory, lite), and inventories.

A `GeneratedTable` is written by hand: commit 0 adds every data file (some with deletion
vectors in `u` descriptors), commit 1 removes some (expired tombstones, with their DVs),
commit 2 removes others inside the retention. Besides the data there are, as asked:
orphans (never committed, old; only a listing or an inventory sees them), young orphans
(kept by age), Hadoop side checksums of removed files, and files under `_`- and
`.`-prefixed directories (never touched). Names may hold spaces, `%`, `%25` and unicode,
and the table may be partitioned by a column whose values hold them too.

Inventories: `spark_inventory` (delta-spark's `USING INVENTORY` schema, fully qualified
paths) and `write_s3_report` (an S3 Inventory report: manifest.json and CSV or Parquet
data files).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import encode_uuid_path

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "x", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}},
]})
AWKWARD = ["a b", "x%y", "x%25y", "é日", "plain", "k+v"]
INVENTORY_SCHEMA = pa.schema([
    ("path", pa.string()), ("length", pa.int64()), ("isDir", pa.bool_()),
    ("modificationTime", pa.int64()),
])


@dataclass
class GeneratedTable:
    """A table to write: files (relative raw path -> (bytes, mtime ms)) and commits."""

    now_ms: int
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    commits: list[list[dict]] = field(default_factory=list)
    commit_ms: list[int] = field(default_factory=list)
    garbage: set[str] = field(default_factory=set)  # what a full VACUUM must delete
    orphans: set[str] = field(default_factory=set)  # never committed, old
    hidden: set[str] = field(default_factory=set)  # never touched

    def write_local(self, root: Path) -> None:
        (root / "_delta_log").mkdir(parents=True, exist_ok=True)
        for rel, (data, mtime) in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.utime(path, ns=(mtime * 1_000_000, mtime * 1_000_000))
        for version, (actions, ms) in enumerate(zip(self.commits, self.commit_ms, strict=True)):
            path = root / "_delta_log" / f"{version:020d}.json"
            path.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
            os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))

    def write_storage(self, storage: Storage) -> None:
        """On an object store (modification times are the store's: now)."""
        for rel, (data, _mtime) in self.files.items():
            storage.put_atomic(rel, data)
        for version, actions in enumerate(self.commits):
            data = ("\n".join(json.dumps(a) for a in actions) + "\n").encode()
            assert storage.put_if_absent(f"_delta_log/{version:020d}.json", data)


def _name(rng: random.Random, awkward: bool, i: int) -> str:
    if not awkward:
        return f"part-{i:03d}.parquet"
    return f"part {rng.choice(AWKWARD)}-{i:03d}.parquet"


def generate(
    seed: int,
    now_ms: int,
    *,
    partitioned: bool,
    awkward: bool,
    dv: bool,
    orphans: bool,
    files: int = 12,
) -> GeneratedTable:
    """A table whose full VACUUM (7-day default retention at `now_ms`) deletes `garbage`."""
    rng = random.Random(seed)
    old = now_ms - 30 * DAY_MS
    t = GeneratedTable(now_ms=now_ms)
    values = AWKWARD if awkward else ["1", "2", "3"]
    adds: list[dict] = []
    removes_expired: list[dict] = []
    removes_recent: list[dict] = []
    for i in range(files):
        name = _name(rng, awkward, i)
        value = rng.choice(values)
        rel = f"p={value}/{name}" if partitioned else name
        if not partitioned and rng.random() < 0.3:
            rel = f"sub dir/{name}" if awkward else f"sub/{name}"
        t.files[rel] = (b"x" * (i + 1), old)
        action = {
            "path": quote(rel), "partitionValues": {"p": value} if partitioned else {},
            "size": i + 1, "modificationTime": old, "dataChange": True,
        }
        dv_rel = None
        if dv and rng.random() < 0.5:
            u = uuid.UUID(int=rng.getrandbits(128))
            prefix = rng.choice(["", "ab"])
            dv_rel = (f"{prefix}/" if prefix else "") + f"deletion_vector_{u}.bin"
            t.files[dv_rel] = (b"dv" * (i + 1), old)
            action["deletionVector"] = {
                "storageType": "u", "pathOrInlineDv": encode_uuid_path(u, prefix),
                "offset": 1, "sizeInBytes": 2, "cardinality": 1,
            }
        adds.append(action)
        # The first file is always removed long ago: every table has something to delete.
        fate = "expired" if i == 0 else rng.choice(["live", "live", "expired", "recent"])
        remove = {k: v for k, v in action.items() if k not in ("modificationTime",)}
        if fate == "expired":
            removes_expired.append({**remove, "deletionTimestamp": old + DAY_MS})
            t.garbage.add(rel)
            if dv_rel:
                t.garbage.add(dv_rel)
            if rng.random() < 0.5:
                head, _, base = rel.rpartition("/")
                side = f"{head}/.{base}.crc" if head else f".{base}.crc"
                t.files[side] = (b"crc", old)
                t.garbage.add(side)
        elif fate == "recent":
            removes_recent.append({**remove, "deletionTimestamp": now_ms - DAY_MS})
    hidden = ["_tmp/h.parquet", ".hidden/h2.parquet", "_junk.parquet", ".junk.parquet"]
    hidden.append("p=1/_staging/h3.parquet" if partitioned else "sub/_staging/h3.parquet")
    for rel in hidden:
        t.files[rel] = (b"h", old)
        t.hidden.add(rel)
    if orphans:
        for j in range(3):
            rel = (f"p={values[j % len(values)]}/" if partitioned else "") + f"orphan {j}%.bin"
            t.files[rel] = (b"o" * (j + 1), old)
            t.orphans.add(rel)
            t.garbage.add(rel)
        t.files["young orphan.parquet"] = (b"y", now_ms - HOUR_MS)
    protocol = (
        {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
         "writerFeatures": ["deletionVectors"]}
        if dv else {"minReaderVersion": 1, "minWriterVersion": 2}
    )
    metadata = {
        "id": str(uuid.UUID(int=seed)), "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA, "partitionColumns": ["p"] if partitioned else [],
        "configuration": {"delta.enableDeletionVectors": "true"} if dv else {},
        "createdTime": old,
    }
    t.commits = [
        [{"commitInfo": {"timestamp": old, "operation": "WRITE"}}, {"protocol": protocol},
         {"metaData": metadata}, *({"add": a} for a in adds)],
        [{"commitInfo": {"timestamp": old + DAY_MS, "operation": "DELETE"}},
         *({"remove": r} for r in removes_expired)],
        [{"commitInfo": {"timestamp": now_ms - DAY_MS, "operation": "DELETE"}},
         *({"remove": r} for r in removes_recent)],
    ]
    t.commit_ms = [old, old + DAY_MS, now_ms - DAY_MS]
    return t


def walk_local(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below `root`: relative path -> (size, mtime ms)."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            st = p.stat()
            out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns // 1_000_000)
    return out


def spark_inventory(
    qualified_root: str, listing: dict[str, tuple[int, int]], *, dirs: bool = True
) -> pa.Table:
    """delta-spark's inventory of a listing (fully qualified paths; directories too)."""
    rows = [
        {"path": f"{qualified_root}/{rel}", "length": size, "isDir": False,
         "modificationTime": mtime}
        for rel, (size, mtime) in sorted(listing.items())
    ]
    if dirs:
        heads = {rel.rpartition("/")[0] for rel in listing if "/" in rel}
        rows += [{"path": f"{qualified_root}/{d}", "length": 0, "isDir": True,
                  "modificationTime": 0} for d in sorted(heads)]
    return pa.Table.from_pylist(rows, schema=INVENTORY_SCHEMA)


def write_parquet(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def write_s3_report(
    storage: Storage,
    *,
    source_bucket: str,
    dest_bucket: str,
    rows: list[tuple[str, str, int, int]],
    created_ms: int,
    fmt: str = "CSV",
    schema_fields: tuple[str, ...] = ("Bucket", "Key", "Size", "LastModifiedDate", "IsLatest"),
    parts: int = 2,
) -> str:
    """Write an S3 Inventory report into `storage` (rooted at the destination bucket's
    report prefix); rows are (bucket, key, size, mtime ms). Returns the manifest's URI."""
    files = []
    chunks = [rows[i::parts] for i in range(parts)]
    for n, chunk in enumerate(chunks):
        if fmt == "CSV":
            buf = io.StringIO()
            writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
            for bucket, key, size, mtime in chunk:
                values = {"Bucket": bucket, "Key": quote(key, safe="/").replace("%20", "+"),
                          "Size": str(size), "LastModifiedDate": _iso(mtime),
                          "IsLatest": "true", "IsDeleteMarker": "false"}
                writer.writerow([values[f] for f in schema_fields])
            data = gzip.compress(buf.getvalue().encode())
            name = f"data/part-{n}.csv.gz"
        else:
            cols = {"bucket": pa.string(), "key": pa.string(), "size": pa.int64(),
                    "last_modified_date": pa.timestamp("ms", tz="UTC"),
                    "is_latest": pa.bool_()}
            wanted = [f for f in cols if _norm(f) in {_norm(x) for x in schema_fields}]
            table = pa.table({
                "bucket": pa.array([r[0] for r in chunk], pa.string()),
                "key": pa.array([r[1] for r in chunk], pa.string()),
                "size": pa.array([r[2] for r in chunk], pa.int64()),
                "last_modified_date": pa.array([r[3] for r in chunk], pa.int64()).cast(
                    pa.timestamp("ms", tz="UTC")),
                "is_latest": pa.array([True] * len(chunk)),
            }).select(wanted)
            buf = io.BytesIO()
            pq.write_table(table, buf)
            data = buf.getvalue()
            name = f"data/part-{n}.parquet"
        storage.put_atomic(name, data)
        files.append({"key": f"{_key_prefix(storage, dest_bucket)}{name}", "size": len(data),
                      "MD5checksum": "0"})
    if fmt == "CSV":
        file_schema = ", ".join(schema_fields)
    else:
        decls = {"Bucket": "required binary bucket (STRING)",
                 "Key": "required binary key (STRING)", "Size": "optional int64 size",
                 "LastModifiedDate": "optional int64 last_modified_date (TIMESTAMP(MILLIS,true))",
                 "IsLatest": "optional boolean is_latest"}
        file_schema = "message s3.inventory { " + "; ".join(
            decls[f] for f in schema_fields) + "; }"
    manifest = {
        "sourceBucket": source_bucket, "destinationBucket": f"arn:aws:s3:::{dest_bucket}",
        "version": "2016-11-30", "creationTimestamp": str(created_ms), "fileFormat": fmt,
        "fileSchema": file_schema, "files": files,
    }
    storage.put_atomic("manifest.json", json.dumps(manifest).encode())
    return storage.absolute_uri("manifest.json")


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


def _key_prefix(storage: Storage, bucket: str) -> str:
    """The key prefix of `storage`'s root inside `bucket` (with a trailing `/`)."""
    root = storage.root
    rest = root.split("://", 1)[1]
    assert rest.startswith(bucket)
    prefix = rest[len(bucket):].strip("/")
    return f"{prefix}/" if prefix else ""
