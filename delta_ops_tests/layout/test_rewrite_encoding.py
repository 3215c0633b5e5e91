"""The rewrite's encoding choice (`delta_ops.layout.dictionaries.DictionaryChoice`) and the
CLI's Arrow pool (`delta_ops.cli._arrow_allocator`).

A column whose inputs show it mostly distinct, with dictionaries that together pass
pyarrow's 1 MiB dictionary page limit, is written without a dictionary; a column of few
values keeps one; a small bin keeps pyarrow's default everywhere; materialized row IDs are
never dictionary-encoded. Inputs come from pyarrow (a dictionary page per column, filled
to the limit on large files) and from Spark's parquet-mr (no dictionary page on a distinct
column). The values read back are the same either way, by deltalake too.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_ops.commit import create_table
from delta_ops.layout.run import run_layout
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT
from delta_ops_tests.support.layout_tables import our_rows

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string()), ("cat", pa.string()),
                    ("n", pa.int32())])


def _table(root, files: int, rows: int, configuration: dict[str, str] | None = None,
           ) -> Storage:
    """`files` files of `rows` rows: `id` and `value` distinct (shuffled), `cat` five values,
    `n` ten values; written by pyarrow with its defaults (every column dictionary-encoded
    in the inputs, as most writers do)."""
    rng = random.Random(7)
    ids = list(range(files * rows))
    rng.shuffle(ids)
    adds = []
    for i in range(files):
        chunk = ids[i * rows:(i + 1) * rows]
        data = pa.table({
            "id": pa.array(chunk, pa.int64()),
            "value": [f"{v:012x}-{rng.getrandbits(40):010x}" for v in chunk],
            "cat": [("north", "south", "east", "west", "")[v % 5] for v in chunk],
            "n": pa.array([v % 10 for v in chunk], pa.int32()),
        })
        rel = f"part-{i:05d}.snappy.parquet"
        pq.write_table(data, root / rel)
        adds.append({"path": rel, "partitionValues": {}, "size": (root / rel).stat().st_size,
                     "modificationTime": 1_700_000_000_000, "dataChange": True,
                     "stats": json.dumps({"numRecords": rows})})
    storage = Storage.for_uri(str(root))
    create_table(storage, SCHEMA, [], configuration or {}, adds=adds,
                 clock=lambda: 1_700_000_000_000)
    return storage


def _dictionary_pages(root, path: str) -> dict[str, bool]:
    md = pq.ParquetFile(root / path).metadata
    out: dict[str, bool] = {}
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(g).column(c)
            out[col.path_in_schema] = out.get(col.path_in_schema, True) and \
                col.has_dictionary_page
    return out


def _rows(root) -> list[tuple]:
    t = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in SCHEMA.names), strict=True))


def _optimized(root, storage: Storage) -> dict[str, bool]:
    """Optimize into one file; deltalake and our reader read the same rows as before
    (stable row IDs and commit versions included). The new file's dictionary pages."""
    before, ours_before = _rows(root), our_rows(storage)
    result = run_layout(storage, "optimize", target_size="1gb", dry_run=False)
    assert result.files_added == 1
    assert _rows(root) == before
    assert our_rows(storage) == ours_before
    (path,) = load_snapshot(storage).files.column("path").to_pylist()
    return _dictionary_pages(root, path)


def test_distinct_columns_go_without_a_dictionary_and_the_rows_stay(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    storage = _table(root, files=12, rows=40_000)
    # id and value: 480,000 distinct values, dictionaries of 12 x 320 KB and more in the
    # inputs. cat and n: a handful of values, a dictionary page of a few bytes.
    assert _optimized(root, storage) == {"id": False, "value": False, "cat": True,
                                         "n": True}
    add = load_snapshot(storage).files.to_pylist()[0]
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 480_000
    assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (0, 479_999)


def test_inputs_whose_dictionaries_filled_up_count_as_distinct(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    # 150,000 distinct values a file: pyarrow's writer filled a 1 MiB dictionary and went
    # on in plain pages, so the dictionary page is a small share of the chunk.
    storage = _table(root, files=3, rows=150_000)
    md = pq.ParquetFile(root / "part-00000.snappy.parquet").metadata.row_group(0)
    value = next(md.column(c) for c in range(md.num_columns)
                 if md.column(c).path_in_schema == "value")
    page = value.data_page_offset - value.dictionary_page_offset
    assert page < 0.5 * value.total_compressed_size  # not the "mostly dictionary" shape
    assert _optimized(root, storage) == {"id": False, "value": False, "cat": True,
                                         "n": True}


def test_a_small_bin_keeps_every_dictionary(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    # Distinct columns again, but their dictionaries together stay under 1 MiB: pyarrow's
    # default (every column dictionary-encoded) is kept.
    storage = _table(root, files=3, rows=2_000)
    assert _optimized(root, storage) == {"id": True, "value": True, "cat": True, "n": True}


def test_materialized_row_ids_go_without_a_dictionary(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    storage = _table(root, files=3, rows=2_000,
                     configuration={"delta.enableRowTracking": "true"})
    config = load_snapshot(storage).metadata.configuration
    row_id = config["delta.rowTracking.materializedRowIdColumnName"]
    version = config["delta.rowTracking.materializedRowCommitVersionColumnName"]
    pages = _optimized(root, storage)
    assert pages[row_id] is False  # one distinct value a row
    assert pages[version] is True and pages["cat"] is True


@pytest.mark.spark
def test_a_table_spark_wrote_keeps_dictionaries_only_where_spark_had_them(spark_engine,
                                                                          tmp_path):
    # parquet-mr (Spark's writer) drops the dictionary of a distinct column on its first
    # page: no dictionary page, plain encodings. Its few-valued columns keep one.
    root = tmp_path / "t"
    (spark_engine.session.range(0, 450_000)
     .selectExpr("id", "sha2(cast(id as string), 256) as value",
                 "cast(id % 5 as string) as cat", "cast(id % 10 as int) as n")
     .repartition(3).write.parquet(str(root)))
    adds = []
    for f in sorted(root.glob("*.parquet")):
        md = pq.ParquetFile(f).metadata
        encodings = {md.row_group(0).column(c).path_in_schema: md.row_group(0).column(c)
                     for c in range(md.num_columns)}
        assert not encodings["id"].has_dictionary_page and encodings["cat"].has_dictionary_page
        adds.append({"path": f.name, "partitionValues": {}, "size": f.stat().st_size,
                     "modificationTime": 1_700_000_000_000, "dataChange": True,
                     "stats": json.dumps({"numRecords": md.num_rows})})
    storage = Storage.for_uri(str(root))
    create_table(storage, SCHEMA, [], adds=adds, clock=lambda: 1_700_000_000_000)
    assert _optimized(root, storage) == {"id": False, "value": False, "cat": True,
                                         "n": True}


def _pool_of(args: list[str], env: dict[str, str]) -> str:
    """The Arrow pool a `delta-ops` process with these arguments gets (the console script's
    start: `cli.run` chooses the pool before anything imports pyarrow)."""
    code = ("import sys; from delta_ops import cli; cli._arrow_allocator(); "
            "import pyarrow; print(pyarrow.default_memory_pool().backend_name)")
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True,
                         capture_output=True, text=True, cwd=REPO_ROOT)
    assert out.stderr == ""
    return out.stdout.strip()


def test_commands_get_jemalloc_unless_the_user_chose_a_pool():
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    if "jemalloc" not in pa.supported_memory_backends():
        # A pyarrow built without it: the variable stays unset, Arrow's default is used.
        assert _pool_of(["optimize", "t"], env) == pa.default_memory_pool().backend_name
        return
    assert _pool_of(["optimize", "t"], env) == "jemalloc"
    assert _pool_of(["purge", "t"], env) == "jemalloc"
    assert _pool_of(["vacuum", "t"], env) == "jemalloc"  # a log command as well
    assert _pool_of(["optimize", "t"], {**env, "ARROW_DEFAULT_MEMORY_POOL": "system"}) == \
        "system"
