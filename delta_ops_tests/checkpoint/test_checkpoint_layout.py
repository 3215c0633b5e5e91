"""The checkpoint writer's layout: V2 checkpoints with and without sidecars, the default kind,
protocol feature columns, statistics columns (struct, JSON, typed `stats_parsed`), tombstone
expiry with the injected clock, and the features and requests it refuses."""

from __future__ import annotations

import json

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from delta_ops.errors import UnsupportedFeatureError
from delta_ops.maintenance.checkpoint import (
    InvalidCheckpointRequestError,
    write_checkpoint,
)
from delta_ops.protocol.last_checkpoint import parse_last_checkpoint
from delta_ops.storage import Storage
from delta_ops.table import DeltaTable
from delta_ops_tests.support.checkpoint_checks import (
    LOG,
    NOW,
    UNSUPPORTED,
    _copy,
    _delete_checkpoints_at,
    _log_names,
)
from delta_ops_tests.support.corpus import corpus_path

# ---------------------------------------------------------------------------------------------
# V2 layout, stats columns, tombstones, refusals


def test_v2_uuid_with_sidecars_layout(tmp_path):
    name = "kernel-defaults__kernel-pagination-v2-checkpoint-parquet"
    root = _copy(name, tmp_path / "t")
    snap = DeltaTable(str(root)).snapshot()
    existing = write_checkpoint(str(root), kind="v2-uuid", now_ms=NOW)
    assert existing.already_existed and len(existing.files) == 2  # Spark's, with its sidecar
    _delete_checkpoints_at(root, snap.version)
    result = write_checkpoint(str(root), kind="v2-uuid", fmt="json", sidecar_actions=2, now_ms=NOW)
    top, *sidecars = result.files
    assert top.startswith(f"{snap.version:020d}.checkpoint.") and top.endswith(".json")
    n_file_actions = snap.num_files + snap.unexpired_tombstones(NOW).num_rows
    assert len(sidecars) == -(-n_file_actions // 2)
    lines = [json.loads(x) for x in (root / LOG / top).read_text().splitlines()]
    assert sum("checkpointMetadata" in x for x in lines) == 1
    assert lines[0] == {"checkpointMetadata": {"version": snap.version}}
    assert not any("add" in x or "remove" in x for x in lines)  # all in sidecars
    assert sorted(x["sidecar"]["path"] for x in lines if "sidecar" in x) == sorted(
        s.split("/", 1)[1] for s in sidecars
    )
    for s in sidecars:
        t = pq.read_table(root / LOG / s)
        assert t.column_names == ["add", "remove"] and 1 <= t.num_rows <= 2
    lc = parse_last_checkpoint((root / LOG / "_last_checkpoint").read_bytes())
    assert lc.v2_checkpoint["path"] == top and lc.checksum_valid
    assert len(lc.v2_checkpoint["sidecarFiles"]) == len(sidecars)


def test_v2_embedded_parquet_has_no_sidecars(tmp_path):
    root = _copy("golden__v2-checkpoint-json", tmp_path / "t")
    _delete_checkpoints_at(root, 2)
    result = write_checkpoint(str(root), kind="v2-uuid", sidecar_actions=0, now_ms=NOW)
    assert len(result.files) == 1 and result.files[0].endswith(".parquet")
    t = pq.read_table(root / LOG / result.files[0])
    assert pc.sum(pc.is_valid(t.column("checkpointMetadata"))).as_py() == 1
    assert pc.sum(pc.is_valid(t.column("sidecar"))).as_py() == 0
    assert pc.sum(pc.is_valid(t.column("add"))).as_py() == result.num_add_files == 4


def test_default_kind_follows_checkpoint_policy(tmp_path):
    v2 = write_checkpoint(str(_copy("golden__v2-checkpoint-parquet", tmp_path / "a")), now_ms=NOW)
    assert v2.kind == "v2-uuid" and v2.already_existed  # Spark's v2 checkpoint is there
    classic = write_checkpoint(str(_copy("basic_append", tmp_path / "b")), now_ms=NOW)
    assert classic.kind == "classic" and classic.files == (
        "00000000000000000001.checkpoint.parquet",
    )


def test_protocol_feature_columns_follow_the_spec(tmp_path):
    for name, reader, writer in (
        ("basic_append", None, None),
        (
            "golden__dv-with-columnmapping",
            ["columnMapping", "deletionVectors"],
            ["columnMapping", "deletionVectors"],
        ),
    ):
        root = _copy(name, tmp_path / name)
        result = write_checkpoint(str(root), now_ms=NOW)
        t = pq.read_table(root / LOG / result.files[0])
        proto = t.schema.field("protocol").type
        assert {f.name for f in proto} >= {"readerFeatures", "writerFeatures"}
        (row,) = [r for r in t.column("protocol").to_pylist() if r]
        got = (row["readerFeatures"], row["writerFeatures"])
        assert got == (reader, writer) or tuple(map(sorted, got)) == (reader, writer)


def test_stats_struct_and_json_properties(tmp_path):
    root = _copy("golden__data-reader-partition-values", tmp_path / "t")
    meta = [json.loads(x) for x in (root / LOG / f"{0:020d}.json").read_text().splitlines()]
    md = next(o["metaData"] for o in meta if "metaData" in o)
    md["configuration"] = {
        "delta.checkpoint.writeStatsAsStruct": "true",
        "delta.checkpoint.writeStatsAsJson": "false",
    }
    Storage.for_uri(str(root)).put_if_absent(
        f"{LOG}/{1:020d}.json", orjson.dumps({"metaData": md}) + b"\n"
    )
    snap = DeltaTable(str(root)).snapshot()
    result = write_checkpoint(str(root), now_ms=NOW)
    t = pq.read_table(root / LOG / result.files[0])
    add_type = t.schema.field("add").type
    assert add_type.get_field_index("stats") < 0
    pv = add_type.field("partitionValues_parsed").type
    assert [f.name for f in pv] == md["partitionColumns"]
    assert pv.field("as_int").type == pa.int32() and pv.field("as_date").type == pa.date32()
    rows = [r for r in t.column("add").to_pylist() if r]
    by_path = {r["path"]: r for r in rows}
    for f in snap.files.to_pylist(maps_as_pydicts="strict"):
        parsed = by_path[f["path"]]["partitionValues_parsed"]
        raw = f["partitionValues"]
        assert (parsed["as_int"] is None) == (raw["as_int"] in (None, ""))
        if parsed["as_int"] is not None:
            assert str(parsed["as_int"]) == raw["as_int"]
            assert parsed["as_string"] == raw["as_string"]
        stats = json.loads(f["stats"]) if f["stats"] else None
        if stats:
            assert by_path[f["path"]]["stats_parsed"]["numRecords"] == stats["numRecords"]


def test_stats_parsed_types_are_typed(tmp_path):
    root = _copy("golden__data-skipping-basic-stats-all-types", tmp_path / "t")
    log = root / LOG
    meta = [json.loads(x) for x in (log / f"{0:020d}.json").read_text().splitlines()]
    md = next(o["metaData"] for o in meta if "metaData" in o)
    md["configuration"] = {
        **md.get("configuration", {}),
        "delta.checkpoint.writeStatsAsStruct": "true",
    }
    Storage.for_uri(str(root)).put_if_absent(
        f"{LOG}/{1:020d}.json", orjson.dumps({"metaData": md}) + b"\n"
    )
    result = write_checkpoint(str(root), now_ms=NOW)
    t = pq.read_table(log / result.files[0])
    (add,) = [r for r in t.column("add").to_pylist() if r]
    stats = json.loads(add["stats"])
    parsed = add["stats_parsed"]
    assert parsed["numRecords"] == stats["numRecords"]
    for col, value in stats["minValues"].items():
        got = parsed["minValues"][col]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert float(got) == pytest.approx(float(value)), col
        elif isinstance(value, str) and len(value) == 10:  # a date
            assert str(got) == value, col
        elif isinstance(value, str) and "T" not in value:
            assert got == value, col
    for col, value in stats["nullCount"].items():
        if isinstance(value, int):
            assert parsed["nullCount"][col] == value, col


def test_tombstones_expire_with_the_injected_clock(tmp_path):
    name = "golden__basic-with-inserts-deletes-checkpoint"
    snap = DeltaTable(str(corpus_path(name))).snapshot()
    times = sorted(snap.tombstones.column("deletionTimestamp").to_pylist())
    assert len(times) >= 2
    retention = int(snap.properties.deleted_file_retention.total_seconds() * 1000)
    cut = times[len(times) // 2]
    root = _copy(name, tmp_path / "t")
    _delete_checkpoints_at(root, snap.version)
    result = write_checkpoint(str(root), now_ms=cut + retention, kind="classic")
    t = pq.read_table(root / LOG / result.files[0])
    kept = [r["deletionTimestamp"] for r in t.column("remove").to_pylist() if r]
    assert sorted(kept) == [x for x in times if x > cut]
    assert 0 < len(kept) < len(times)


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_refuses_unsupported_features(name, tmp_path):
    root = _copy(name, tmp_path / "t")
    before = _log_names(root)
    with pytest.raises(UnsupportedFeatureError, match="cannot write a checkpoint"):
        write_checkpoint(str(root), now_ms=NOW)
    assert _log_names(root) == before


@pytest.mark.parametrize(
    "name,options,message",
    [
        (
            "golden__v2-checkpoint-json",
            {"kind": "multi-part"},
            "multi-part checkpoints are forbidden",
        ),
        ("basic_append", {"kind": "v2-uuid"}, "needs the v2Checkpoint table feature"),
        ("basic_append", {"kind": "classic", "fmt": "json"}, "only UUID-named V2"),
        ("golden__v2-checkpoint-json", {"kind": "v2-classic", "fmt": "json"}, "only UUID-named V2"),
        ("basic_append", {"parts": 1}, "at least 2 parts"),
        ("basic_append", {"kind": "classic", "parts": 3}, "multi-part checkpoints only"),
        ("basic_append", {"kind": "classic", "sidecar_actions": 5}, "V2 checkpoints only"),
        ("basic_append", {"kind": "bogus"}, "unknown checkpoint kind"),
        ("basic_append", {"fmt": "avro"}, "parquet or json"),
    ],
)
def test_invalid_requests_write_nothing(name, options, message, tmp_path):
    root = _copy(name, tmp_path / "t")
    before = _log_names(root)
    with pytest.raises(InvalidCheckpointRequestError, match=message):
        write_checkpoint(str(root), now_ms=NOW, **options)
    assert _log_names(root) == before
