"""Checkpoint test helpers shared by the checkpoint, stream, rebuild and Spark tests: corpus
copies, the tables each checkpoint kind supports, a state to compare, generated histories."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
from deltalake import DeltaTable as RsTable

from delta_ops.errors import UnsupportedFeatureError
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.protocol import features
from delta_ops.protocol.actions import dv_unique_id
from delta_ops.protocol.checkpoint_schema import (
    CHECKPOINT_REMOVE_TYPE,
)
from delta_ops.protocol.last_checkpoint import parse_last_checkpoint
from delta_ops.storage import Storage
from delta_ops.table import DeltaTable
from delta_ops_tests.support.broken_tables import BROKEN
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path
from delta_ops_tests.support.oracle import _abs_key

NOW = 1_800_000_000_000  # a fixed clock for tombstone expiry
DAY = 86_400_000
LOG = "_delta_log"


def _copy(name: str, dest: Path) -> Path:
    """Copy a corpus table's log (all a checkpoint needs) to `dest`."""
    shutil.copytree(corpus_path(name) / LOG, dest / LOG)
    return dest


def _md(md) -> dict[str, Any]:
    """A metaData action with its maps as dicts (Parquet checkpoints hold them as pairs)."""
    fmt = md.format
    options = fmt.get("options") or {}
    return {
        "id": md.id,
        "name": md.name,
        "description": md.description,
        "format": {"provider": fmt.get("provider"), "options": dict(options)},
        "schemaString": md.schema_string,
        "partitionColumns": md.partition_columns,
        "configuration": md.configuration,
        "createdTime": md.created_time,
    }


def _delete_commits_upto(root: Path, version: int) -> None:
    for p in (root / LOG).iterdir():
        if len(p.name) == 25 and p.name.endswith(".json") and int(p.name[:20]) <= version:
            p.unlink()


def _delete_checkpoints_at(root: Path, version: int) -> None:
    prefix = f"{version:020d}.checkpoint"
    for p in (root / LOG).iterdir():
        if p.name.startswith(prefix):
            p.unlink()


def _rs_files(root: Path) -> set[str] | None:
    try:
        t = RsTable(str(root))
        paths = t.get_add_actions(flatten=False).column("path").to_pylist()
    except Exception:  # noqa: BLE001 - delta-rs raises many types; "cannot load" is all we need
        return None
    return {os.path.relpath(_abs_key(p, root), root) for p in paths}


def _allowed_kinds(snap) -> list[str]:
    if features.is_feature_supported(snap.protocol, "v2Checkpoint"):
        return ["classic", "v2-classic", "v2-uuid"]
    return ["classic", "multi-part"]


def _supported(name: str) -> bool:
    snap = DeltaTable(str(corpus_path(name))).snapshot()
    try:
        snap.ensure_supported("checkpoint")
    except UnsupportedFeatureError:
        return False
    return True


READABLE = [t for t in all_corpus_tables() if t not in BROKEN]
SUPPORTED = [t for t in READABLE if _supported(t)]


def _actions_of_files(paths: list[Path]) -> list[dict]:
    rows: list[dict] = []
    sidecars: list[str] = []
    for f in paths:
        if f.suffix == ".json":
            objs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        else:
            objs = [
                {k: v for k, v in r.items() if v is not None}
                for r in pq.read_table(f).to_pylist(maps_as_pydicts="strict")
            ]
        for obj in objs:
            for k, v in obj.items():
                if k == "sidecar":
                    sidecars.append(v["path"])
                elif v is not None:
                    rows.append({k: v})
    for s in sidecars:
        rows += _actions_of_files([paths[0].parent / "_sidecars" / s])
    return rows


def _normalize_action(obj: dict) -> str | None:
    ((kind, value),) = obj.items()
    if kind not in ("add", "remove", "metaData", "protocol", "txn", "domainMetadata"):
        return None  # checkpointMetadata/sidecar (V2 plumbing), or actions no reader knows

    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    value = clean(value)
    if kind in ("add", "remove"):
        # Spark rewrites dataChange to false in checkpoints, and (by default) adds
        # partitionValues_parsed; neither is part of the action's identity.
        value.pop("dataChange", None)
        value.pop("partitionValues_parsed", None)
        value.pop("stats_parsed", None)
        if value.get("tags") == {}:
            value.pop("tags")
    if kind == "metaData":
        value.setdefault("format", {}).setdefault("options", {})
    if kind == "protocol":
        value = {k: v for k, v in value.items() if v not in (None, [])}
    return json.dumps({kind: value}, sort_keys=True)


PROTOCOLS = {
    "v1": {"minReaderVersion": 1, "minWriterVersion": 2},
    "v3": {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors", "v2Checkpoint"],
        "writerFeatures": ["deletionVectors", "v2Checkpoint", "domainMetadata", "rowTracking"],
    },
}


SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}


PATHS = [f"p=x/f{i}.parquet" for i in range(10)] + [
    "p=y/sp%20ace.parquet",
    "p=__HIVE_DEFAULT_PARTITION__/n.parquet",  # a null partition value
]


def _partition(path: str) -> dict[str, str | None]:
    return {"p": None if "HIVE" in path else path[2]}


DVS = [
    None,
    {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    },
    {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "sizeInBytes": 40,
        "cardinality": 6,
    },
]


def _metadata(stats_struct: bool = False, stats_json: bool = True) -> dict:
    return {
        "id": "gen",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["p"],
        "configuration": {
            "delta.checkpoint.writeStatsAsStruct": str(stats_struct).lower(),
            "delta.checkpoint.writeStatsAsJson": str(stats_json).lower(),
        },
        "createdTime": 0,
    }


def _action(step_, version: int, v3: bool) -> dict:
    kind = step_[0]
    if kind == "add":
        _, f, dv, size, with_stats = step_
        stats = (
            json.dumps(
                {
                    "numRecords": size % 7,
                    "minValues": {"id": size},
                    "maxValues": {"id": size + 5},
                    "nullCount": {"id": 0},
                }
            )
            if with_stats
            else None
        )
        add = {
            "path": PATHS[f],
            "partitionValues": _partition(PATHS[f]),
            "size": size,
            "modificationTime": version,
            "dataChange": True,
            "stats": stats,
            "tags": {"t": str(version)} if size % 3 == 0 else None,
        }
        if v3:
            add["deletionVector"] = DVS[dv]
            add["baseRowId"] = size * 10
            add["defaultRowCommitVersion"] = version
        return {"add": {k: v for k, v in add.items() if v is not None}}
    if kind == "remove":
        _, f, dv, old = step_
        rm = {
            "path": PATHS[f],
            "deletionTimestamp": NOW - (30 if old else 1) * DAY,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": _partition(PATHS[f]),
            "size": 5,
        }
        if v3 and DVS[dv]:
            rm["deletionVector"] = DVS[dv]
        return {"remove": rm}
    if kind == "txn":
        return {"txn": {"appId": step_[1], "version": step_[2], "lastUpdated": version}}
    if kind == "domain":
        return {
            "domainMetadata": {
                "domain": step_[1],
                "configuration": f"c{version}",
                "removed": step_[2],
            }
        }
    return {"metaData": _metadata(step_[1], step_[2])}


def _write_history(storage: Storage, commits: list[list[tuple]], v3: bool) -> int:
    first = [{"protocol": PROTOCOLS["v3" if v3 else "v1"]}, {"metaData": _metadata()}]
    version = -1
    for steps in [[], *commits]:
        version += 1
        actions = list(first) if version == 0 else []
        seen: set = set()
        for s in steps:
            a = _action(s, version, v3)
            kind = next(iter(a))
            if kind in ("add", "remove"):
                key = a[kind]["path"]
            elif kind == "metaData":
                key = "metaData"
            else:
                key = (kind, s[1])
            if key in seen:
                continue  # one action per file/app/domain/metadata per commit
            seen.add(key)
            actions.append(a)
        actions.append({"commitInfo": {"timestamp": NOW - DAY + version, "operation": "WRITE"}})
        assert storage.put_if_absent(
            f"{LOG}/{version:020d}.json", b"\n".join(orjson.dumps(a) for a in actions) + b"\n"
        )
    return version


def _full_state(snap, *, stats: bool = True) -> dict:
    """Every column of every live file and unexpired tombstone, for exact equality."""
    files = snap.files.to_pylist(maps_as_pydicts="strict")
    if not stats or not snap.properties.checkpoint_write_stats_as_json:
        for f in files:
            f.pop("stats")
    tombs = snap.unexpired_tombstones(NOW).select([f.name for f in CHECKPOINT_REMOVE_TYPE])
    key = lambda r: (r["path"], json.dumps(r["deletionVector"], sort_keys=True))  # noqa: E731
    return {
        "files": sorted(files, key=key),
        "tombstones": sorted(tombs.to_pylist(maps_as_pydicts="strict"), key=key),
        "protocol": snap.protocol,
        "metadata": _md(snap.metadata),
        "txns": {a: (t.version, t.last_updated) for a, t in snap.txns.items()},
        "domains": {d: m.configuration for d, m in snap.domains.items()},
    }


def _log_names(root: Path) -> set[str]:
    log = root / LOG
    names = {p.name for p in log.iterdir() if p.is_file()}
    side = log / "_sidecars"
    if side.is_dir():
        names |= {f"_sidecars/{p.name}" for p in side.iterdir()}
    return names


UNSUPPORTED = [t for t in READABLE if t not in SUPPORTED]


def round_trip_corpus(name, tmp_path):
    src = corpus_path(name)
    base = DeltaTable(str(src)).snapshot()
    theirs = _rs_files(src)
    for i, kind in enumerate(_allowed_kinds(base)):
        root = _copy(name, tmp_path / kind)
        v = base.version
        if (root / LOG / f"{v:020d}.json").exists():
            _delete_checkpoints_at(root, v)  # so that ours is written, not found
        before = DeltaTable(str(root)).snapshot()
        expected = _state(before, root)
        options: dict[str, Any] = {}
        if kind == "v2-uuid":
            options = {"fmt": "json", "sidecar_actions": 2} if i % 2 else {"sidecar_actions": 0}
        result = write_checkpoint(str(root), kind=kind, now_ms=NOW, **options)
        assert result.version == v and result.kind == kind and not result.already_existed
        assert result.num_add_files == before.num_files
        assert set(result.files) <= _log_names(root)
        lc = parse_last_checkpoint((root / LOG / "_last_checkpoint").read_bytes())
        assert lc.version == v and lc.checksum_valid is True
        assert lc.num_of_add_files == before.num_files and lc.size == result.num_actions
        assert lc.size_in_bytes == result.size_in_bytes
        _delete_commits_upto(root, v)
        after = DeltaTable(str(root)).snapshot()
        assert after.version == v and after.checkpoint_version == v
        assert set(after.segment.checkpoint.names) <= set(result.files)
        assert _state(after, root) == expected, f"{name}: {kind}"
        if theirs is not None:
            assert _rs_files(root) == theirs, f"{name}: deltalake reads {kind} differently"


def _key(path: str, dv: dict | None, root: Path) -> tuple[str, str | None]:
    return (_abs_key(path, root), dv_unique_id(dv) if dv and dv.get("storageType") else None)


def _state(snap, root: Path, now_ms: int = NOW) -> dict[str, Any]:
    """Everything a checkpoint must preserve, keyed so that path spellings compare equal."""
    files = {
        _key(r["path"], r["deletionVector"], root): r["size"]
        for r in snap.files.select(["path", "deletionVector", "size"]).to_pylist()
    }
    tombs = {
        _key(r["path"], r["deletionVector"], root)
        for r in snap.unexpired_tombstones(now_ms).select(["path", "deletionVector"]).to_pylist()
    }
    return {
        "files": files,
        "tombstones": tombs,
        "protocol": {k: v for k, v in snap.protocol.items() if v is not None},
        "metadata": _md(snap.metadata),
        "txns": {a: t.version for a, t in snap.txns.items()},
        "domains": {d: m.configuration for d, m in snap.domains.items()},
    }
