"""Our RESTORE against delta-spark's own: the corpus table
`golden__basic-with-inserts-overwrite-restore` holds, as version 3, Spark 3.5 / Delta 3.0's
`RESTORE TABLE ... TO VERSION AS OF 1`. On a copy without that commit, our restore of
version 1 must write the same commit: the same adds and removes (paths, sizes, stats,
`dataChange`), the same metaData and protocol, the same operation, parameters and metrics."""

from __future__ import annotations

import json
from pathlib import Path

from delta_ops.maintenance.restore import restore
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.histories import table_rows

NAME = "golden__basic-with-inserts-overwrite-restore"


def _actions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_kind(actions: list[dict], kind: str) -> list[dict]:
    return sorted((a[kind] for a in actions if kind in a), key=lambda b: b.get("path", ""))


def test_restore_writes_the_commit_spark_wrote(tmp_path: Path) -> None:
    root = copy_corpus_table(NAME, tmp_path / "t")
    log = root / "_delta_log"
    spark = _actions(log / "00000000000000000003.json")
    for name in ("00000000000000000003.json", "00000000000000000003.checkpoint.parquet",
                 "_last_checkpoint"):
        (log / name).unlink()
    storage = Storage.for_uri(str(root))
    want_rows = table_rows(storage, 1)

    result = restore(storage, version=1, dry_run=False)
    assert result.version == 3
    ours = _actions(log / "00000000000000000003.json")

    ours_ci, spark_ci = ours[0]["commitInfo"], spark[0]["commitInfo"]
    for key in ("operation", "operationParameters", "operationMetrics", "readVersion",
                "isBlindAppend"):
        assert ours_ci[key] == spark_ci[key], key
    assert _by_kind(ours, "metaData") == _by_kind(spark, "metaData")
    assert _by_kind(ours, "protocol") == _by_kind(spark, "protocol")
    assert _by_kind(ours, "add") == _by_kind(spark, "add")
    ignore = {"deletionTimestamp"}  # the time of each run
    assert [{k: v for k, v in r.items() if k not in ignore} for r in _by_kind(ours, "remove")] \
        == [{k: v for k, v in r.items() if k not in ignore} for r in _by_kind(spark, "remove")]
    assert table_rows(storage) == want_rows
