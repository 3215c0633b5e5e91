"""VACUUM's three sources of files agree: a listing, an inventory, and lite mode's log.

Over generated tables (`vacuum_tables.generate`: partitioned or not, awkward names with
spaces, `%` and unicode, deletion vector files, side checksums, `_`- and `.`-prefixed
directories, orphans), locally and on the moto S3 server: the plan from an inventory
(delta-spark's `USING INVENTORY` schema; an S3 Inventory report in CSV and Parquet) equals
the serial listing's plan, and so does lite mode's on tables without orphans (lite cannot
see files never committed). The expected deletions are also written out independently
(`GeneratedTable.garbage`). Files newer than the inventory, or not in it, are never
deleted; inventories that are stale, lack fields or name paths outside the root are
refused with the reason, and nothing is deleted.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.engine.local import LocalEngine
from delta_ops.errors import InventoryError
from delta_ops.maintenance.vacuum import vacuum
from delta_ops.maintenance.vacuum.inventory import InventorySource
from delta_ops.storage import Storage
from delta_ops_tests.support.vacuum_tables import (
    DAY_MS,
    HOUR_MS,
    GeneratedTable,
    generate,
    spark_inventory,
    walk_local,
    write_parquet,
    write_s3_report,
)

NOW_MS = 1_750_000_000_000
SHAPES = [
    # (seed, partitioned, awkward, dv)
    (1, False, False, False),
    (2, True, False, False),
    (3, False, True, False),
    (4, True, True, False),
    (5, False, False, True),
    (6, True, True, True),
    (7, False, True, True),
]


def _local_table(tmp_path: Path, seed: int, *, partitioned: bool, awkward: bool, dv: bool,
                 orphans: bool) -> tuple[Path, GeneratedTable]:
    name = "t b%25é日" if awkward else "t"
    root = tmp_path / f"{seed}" / name
    table = generate(seed, NOW_MS, partitioned=partitioned, awkward=awkward, dv=dv,
                     orphans=orphans)
    table.write_local(root)
    return root, table


def _serial_listing(uri, **kw):
    engine = LocalEngine(max_workers=1)
    try:
        return vacuum(uri, now_ms=NOW_MS, engine=engine, **kw)
    finally:
        engine.close()


def _inventory_of(root: Path, tmp_path: Path, *, form: str = "file:") -> str:
    listing = walk_local(root)
    qualified = f"file:{root}" if form == "file:" else f"file://{root}"
    path = tmp_path / f"inventory-{uuid.uuid4().hex[:8]}" / "part-0.parquet"
    write_parquet(spark_inventory(qualified, listing), path)
    return str(path.parent)


@pytest.mark.parametrize("seed,partitioned,awkward,dv", SHAPES)
def test_inventory_and_lite_plans_equal_the_serial_listing_locally(
    tmp_path, seed, partitioned, awkward, dv
):
    root, table = _local_table(tmp_path, seed, partitioned=partitioned, awkward=awkward,
                               dv=dv, orphans=True)
    listing = _serial_listing(str(root), dry_run=True)
    assert set(listing.files) == table.garbage
    assert not set(listing.files) & table.hidden
    inventory = _inventory_of(root, tmp_path, form="file:" if seed % 2 else "file://")
    source = InventorySource(inventory, inventory_time_ms=NOW_MS - HOUR_MS)
    from_inventory = vacuum(str(root), now_ms=NOW_MS, dry_run=True, inventory=source)
    assert from_inventory.files == listing.files
    assert from_inventory.size_bytes == listing.size_bytes
    assert from_inventory.directories == listing.directories
    # A real run from the inventory deletes exactly that, and nothing hidden.
    before = walk_local(root)
    done = vacuum(str(root), now_ms=NOW_MS, inventory=source, dry_run=False)
    assert done.files == listing.files
    after = walk_local(root)
    assert set(before) - set(after) == set(listing.files)
    assert table.hidden <= set(after)


@pytest.mark.parametrize("seed,partitioned,awkward,dv", SHAPES)
def test_lite_plan_equals_the_serial_listing_without_orphans(
    tmp_path, seed, partitioned, awkward, dv
):
    root, table = _local_table(tmp_path, seed, partitioned=partitioned, awkward=awkward,
                               dv=dv, orphans=False)
    listing = _serial_listing(str(root), dry_run=True)
    assert set(listing.files) == table.garbage
    lite = vacuum(str(root), now_ms=NOW_MS, dry_run=True, lite=True)
    assert lite.files == listing.files
    assert lite.size_bytes == listing.size_bytes
    done = vacuum(str(root), now_ms=NOW_MS, lite=True, dry_run=False)
    assert done.files == listing.files
    assert not set(done.files) & set(walk_local(root))


def test_files_not_in_the_inventory_or_newer_than_it_are_never_deleted(tmp_path):
    root, table = _local_table(tmp_path, 11, partitioned=False, awkward=True, dv=True,
                               orphans=True)
    listing = walk_local(root)
    late_orphan = "late orphan.parquet"  # copied in with an old time after the inventory
    inventory = spark_inventory(f"file:{root}", listing)
    (root / late_orphan).write_bytes(b"late")
    import os

    old = NOW_MS - 30 * DAY_MS
    os.utime(root / late_orphan, ns=(old * 1_000_000, old * 1_000_000))
    # A row dated after the inventory was made (it cannot stand for what it names).
    newer = sorted(table.orphans)[0]
    created = NOW_MS - 2 * HOUR_MS
    rows = inventory.to_pylist()
    for r in rows:
        if r["path"].endswith("/" + newer):
            r["modificationTime"] = created + 1
    # A file the inventory names that is gone since: not in the plan, no error.
    gone = sorted(table.orphans)[1]
    (root / gone).unlink()
    import pyarrow as pa

    from delta_ops_tests.support.vacuum_tables import INVENTORY_SCHEMA

    path = write_parquet(pa.Table.from_pylist(rows, schema=INVENTORY_SCHEMA),
                         tmp_path / "inv" / "x.parquet")
    source = InventorySource(str(path), inventory_time_ms=created)
    full = _serial_listing(str(root), dry_run=True)
    assert late_orphan in full.files and newer in full.files
    got = vacuum(str(root), now_ms=NOW_MS, inventory=source, dry_run=False)
    assert set(got.files) == set(full.files) - {late_orphan, newer}
    assert gone not in got.files
    assert (root / late_orphan).exists() and (root / newer).exists()
    text = " ".join(got.messages)
    assert "modified after the inventory was made" in text
    assert "no longer exist" in text


def _refused(root: Path, source: InventorySource, match: str) -> None:
    before = walk_local(root)
    with pytest.raises(InventoryError, match=match):
        vacuum(str(root), now_ms=NOW_MS, inventory=source, dry_run=False)
    assert walk_local(root) == before


def test_stale_inventory_is_refused_with_the_reason(tmp_path):
    root, _ = _local_table(tmp_path, 12, partitioned=True, awkward=False, dv=False,
                           orphans=True)
    inventory = _inventory_of(root, tmp_path)
    stale = NOW_MS - 8 * DAY_MS  # older than the 7-day retention window
    _refused(root, InventorySource(inventory, inventory_time_ms=stale),
             "older than the retention window")
    _refused(root, InventorySource(inventory, inventory_time_ms=NOW_MS + DAY_MS),
             "after now")
    # Without --inventory-time the files' own (old) modification time dates it: stale.
    import os

    for p in Path(inventory).iterdir():
        os.utime(p, ns=(stale * 1_000_000, stale * 1_000_000))
    _refused(root, InventorySource(inventory), "older than the retention window")


def test_inventory_lacking_fields_is_refused_with_the_reason(tmp_path):
    root, _ = _local_table(tmp_path, 13, partitioned=False, awkward=False, dv=False,
                           orphans=True)
    table = spark_inventory(f"file:{root}", walk_local(root))
    for missing in ("isDir", "modificationTime", "length", "path"):
        path = write_parquet(table.drop_columns([missing]),
                             tmp_path / f"no-{missing}" / "x.parquet")
        _refused(root, InventorySource(str(path), inventory_time_ms=NOW_MS - HOUR_MS),
                 f"{missing} .* is missing")
    wrong = table.set_column(1, "length", table.column("length").cast("string"))
    path = write_parquet(wrong, tmp_path / "wrong" / "x.parquet")
    _refused(root, InventorySource(str(path), inventory_time_ms=NOW_MS - HOUR_MS),
             "length is string, not int64")


def test_inventory_naming_paths_outside_the_root_is_refused(tmp_path):
    root, _ = _local_table(tmp_path, 14, partitioned=False, awkward=False, dv=False,
                           orphans=True)
    listing = walk_local(root)
    good = spark_inventory(f"file:{root}", listing).to_pylist()
    import pyarrow as pa

    from delta_ops_tests.support.vacuum_tables import INVENTORY_SCHEMA

    cases = {
        "sibling": f"file:{root.parent}/other/part.parquet",
        "prefix": f"file:{root}x/part.parquet",
        "dotdot": f"file:{root}/sub/../../escape.parquet",
        "s3": "s3://bucket/t/part.parquet",
    }
    for name, bad in cases.items():
        rows = good + [{"path": bad, "length": 1, "isDir": False,
                        "modificationTime": NOW_MS - 30 * DAY_MS}]
        path = write_parquet(pa.Table.from_pylist(rows, schema=INVENTORY_SCHEMA),
                             tmp_path / f"outside-{name}" / "x.parquet")
        _refused(root, InventorySource(str(path), inventory_time_ms=NOW_MS - HOUR_MS),
                 "not a file below the table root")
    # An inventory of another table altogether: nothing below this root.
    other = spark_inventory(f"file:{root.parent}/elsewhere", listing)
    path = write_parquet(other, tmp_path / "elsewhere" / "x.parquet")
    _refused(root, InventorySource(str(path), inventory_time_ms=NOW_MS - HOUR_MS),
             "not a file below the table root")


def test_a_delta_table_inventory_is_read_through_its_log(tmp_path):
    """delta-spark's USING INVENTORY takes a Delta table: its live files are the listing."""
    import deltalake

    root, table = _local_table(tmp_path, 15, partitioned=True, awkward=True, dv=False,
                               orphans=True)
    inv_uri = tmp_path / "inventory-table"
    deltalake.write_deltalake(str(inv_uri), spark_inventory(f"file:{root}", walk_local(root)))
    got = vacuum(str(root), now_ms=NOW_MS, dry_run=True, inventory=InventorySource(
        str(inv_uri), inventory_time_ms=NOW_MS - HOUR_MS))
    assert set(got.files) == table.garbage


# --------------------------------------------------------------------------------------
# On S3 (moto): an S3 Inventory report, CSV and Parquet
# --------------------------------------------------------------------------------------


def _s3_rows(server, prefix: str) -> list[tuple[str, str, int, int]]:
    client = server.client()
    rows = []
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=server.bucket, Prefix=prefix
    ):
        for obj in page.get("Contents", []):
            rows.append((server.bucket, obj["Key"], obj["Size"],
                         int(obj["LastModified"].timestamp() * 1000)))
    return rows


@pytest.mark.parametrize("fmt", ["CSV", "Parquet"])
@pytest.mark.parametrize("seed,partitioned,awkward,dv", [SHAPES[1], SHAPES[5], SHAPES[6]])
def test_s3_report_and_lite_plans_equal_the_serial_listing_on_s3(
    s3_server, fmt, seed, partitioned, awkward, dv
):
    # Object times are the server's (now): the clock moves 30 days ahead instead.
    now = int(time.time() * 1000) + 30 * DAY_MS
    uri = s3_server.fresh_uri("t b%é" if awkward else "t")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    table = generate(seed, now, partitioned=partitioned, awkward=awkward, dv=dv,
                     orphans=True)
    del table.files["young orphan.parquet"]  # every object is as old as the others here
    table.write_storage(storage)
    prefix = uri.split(f"{s3_server.bucket}/", 1)[1] + "/"
    rows = _s3_rows(s3_server, prefix)
    # Another table in the same bucket: a bucket-wide report names it too (skipped).
    rows.append((s3_server.bucket, "other-table/part-0.parquet", 5, rows[0][3]))
    report = Storage.for_uri(
        f"s3://{s3_server.bucket}/inventory/{uuid.uuid4().hex[:8]}", s3_server.storage_options
    )
    manifest = write_s3_report(report, source_bucket=s3_server.bucket,
                               dest_bucket=s3_server.bucket, rows=rows, fmt=fmt,
                               created_ms=now - HOUR_MS)
    engine = LocalEngine(max_workers=1)
    try:
        listing = vacuum(storage, now_ms=now, dry_run=True, engine=engine)
    finally:
        engine.close()
    assert set(listing.files) == table.garbage
    from_report = vacuum(storage, now_ms=now, dry_run=True, inventory=manifest)
    assert from_report.files == listing.files
    assert from_report.size_bytes == listing.size_bytes
    # A file written after the report: the listing would delete it, the report never does.
    late = "late orphan %.parquet"
    storage.put_atomic(late, b"late")
    assert late in vacuum(storage, now_ms=now, dry_run=True).files
    assert vacuum(storage, now_ms=now, dry_run=True, inventory=manifest).files == listing.files
    assert any("outside the table root were skipped" in m for m in from_report.messages)
    # Lite on the same table sees the tombstoned files: the listing's plan less the orphans.
    lite = vacuum(storage, now_ms=now, dry_run=True, lite=True)
    assert set(lite.files) == set(listing.files) - table.orphans
    done = vacuum(storage, now_ms=now, inventory=manifest, dry_run=False)
    assert done.files == listing.files
    left = {key[len(prefix):] for _b, key, _s, _m in _s3_rows(s3_server, prefix)}
    assert not left & set(listing.files)
    assert table.hidden <= left and late in left


def test_s3_report_refusals(s3_server):
    now = int(time.time() * 1000) + 30 * DAY_MS
    uri = s3_server.fresh_uri("t")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    table = generate(21, now, partitioned=False, awkward=False, dv=False, orphans=True)
    table.write_storage(storage)
    prefix = uri.split(f"{s3_server.bucket}/", 1)[1] + "/"
    rows = _s3_rows(s3_server, prefix)

    def report(**kw) -> str:
        store = Storage.for_uri(
            f"s3://{s3_server.bucket}/inventory/{uuid.uuid4().hex[:8]}",
            s3_server.storage_options,
        )
        args = {"source_bucket": s3_server.bucket, "dest_bucket": s3_server.bucket,
                "rows": rows, "created_ms": now - HOUR_MS} | kw
        return write_s3_report(store, **args)

    def refused(manifest: str, match: str) -> None:
        with pytest.raises(InventoryError, match=match):
            vacuum(storage, now_ms=now, inventory=manifest, dry_run=False)

    refused(report(created_ms=now - 8 * DAY_MS), "older than the retention window")
    refused(report(schema_fields=("Bucket", "Key", "LastModifiedDate")), "lacks the field.*Size")
    refused(report(schema_fields=("Bucket", "Key", "Size"), fmt="Parquet"),
            "LastModifiedDate")
    refused(report(source_bucket="another-bucket"), "outside the table root")
    refused(report(rows=[*rows, ("another-bucket", f"{prefix}x.parquet", 1, rows[0][3])]),
            "outside the table's bucket")
    refused(report(rows=[*rows, (s3_server.bucket, f"{prefix}a//b.parquet", 1, rows[0][3])]),
            "empty or dot segments")
    # Nothing was deleted by any of them.
    assert len(_s3_rows(s3_server, prefix)) == len(rows)


def test_lite_and_an_inventory_exclude_each_other(tmp_path):
    root, _ = _local_table(tmp_path, 16, partitioned=False, awkward=False, dv=False,
                           orphans=False)
    inventory = _inventory_of(root, tmp_path)
    with pytest.raises(ValueError, match="not both"):
        vacuum(str(root), now_ms=NOW_MS, lite=True, inventory=inventory, dry_run=True)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), partitioned=st.booleans(), awkward=st.booleans(),
       dv=st.booleans(), orphans=st.booleans())
def test_property_every_source_plans_what_the_listing_plans(
    tmp_path_factory, seed, partitioned, awkward, dv, orphans
):
    tmp = tmp_path_factory.mktemp("prop")
    root, table = _local_table(tmp, seed, partitioned=partitioned, awkward=awkward, dv=dv,
                               orphans=orphans)
    listing = _serial_listing(str(root), dry_run=True)
    assert set(listing.files) == table.garbage
    source = InventorySource(_inventory_of(root, tmp), inventory_time_ms=NOW_MS - HOUR_MS)
    assert vacuum(str(root), now_ms=NOW_MS, dry_run=True, inventory=source).files == (
        listing.files
    )
    lite = vacuum(str(root), now_ms=NOW_MS, dry_run=True, lite=True)
    assert set(lite.files) == set(listing.files) - table.orphans
