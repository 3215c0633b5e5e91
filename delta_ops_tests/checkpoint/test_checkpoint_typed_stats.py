"""A checkpoint written after one that kept only typed statistics (`stats_parsed`, written
with `delta.checkpoint.writeStatsAsJson` off) carries those statistics on: as JSON `stats`
converted the way Spark writes them when the table asks for JSON, as `stats_parsed` when
it asks for the struct, in every kind of checkpoint, from a loaded and a streamed state.
The statistics are compared by meaning with the source checkpoint's typed ones (as
`maintenance.checksum.compare` compares JSON with typed statistics) and with what
`deltalake` reads before and after. The publish check refuses a checkpoint that drops
statistics its source had.
"""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from delta_ops.errors import CheckpointVerificationError
from delta_ops.maintenance.checkpoint import actions as act
from delta_ops.maintenance.checkpoint import write_checkpoint
from delta_ops.maintenance.checkpoint.verify import Expected, verify_file
from delta_ops.maintenance.checksum.compare import _json_as_typed
from delta_ops.protocol.crc import stats_meaning
from delta_ops.protocol.stats_json import stats_json
from delta_ops_tests.support.typed_stats import _data

NOW = 1_800_000_000_000
LOG = "_delta_log"
UTC = datetime.timezone.utc

#: (writeStatsAsJson, writeStatsAsStruct) of the table when we checkpoint it.
PROPERTIES = [(True, False), (False, True), (True, True)]
#: Every kind of checkpoint we write, as write_checkpoint options.
KINDS = {
    "classic": {"kind": "classic"},
    "multi-part": {"kind": "multi-part", "parts": 2},
    "v2-classic": {"kind": "v2-classic", "sidecar_actions": 2},
    "v2-uuid-sidecars": {"kind": "v2-uuid", "sidecar_actions": 1},
    "v2-uuid-embedded": {"kind": "v2-uuid", "sidecar_actions": 0},
    "v2-uuid-json": {"kind": "v2-uuid", "fmt": "json", "sidecar_actions": 0},
    "v2-uuid-json-sidecars": {"kind": "v2-uuid", "fmt": "json", "sidecar_actions": 2},
}


def _commit(root: Path, version: int, actions: list[dict]) -> None:
    data = b"".join(orjson.dumps(a) + b"\n" for a in actions)
    (root / LOG / f"{version:020d}.json").write_bytes(data)


def _struct_stats_only_table(root: Path, *, as_json: bool, as_struct: bool, v2: bool) -> int:
    """Versions 0-1 by deltalake with a checkpoint at 1 keeping typed statistics only;
    version 2 appends a file (JSON statistics in its commit); version 3 sets the
    checkpoint properties (and adds the v2Checkpoint feature when `v2`). Returns 3."""
    config = {
        "delta.checkpoint.writeStatsAsJson": "false",
        "delta.checkpoint.writeStatsAsStruct": "true",
    }
    write_deltalake(str(root), _data(), configuration=config)
    write_deltalake(str(root), _data().slice(1, 2), mode="append")
    DeltaTable(str(root)).create_checkpoint()
    checkpoint = root / LOG / f"{1:020d}.checkpoint.parquet"
    adds = [a for a in pq.read_table(checkpoint).column("add").to_pylist() if a]
    assert len(adds) == 2 and all(a.get("stats") is None and a["stats_parsed"] for a in adds)
    write_deltalake(str(root), _data().slice(0, 1), mode="append")
    first = [json.loads(x) for x in (root / LOG / f"{0:020d}.json").read_text().splitlines()]
    metadata = next(a["metaData"] for a in first if "metaData" in a)
    metadata["configuration"] = {
        "delta.checkpoint.writeStatsAsJson": str(as_json).lower(),
        "delta.checkpoint.writeStatsAsStruct": str(as_struct).lower(),
    }
    actions: list[dict] = [{"metaData": metadata}]
    if v2:
        actions.append({"protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["v2Checkpoint"],
            "writerFeatures": ["v2Checkpoint", "appendOnly", "invariants"],
        }})
    _commit(root, 3, actions)
    return 3


def _source_typed(root: Path) -> dict[str, tuple[pa.DataType, dict]]:
    """path -> (type, typed statistics) of the adds of deltalake's checkpoint."""
    t = pq.read_table(root / LOG / f"{1:020d}.checkpoint.parquet")
    add = t.column("add").combine_chunks()
    add = add.filter(pc.is_valid(add))
    typ = add.type.field("stats_parsed").type
    return {
        r["path"]: (typ, r["stats_parsed"]) for r in add.to_pylist() if r["stats_parsed"]
    }


def _rs_stats(root: Path) -> dict[str, dict]:
    """What deltalake reads for each live file: records, min, max and null counts."""
    adds = DeltaTable(str(root)).get_add_actions(flatten=True)
    adds = pa.table(adds) if not isinstance(adds, pa.Table) else adds
    rows = adds.to_pylist()
    out = {}
    for r in rows:
        out[r["path"]] = {
            k: v for k, v in r.items()
            if k == "num_records" or k.startswith(("min.", "max.", "null_count."))
        }
    return out


def _written_adds(root: Path, files: tuple[str, ...]) -> list[tuple[dict, bool]]:
    """Every add of the checkpoint written, and whether it sits in a JSON file."""
    adds: list[tuple[dict, bool]] = []
    for name in files:
        path = root / LOG / name
        if name.endswith(".json"):
            for line in path.read_text().splitlines():
                obj = json.loads(line)
                if obj.get("add"):
                    adds.append((obj["add"], True))
        else:
            t = pq.read_table(path)
            if "add" in t.column_names:
                adds.extend((a, False) for a in t.column("add").to_pylist() if a)
    return adds


def _only_our_checkpoint(root: Path, version: int, files: tuple[str, ...]) -> None:
    """Leave deltalake nothing but our checkpoint to read the table from."""
    keep = set(files) | {"_last_checkpoint"}
    for p in (root / LOG).iterdir():
        if p.is_file() and p.name not in keep:
            p.unlink()


#: How the state is read: loaded, streamed, or rebuilt by bucket.
MODES = {
    "loaded": {"stream_threshold": None, "rebuild": False},
    "streamed": {"stream_threshold": 0, "rebuild": False},
    "rebuilt": {"rebuild": True, "buckets": 2},
}


def _check(root: Path, version: int, options: dict, *, as_json: bool, as_struct: bool,
           mode: str) -> None:
    typed = _source_typed(root)
    before = _rs_stats(root)
    result = write_checkpoint(str(root), version=version, now_ms=NOW, **MODES[mode], **options)
    assert not result.already_existed
    adds = _written_adds(root, result.files)
    assert len(adds) == 3
    json_form = as_json or any(in_json for _, in_json in adds)
    for a, in_json in adds:
        has_json = a.get("stats") is not None
        has_struct = a.get("stats_parsed") is not None
        # The forms the table asks for, and only those (a JSON file can hold JSON only).
        assert has_json == (as_json or in_json), a["path"]
        assert has_struct == (as_struct and not in_json), a["path"]
        if a["path"] not in typed:
            continue  # the file appended after deltalake's checkpoint
        typ, expected = typed[a["path"]]
        if has_json:
            assert _json_as_typed(a["stats"], typ) == expected, a["path"]
        if has_struct:
            got = {k: v for k, v in a["stats_parsed"].items() if k in expected}
            assert stats_meaning(got) == stats_meaning(expected), a["path"]
    _only_our_checkpoint(root, version, result.files)
    after = _rs_stats(root)
    assert sorted(after) == sorted(before)
    differ = {
        (path, k): (before[path].get(k), after[path].get(k))
        for path in before
        for k in set(before[path]) | set(after[path])
        if before[path].get(k) != after[path].get(k)
        # Typed statistics bound no boolean (Spark's stats schema, deltalake's too): a
        # struct-only checkpoint leaves out the JSON's min/max of the boolean column.
        and not (not json_form and k in ("min.b", "max.b"))
    }
    assert not differ


#: A rebuilt state cannot be embedded in a JSON top-level file (refused by design).
CASES = [
    (kind, mode) for kind in KINDS for mode in MODES
    if not (mode == "rebuilt" and kind == "v2-uuid-json")
]


@pytest.mark.parametrize("as_json,as_struct", PROPERTIES, ids=["json", "struct", "both"])
@pytest.mark.parametrize("kind,mode", CASES)
def test_checkpoint_keeps_typed_only_statistics(tmp_path, kind, as_json, as_struct, mode):
    root = tmp_path / "t"
    v2 = kind.startswith("v2")
    version = _struct_stats_only_table(root, as_json=as_json, as_struct=as_struct, v2=v2)
    _check(root, version, KINDS[kind], as_json=as_json, as_struct=as_struct, mode=mode)


def test_json_is_written_as_spark_writes_it():
    """Spark's `stats` text (as in the corpus's Spark-written commits): keys in Spark's
    order, floats with a fraction, decimals at their scale, dates, timestamps with
    milliseconds and `Z` (none for timestamp_ntz), microseconds kept when present, null
    members and binary left out, strings escaped."""
    typ = pa.struct([
        ("numRecords", pa.int64()),
        ("nullCount", pa.struct([("a", pa.int64()), ("bin", pa.int64())])),
        ("minValues", pa.struct([
            ("a", pa.float64()), ("f", pa.float32()), ("dec", pa.decimal128(5, 3)),
            ("dt", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")), ("s", pa.string()), ("bin", pa.binary()),
            ("n", pa.int32()), ("nested", pa.struct([("x", pa.int64())])),
        ])),
        ("tightBounds", pa.bool_()),
    ])
    row = {
        "numRecords": 5,
        "nullCount": {"a": 0, "bin": 1},
        "minValues": {
            "a": 4.0, "f": 0.5, "dec": decimal.Decimal("10.000"),
            "dt": datetime.date(1970, 1, 5),
            "ts": datetime.datetime(1970, 1, 1, 4, tzinfo=UTC),
            "ntz": datetime.datetime(2024, 4, 2, 20, 58, 52, 292000),
            "s": 'a"b\\c\nd', "bin": b"\x00", "n": None, "nested": {"x": 1},
        },
        "tightBounds": True,
    }
    text = stats_json(pa.array([row, None], typ)).to_pylist()
    assert text == [
        '{"numRecords":5,"minValues":{"a":4.0,"f":0.5,"dec":10.000,"dt":"1970-01-05",'
        '"ts":"1970-01-01T04:00:00.000Z","ntz":"2024-04-02T20:58:52.292",'
        '"s":"a\\"b\\\\c\\nd","nested":{"x":1}},"nullCount":{"a":0,"bin":1},'
        '"tightBounds":true}',
        None,
    ]
    micro = pa.array([{"t": datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)}])
    assert stats_json(micro).to_pylist() == ['{"t":"1969-12-31T23:59:59.999999Z"}']
    assert json.loads(text[0])["minValues"]["s"] == row["minValues"]["s"]


def test_publish_check_refuses_a_checkpoint_that_drops_statistics(tmp_path):
    """A checkpoint file whose adds lost statistics that the live files had is not
    published: verification compares, file by file, that a file with statistics keeps
    them in some form."""
    root = tmp_path / "t"
    write_deltalake(str(root), _data())
    from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
    from delta_ops.maintenance.checkpoint.plan import plan_checkpoint
    from delta_ops.protocol.checkpoint_schema import classic_schema

    snap = load_snapshot(_storage(root), None)
    plan = plan_checkpoint(snap, now_ms=NOW)
    schema = classic_schema(plan.layout.add)
    files = snap.files
    assert files.column("stats").null_count == 0
    dropped = files.set_column(
        files.schema.get_field_index("stats"), "stats", pa.nulls(files.num_rows, pa.string())
    )
    expected = Expected(
        adds=files.select(["path", "size", "deletionVector", "stats"]),
        removes=plan.tombstones.select(["path", "deletionVector"]),
        non_file={},
    )

    def parquet(t: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, schema) as w:
            for b in act.file_action_batches(t, plan.tombstones, plan.layout, schema):
                w.write_batch(b)
        return sink.getvalue().to_pybytes()

    assert verify_file(parquet(files), "parquet", expected, table=str(root), version=0,
                       file="ok") == files.num_rows
    with pytest.raises(CheckpointVerificationError, match="statistics"):
        verify_file(parquet(dropped), "parquet", expected, table=str(root), version=0,
                    file="dropped")
    lines = b"".join(act.json_file_action_lines(dropped, plan.tombstones, plan.layout))
    with pytest.raises(CheckpointVerificationError, match="statistics"):
        verify_file(lines, "json", expected, table=str(root), version=0, file="dropped.json")


def _storage(root: Path):
    from delta_ops.storage import Storage

    return Storage.for_uri(str(root))


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "struct"])
def test_streamed_publish_check_refuses_dropped_statistics(tmp_path, as_json):
    """The streamed read-back (digest) refuses a file whose adds lost statistics too."""
    from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
    from delta_ops.maintenance.checkpoint.digest import Digest, compare, read_back
    from delta_ops.maintenance.checkpoint.plan import plan_checkpoint
    from delta_ops.protocol.checkpoint_schema import classic_schema

    root = tmp_path / "t"
    config = {
        "delta.checkpoint.writeStatsAsJson": str(as_json).lower(),
        "delta.checkpoint.writeStatsAsStruct": str(not as_json).lower(),
    }
    write_deltalake(str(root), _data(), configuration=config)
    write_deltalake(str(root), _data(), mode="append")
    snap = load_snapshot(_storage(root), None)
    plan = plan_checkpoint(snap, now_ms=NOW)
    schema = classic_schema(plan.layout.add)
    files = snap.files
    expected = Digest(stats=True)
    expected.add_table("add", files)
    keep_one = pa.array([files.column("stats")[0].as_py(), None], pa.string())
    for name, t in (
        ("ok.parquet", files),
        ("dropped.parquet", files.set_column(files.schema.get_field_index("stats"), "stats",
                                             keep_one)),
    ):
        with pq.ParquetWriter(str(tmp_path / name), schema) as w:
            for b in act.file_action_batches(t, plan.tombstones, plan.layout, schema):
                w.write_batch(b)
    ok = read_back(str(tmp_path / "ok.parquet"))
    assert ok.adds_with_stats == expected.adds_with_stats == 2
    assert compare(ok, expected, {}, table=str(root), version=1, file="ok") == 2
    dropped = read_back(str(tmp_path / "dropped.parquet"))
    assert dropped.adds_with_stats == 1
    with pytest.raises(CheckpointVerificationError, match="statistics were lost"):
        compare(dropped, expected, {}, table=str(root), version=1, file="dropped")


def test_source_check_refuses_a_state_that_lost_the_checkpoints_statistics(tmp_path):
    """Independently of the log reader: a loaded state whose files lack the statistics
    their checkpoint row holds (typed only here) is refused before anything is written;
    the state the writer uses (statistics filled from `stats_parsed`) passes."""
    from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
    from delta_ops.maintenance.checkpoint.typed_stats import check_source_stats, with_source_stats

    root = tmp_path / "t"
    _struct_stats_only_table(root, as_json=True, as_struct=False, v2=False)
    read = load_snapshot(_storage(root), None)
    assert read.files.column("stats").null_count == 2  # the reader keeps JSON only
    with pytest.raises(CheckpointVerificationError, match="2 live files have no statistics"):
        check_source_stats(read)
    filled = with_source_stats(read)
    assert filled.files.column("stats").null_count == 0
    check_source_stats(filled)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_checkpoint_with_both_forms_and_some_json_missing(tmp_path, mode):
    """A source checkpoint holding `stats` and `stats_parsed` where one add has JSON and
    the other only the struct: both keep their statistics (the JSON one as it was)."""
    root = tmp_path / "t"
    version = _struct_stats_only_table(root, as_json=True, as_struct=False, v2=False)
    path = root / LOG / f"{1:020d}.checkpoint.parquet"
    t = pq.read_table(path)
    add = t.column("add").combine_chunks()
    rows = add.to_pylist()
    first = next(i for i, r in enumerate(rows) if r)
    json_text = '{"numRecords":3,"minValues":{"l":10},"maxValues":{"l":30},"nullCount":{"l":0}}'
    stats = pa.array([json_text if i == first else None for i in range(len(add))], pa.string())
    fields = list(add.type)
    with_stats = pa.StructArray.from_arrays(
        [add.field(i) for i in range(len(fields))] + [stats],
        fields=fields + [pa.field("stats", pa.string())],
        mask=pc.is_null(add),
    )
    t = t.set_column(t.schema.get_field_index("add"), "add", with_stats)
    pq.write_table(t, path)
    typed = _source_typed(root)
    result = write_checkpoint(str(root), version=version, now_ms=NOW, **MODES[mode])
    adds = {a["path"]: a for a, _ in _written_adds(root, result.files)}
    kept = adds[rows[first]["path"]]["stats"]
    assert kept == json_text
    (other,) = [p for p in typed if p != rows[first]["path"]]
    assert _json_as_typed(adds[other]["stats"], typed[other][0]) == typed[other][1]


@pytest.mark.spark
def test_spark_reads_the_json_back(spark_engine):  # noqa: F811  (the fixture)
    """Spark's `from_json` with the statistics schema (how Delta Spark reads `stats`)
    reads the converted JSON back to the typed values: milliseconds and microseconds,
    timestamp_ntz, dates, decimals at their scale, NaN and infinities, escaped strings."""
    from pyspark.sql import functions as F

    typ = pa.struct([("numRecords", pa.int64()), ("minValues", pa.struct([
        ("ts", pa.timestamp("us", tz="UTC")), ("ntz", pa.timestamp("us")), ("dt", pa.date32()),
        ("dec", pa.decimal128(5, 3)), ("f", pa.float32()), ("d", pa.float64()),
        ("s", pa.string()),
    ]))])
    rows = [
        {"numRecords": 1, "minValues": {
            "ts": datetime.datetime(2020, 1, 1, 10, 0, 0, 123000, tzinfo=UTC),
            "ntz": datetime.datetime(2024, 4, 2, 20, 58, 52, 292000),
            "dt": datetime.date(2020, 1, 1), "dec": decimal.Decimal("10.000"), "f": 0.5,
            "d": 1.0, "s": 'a"\\\n',
        }},
        {"numRecords": 2, "minValues": {
            "ts": datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            "ntz": datetime.datetime(2024, 4, 2, 20, 58, 52, 292123),
            "dt": None, "dec": None, "f": float("nan"), "d": float("inf"), "s": None,
        }},
    ]
    texts = stats_json(pa.array(rows, typ)).to_pylist()
    schema = (
        "numRecords long, minValues struct<ts: timestamp, ntz: timestamp_ntz, dt: date, "
        "dec: decimal(5,3), f: float, d: double, s: string>"
    )
    session = spark_engine.session
    parsed = session.createDataFrame([(t,) for t in texts], "stats string").select(
        F.from_json("stats", schema).alias("p")
    )
    got = parsed.select(
        F.col("p.numRecords").alias("n"),
        F.unix_micros("p.minValues.ts").alias("ts"),
        F.date_format("p.minValues.ntz", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("ntz"),
        F.col("p.minValues.dt").alias("dt"),
        F.col("p.minValues.dec").alias("dec"),
        F.col("p.minValues.f").alias("f"),
        F.col("p.minValues.d").alias("d"),
        F.col("p.minValues.s").alias("s"),
    ).collect()
    first, second = (r.asDict() for r in got)
    assert first == {
        "n": 1, "ts": 1577872800123000, "ntz": "2024-04-02 20:58:52.292000",
        "dt": datetime.date(2020, 1, 1), "dec": decimal.Decimal("10.000"), "f": 0.5,
        "d": 1.0, "s": 'a"\\\n',
    }
    assert second["n"] == 2 and second["ts"] == -1
    assert second["ntz"] == "2024-04-02 20:58:52.292123"
    assert second["f"] != second["f"] and second["d"] == float("inf")
    assert second["dt"] is None and second["dec"] is None and second["s"] is None
