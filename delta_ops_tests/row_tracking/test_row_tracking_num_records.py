"""The row-tracking backfill records the row counts it used (issue 13, item 3).

For every corpus table whose live adds lack `numRecords` in their statistics, the backfill
counts rows from Parquet footers. Every backfilled add must then carry `baseRowId`,
`defaultRowCommitVersion` and `numRecords` equal to the footer's row count, and the ranges
`[baseRowId, baseRowId + numRecords)` must be disjoint and below the high-water mark: checked
from the log alone, through the independent oracle replay (no delta_ops reader), with the
footers read by pyarrow directly. A table the backfill cannot finish (a data file is gone, the
log is broken) is refused with nothing written.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from delta_ops.commit.row_ids import stats_with_num_records
from delta_ops.errors import DeltaOpsError
from delta_ops.maintenance.row_tracking import backfill_row_tracking
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path
from delta_ops_tests.support.oracle import _abs_key, oracle_replay

NO_WAIT = {"sleep": lambda s: None}
#: What a backfill here takes: no waits, and the protocol upgrade confirmed.
BACKFILL = {**NO_WAIT, "confirm_protocol_upgrade": True}


def _lacks_count(add: dict) -> bool:
    stats = add.get("stats")
    if not stats:
        return True
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return True
    return not isinstance(value, int) or isinstance(value, bool)


@cache
def tables_without_counts() -> tuple[str, ...]:
    """Corpus tables (as the oracle reads them) with a live add lacking numRecords."""
    out = []
    for name in all_corpus_tables():
        try:
            state = oracle_replay(corpus_path(name))
        except (ValueError, KeyError, OSError):
            continue  # the oracle cannot read it either: covered by the broken-table tests
        if any(_lacks_count(a) for a in state.files.values()):
            out.append(name)
    return tuple(out)


def test_the_corpus_has_tables_without_counts():
    assert len(tables_without_counts()) >= 30


def _footer_rows(root: Path, path: str) -> int | None:
    location = Path(_abs_key(path, root))
    if not location.is_file():
        return None
    return pq.ParquetFile(location).metadata.num_rows


def _log_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in (root / "_delta_log").rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("name", tables_without_counts())
def test_backfill_writes_the_footer_counts(table_copy, name):
    root = table_copy(name)
    before = oracle_replay(root)
    footers = {k: _footer_rows(root, a["path"]) for k, a in before.files.items()}
    log_before = _log_bytes(root)
    if any(n is None for n in footers.values()):
        # A file without stats whose data file is gone cannot be counted: refused, untouched.
        with pytest.raises(DeltaOpsError):
            backfill_row_tracking(Storage.for_uri(str(root)), batch_size=2, **BACKFILL)
        assert _log_bytes(root) == log_before
        return
    try:
        backfill_row_tracking(Storage.for_uri(str(root)), batch_size=2, **BACKFILL)
    except DeltaOpsError as exc:
        # Refused (a protocol the backfill may not write, a broken log): nothing written.
        assert _log_bytes(root) == log_before, exc
        return
    after = oracle_replay(root)
    assert set(after.files) == set(before.files)
    ranges = []
    for key, add in after.files.items():
        stats = json.loads(add["stats"])
        assert stats["numRecords"] == footers[key], add["path"]
        old = before.files[key].get("stats")
        if old and not _lacks_count(before.files[key]):
            assert add["stats"] == old  # statistics that had a count are left as they were
        elif old:
            # Merged: every field that was there is still there, unchanged.
            old_obj = json.loads(old) if old.strip().startswith("{") else {}
            assert {k: v for k, v in stats.items() if k != "numRecords"} == {
                k: v for k, v in old_obj.items() if k != "numRecords"
            }
        assert isinstance(add["baseRowId"], int) and add["baseRowId"] >= 0
        assert isinstance(add["defaultRowCommitVersion"], int)
        ranges.append((add["baseRowId"], add["baseRowId"] + stats["numRecords"]))
    ranges.sort()
    assert all(end <= start for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False))
    mark = json.loads(after.domains["delta.rowTracking"])["rowIdHighWaterMark"]
    assert all(end - 1 <= mark for _, end in ranges)


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        (None, '{"numRecords":7}'),
        ("", '{"numRecords":7}'),
        ("{}", '{"numRecords":7}'),
        ("not json", '{"numRecords":7}'),
        ('{"minValues":{"a":1.0E10},"nullCount":{"a":0}}',
         '{"numRecords":7,"minValues":{"a":1.0E10},"nullCount":{"a":0}}'),
        ('{"numRecords":null,"tightBounds":true}', '{"numRecords":7,"tightBounds":true}'),
        ('{"numRecords":7,"minValues":{}}', '{"numRecords":7,"minValues":{}}'),
    ],
)
def test_stats_with_num_records_keeps_other_fields_byte_for_byte(stats, expected):
    assert stats_with_num_records(stats, 7) == expected
    assert json.loads(stats_with_num_records(stats, 7))["numRecords"] == 7


def test_a_footer_that_does_not_read_is_named(table_copy):
    # Only Arrow's message came back ("Parquet magic bytes not found"): which file of the
    # table was left to guess.
    from delta_ops.errors import StorageError

    name = tables_without_counts()[0]
    root = table_copy(name)
    state = oracle_replay(root)
    lacking = sorted(a["path"] for a in state.files.values() if _lacks_count(a))
    victim = Path(_abs_key(lacking[-1], root))
    if not victim.is_file():
        pytest.fail(f"{name}: {victim} should exist")
    victim.write_bytes(b"garbage-not-parquet")
    log_before = _log_bytes(root)
    with pytest.raises(StorageError) as info:
        backfill_row_tracking(Storage.for_uri(str(root)), batch_size=2, **BACKFILL)
    assert "Parquet footer cannot be read" in info.value.reason
    assert info.value.file is not None and info.value.file.endswith(victim.name)
    assert _log_bytes(root) == log_before
