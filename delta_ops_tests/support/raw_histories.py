"""Raw generated histories for the cleanup, VACUUM and references tests: a hypothesis strategy
of specs (commits, checkpoints of every kind, compactions, deletion vectors, ages) and the
writer that lays one out by hand; a storage that fails on demand, and the CLI run in-process."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from delta_ops.errors import StorageError
from delta_ops.protocol.actions import ADD_TYPE, REMOVE_TYPE
from delta_ops.protocol.last_checkpoint import build_last_checkpoint
from delta_ops.storage import Storage
from delta_ops_tests.support.dv_writer import encode_uuid_path
from delta_ops_tests.support.oracle import _abs_key

HOUR_MS = 3_600_000
BASE_MS = 1_700_000_000_000


class FailingStorage(Storage):
    """A real local Storage whose k-th delete raises (a crash in the middle of a run)."""

    def __init__(self, *args, fail_at: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "_fail", {"at": fail_at, "count": 0})

    __slots__ = ("_fail",)

    def delete(self, path: str) -> bool:
        state = self._fail
        state["count"] += 1
        if state["count"] == state["at"]:
            raise StorageError(f"injected failure on delete #{state['at']}", file=path)
        return super().delete(path)

    def delete_many(self, paths) -> int:
        return sum(1 for p in paths if self.delete(p))

    @classmethod
    def at(cls, root: Path, fail_at: int) -> FailingStorage:
        plain = Storage.for_uri(str(root))
        return cls(
            plain.root, plain.scheme, plain.storage_options, plain._backend, plain._base,
            fail_at=fail_at,
        )


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def log_names(root: Path) -> set[str]:
    return {p.name for p in (root / "_delta_log").iterdir() if p.is_file()}


PROTOCOL_STRUCT = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)


STRING_MAP = pa.map_(pa.string(), pa.string())
METADATA_STRUCT = pa.struct(
    [
        ("id", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)


CHECKPOINT_SCHEMA = pa.schema(
    [
        ("protocol", PROTOCOL_STRUCT),
        ("metaData", METADATA_STRUCT),
        ("add", ADD_TYPE),
        ("remove", REMOVE_TYPE),
        ("checkpointMetadata", pa.struct([("version", pa.int64()), ("tags", STRING_MAP)])),
        (
            "sidecar",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("sizeInBytes", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("tags", STRING_MAP),
                ]
            ),
        ),
    ]
)


SIDECAR_SCHEMA = pa.schema([("add", ADD_TYPE), ("remove", REMOVE_TYPE)])


#: Data file names (decoded, relative to the partition directory or root).
FILE_NAMES = ("a.parquet", "b.parquet", "c d.parquet", "e%f.parquet", "g.parquet", "h.parquet")


#: DV descriptors: (uuid int, prefix) of `u` DV files, plus an inline one.
DV_FILES = ((1, ""), (2, "ab"), (3, ""))
INLINE_DV = {
    "storageType": "i",
    "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
    "sizeInBytes": 40,
    "cardinality": 6,
}


V1_KINDS = ("classic", "multipart", "multipart-incomplete")
V2_KINDS = ("v2-json", "v2-parquet", "v2-classic", "classic")


def dv_descriptor(index: int) -> dict | None:
    if index >= len(DV_FILES):
        return dict(INLINE_DV) if index == len(DV_FILES) else None
    num, prefix = DV_FILES[index]
    u = uuid.UUID(int=num)
    return {"storageType": "u", "pathOrInlineDv": encode_uuid_path(u, prefix), "offset": 1,
            "sizeInBytes": 36, "cardinality": 2}


def dv_file(index: int) -> str | None:
    if index >= len(DV_FILES):
        return None
    num, prefix = DV_FILES[index]
    name = f"deletion_vector_{uuid.UUID(int=num)}.bin"
    return f"{prefix}/{name}" if prefix else name


@dataclass
class RawHistory:
    """A generated table: what was written, so tests can compute expectations naively."""

    root: Path
    partition_column: str
    commit_ms: list[int]  # the timestamp of each version (ICT or mtime)
    mtimes: list[int]  # commit file modification times
    ict_from: int | None
    checkpoints: dict[int, str] = field(default_factory=dict)  # version -> kind
    complete: set[int] = field(default_factory=set)  # versions with a complete checkpoint
    sidecars: dict[int, list[str]] = field(default_factory=dict)  # version -> sidecar names
    compactions: list[tuple[int, int]] = field(default_factory=list)
    data_files: dict[str, int] = field(default_factory=dict)  # rel path -> mtime
    removes: dict[int, list[str]] = field(default_factory=dict)

    @property
    def latest(self) -> int:
        return len(self.commit_ms) - 1

    @property
    def storage(self) -> Storage:
        return Storage.for_uri(str(self.root))

    def checkpoint_file(self, version: int) -> str:
        """The (first) checkpoint file name at `version`."""
        prefix = f"{version:020d}.checkpoint"
        return sorted(n for n in log_names(self.root) if n.startswith(prefix))[0]


# One commit's file actions. The spec allows at most one action of each type (add/remove)
# per path in a version ("a valid version is restricted to contain at most one file action
# of the same type ... for any path"), so draws are unique by (type, file, partition).
ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "remove"]),
        st.integers(0, len(FILE_NAMES) - 1),
        st.integers(0, len(DV_FILES) + 3),  # >= len+1: no DV
        st.integers(0, 3),  # partition value; 0 = root (no partition dir)
        st.booleans(),  # absolute path in the log
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda op: (op[0], op[1], op[3]),
)


@st.composite
def raw_specs(draw, *, min_commits: int = 2, max_commits: int = 9) -> dict:
    n = draw(st.integers(min_commits, max_commits))
    v2 = draw(st.booleans())
    kinds = V2_KINDS if v2 else V1_KINDS
    cps = draw(st.dictionaries(st.integers(0, n - 1), st.sampled_from(kinds), max_size=4))
    comps = []
    for _ in range(draw(st.integers(0, 2))):
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a, n - 1))
        comps.append((a, b))
    return {
        "commits": [draw(ops) for _ in range(n)],
        "gaps_h": [draw(st.integers(1, 96)) for _ in range(n)],
        "v2": v2,
        "checkpoints": cps,
        "compactions": comps,
        "ict_from": draw(st.one_of(st.none(), st.integers(0, n - 1))),
        "crc": draw(st.sets(st.integers(0, n - 1))),
        "side_crc": draw(st.booleans()),
        "partition_column": draw(st.sampled_from(["p", "_p"])),
        "last_checkpoint": draw(st.sampled_from(["newest", "oldest", "none"])),
        "mtime_jitter": draw(st.booleans()),
    }


def _log_path(root: Path, rel: str, absolute: bool) -> str:
    encoded = "/".join(quote(part, safe="=") for part in rel.split("/"))
    return f"file://{quote(str(root))}/{encoded}" if absolute else encoded


def build_raw(root: Path, spec: dict, *, data_files: bool = False) -> RawHistory:
    """Write the history described by `spec` (a `raw_specs` draw) under `root`."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    pcol = spec["partition_column"]
    times, t = [], BASE_MS
    for gap in spec["gaps_h"]:
        t += gap * HOUR_MS
        times.append(t)
    ict_from = spec["ict_from"]
    # With in-commit timestamps, file mtimes need not be monotonic (ICT governs from E on).
    mtimes = [
        (t - 400 * HOUR_MS if (spec["mtime_jitter"] and ict_from is not None and v >= ict_from
                               and v % 2) else t)
        for v, t in enumerate(times)
    ]
    hist = RawHistory(root, pcol, times, mtimes, ict_from)
    reader = ["deletionVectors"] + (["v2Checkpoint"] if spec["v2"] else [])
    writer = reader + ["inCommitTimestamp"]
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": reader,
                "writerFeatures": writer + list(spec.get("extra_writer_features", []))}
    schema = {"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True, "metadata": {}},
        {"name": pcol, "type": "string", "nullable": True, "metadata": {}}]}
    metadata = {"id": "raw", "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema), "partitionColumns": [pcol],
                "configuration": {"delta.enableDeletionVectors": "true",
                                  **spec.get("configuration", {})},
                "createdTime": BASE_MS}
    state_files: dict[tuple, dict] = {}
    state_tombs: dict[tuple, dict] = {}
    per_version: list[list[dict]] = []
    current_md = metadata
    for v, commit_ops in enumerate(spec["commits"]):
        actions: list[dict] = []
        info = {"timestamp": times[v], "operation": "WRITE"}
        if ict_from is not None and v >= ict_from:
            info["inCommitTimestamp"] = times[v]
        actions.append({"commitInfo": info})
        if v == 0:
            actions.append({"protocol": protocol})
        if v == 0 or (ict_from is not None and v == ict_from):
            cfg = dict(metadata["configuration"])
            if ict_from is not None and v == ict_from:
                cfg.update({"delta.enableInCommitTimestamps": "true",
                            "delta.inCommitTimestampEnablementVersion": str(v),
                            "delta.inCommitTimestampEnablementTimestamp": str(times[v])})
            current_md = {**metadata, "configuration": cfg}
            actions.append({"metaData": current_md})
        seen_paths: set[str] = set()
        for kind, fi, dvi, part, absolute in commit_ops:
            rel = f"{pcol}={part}/{FILE_NAMES[fi]}" if part else FILE_NAMES[fi]
            if rel in seen_paths:  # at most one file action per path and commit
                continue
            seen_paths.add(rel)
            dv = dv_descriptor(dvi)
            pv = {pcol: str(part)} if part else {pcol: None}
            key = (rel, json.dumps(dv, sort_keys=True))
            if kind == "add":
                add = {"path": _log_path(root, rel, absolute), "partitionValues": pv,
                       "size": 1, "modificationTime": times[v], "dataChange": True}
                if dv:
                    add["deletionVector"] = dv
                actions.append({"add": add})
                state_files[key] = add
                state_tombs.pop(key, None)
                if data_files:
                    hist.data_files.setdefault(rel, times[v])
                    if dv_file(dvi):
                        hist.data_files.setdefault(dv_file(dvi), times[v])
            else:
                rm = {"path": _log_path(root, rel, absolute), "deletionTimestamp": times[v],
                      "dataChange": True, "partitionValues": pv, "size": 1}
                if dv:
                    rm["deletionVector"] = dv
                actions.append({"remove": rm})
                state_files.pop(key, None)
                state_tombs[key] = rm
                hist.removes.setdefault(v, []).append(rel)
        if v == 0 and spec.get("outside"):
            # Paths in the log that point outside the table: VACUUM must never touch them.
            outside = root.parent / "outside"
            outside.mkdir(exist_ok=True)
            for name in ("o1.parquet", "o2.parquet", "o3.parquet"):
                (outside / name).write_bytes(b"o")
                set_mtime(outside / name, 0)
            o2 = f"file://{quote(str(outside))}/o2.parquet"
            for log_path in ("../outside/o1.parquet", o2):
                actions.append({"add": {"path": log_path, "partitionValues": {pcol: None},
                                        "size": 1, "modificationTime": 0, "dataChange": True}})
            actions.append({"remove": {"path": "../outside/o3.parquet", "deletionTimestamp": 0,
                                       "dataChange": True}})
        per_version.append(actions)
        path = log / f"{v:020d}.json"
        path.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        set_mtime(path, mtimes[v])
        if spec["side_crc"]:
            side = log / f".{v:020d}.json.crc"
            side.write_bytes(b"crc")
            set_mtime(side, mtimes[v])
        if v in spec["crc"]:
            crc = log / f"{v:020d}.crc"
            crc.write_text(json.dumps({"tableSizeBytes": len(state_files), "numFiles":
                                       len(state_files), "numMetadata": 1, "numProtocol": 1,
                                       "protocol": protocol, "metadata": current_md}))
            set_mtime(crc, mtimes[v] + 1)
        if v in spec["checkpoints"]:
            _write_checkpoint(hist, v, spec["checkpoints"][v], protocol, current_md,
                              list(state_files.values()), list(state_tombs.values()),
                              side_crc=spec["side_crc"])
    for a, b in spec["compactions"]:
        _write_compaction(log, a, b, per_version, times[b])
        hist.compactions.append((a, b))
    complete = sorted(hist.complete)
    if spec["last_checkpoint"] != "none" and complete:
        v = complete[-1] if spec["last_checkpoint"] == "newest" else complete[0]
        lc = build_last_checkpoint(version=v, size=1, size_in_bytes=1, num_of_add_files=0)
        (log / "_last_checkpoint").write_bytes(lc.to_json_bytes())
    if data_files:
        for rel, ms in hist.data_files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"x")
            set_mtime(p, ms)
    return hist


def _parquet(path: Path, rows: list[dict], schema: pa.Schema, mtime: int) -> None:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    set_mtime(path, mtime)


def _write_checkpoint(
    hist: RawHistory, v: int, kind: str, protocol: dict, metadata: dict,
    adds: list[dict], removes: list[dict], *, side_crc: bool,
) -> None:
    log = hist.root / "_delta_log"
    ms = hist.mtimes[v] + 2
    head = [{"protocol": protocol}, {"metaData": metadata}]
    files = [{"add": a} for a in adds] + [{"remove": r} for r in removes]
    hist.checkpoints[v] = kind
    if kind == "classic":
        _parquet(log / f"{v:020d}.checkpoint.parquet", head + files, CHECKPOINT_SCHEMA, ms)
        hist.complete.add(v)
        written = [f"{v:020d}.checkpoint.parquet"]
    elif kind.startswith("multipart"):
        parts = [head + files[: len(files) // 2], files[len(files) // 2 :]]
        written = []
        for i, rows in enumerate(parts, 1):
            if kind == "multipart-incomplete" and i == 2:
                break
            name = f"{v:020d}.checkpoint.{i:010d}.{2:010d}.parquet"
            _parquet(log / name, rows, CHECKPOINT_SCHEMA, ms)
            written.append(name)
        if kind == "multipart":
            hist.complete.add(v)
    else:
        sidecar_dir = log / "_sidecars"
        sidecar_dir.mkdir(exist_ok=True)
        sc_name = f"{uuid.UUID(int=v + 1000)}.parquet"
        _parquet(sidecar_dir / sc_name, files, SIDECAR_SCHEMA, ms)
        hist.sidecars[v] = [sc_name]
        size = (sidecar_dir / sc_name).stat().st_size
        rows = head + [
            {"checkpointMetadata": {"version": v, "tags": None}},
            {"sidecar": {"path": sc_name, "sizeInBytes": size, "modificationTime": ms,
                         "tags": None}},
        ]
        cp_uuid = uuid.UUID(int=v + 2000)
        if kind == "v2-json":
            name = f"{v:020d}.checkpoint.{cp_uuid}.json"
            (log / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
            set_mtime(log / name, ms)
        else:
            name = (f"{v:020d}.checkpoint.{cp_uuid}.parquet" if kind == "v2-parquet"
                    else f"{v:020d}.checkpoint.parquet")
            _parquet(log / name, rows, CHECKPOINT_SCHEMA, ms)
        written = [name]
        hist.complete.add(v)
    if side_crc:
        for name in written:
            (log / f".{name}.crc").write_bytes(b"crc")
            set_mtime(log / f".{name}.crc", ms)


def _write_compaction(log: Path, a: int, b: int, per_version: list[list[dict]], ms: int) -> None:
    """The spec's reconciled form: one line per file, keyed by the file the path names
    (`a.parquet` and `file:///<root>/a.parquet` are one file), the newest action winning."""
    latest: dict[tuple, dict] = {}
    other: dict[str, dict] = {}
    for v in range(a, b + 1):
        for obj in per_version[v]:
            for kind in ("add", "remove"):
                if kind in obj:
                    act = obj[kind]
                    where = _abs_key(act["path"], log.parent)
                    key = (where, json.dumps(act.get("deletionVector"), sort_keys=True))
                    latest.pop(key, None)  # the newest action for a file goes last
                    latest[key] = {kind: act}
            for kind in ("protocol", "metaData"):
                if kind in obj:
                    other[kind] = obj
    lines = list(other.values()) + list(latest.values())
    name = f"{a:020d}.{b:020d}.compacted.json"
    (log / name).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    set_mtime(log / name, ms + 3)


def _simple_spec(n: int, *, checkpoints: dict, v2: bool = False, ict_from=None, **extra) -> dict:
    return {
        "commits": [[("add", v % len(FILE_NAMES), 9, v % 3, False)] for v in range(n)],
        "gaps_h": [30] * n, "v2": v2, "checkpoints": checkpoints, "compactions": [],
        "ict_from": ict_from, "crc": set(), "side_crc": False, "partition_column": "p",
        "last_checkpoint": "newest", "mtime_jitter": False, **extra,
    }


def _cli(monkeypatch, capsys, argv: list[str]) -> tuple[int, str, str]:
    import delta_ops.cli as cli

    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err
