"""fsck of a table whose live files lie outside its root (a shallow clone's adds name its
source's files by absolute paths). Before, they were counted and not checked, so a clone
whose source VACUUM deleted one of them read as whole; now each of their directories is
listed once and a missing one is an error the repair leaves alone."""

from __future__ import annotations

import json

from delta_ops.maintenance.fsck import fsck
from delta_ops_tests.support.staged_tables import _add, _age, _data, _table


def _clone(tmp_path):
    source, clone = tmp_path / "src", tmp_path / "clone"
    _data(source, "a.parquet", "p=1/b.parquet", "gone.parquet")
    _table(source, ["a.parquet", "p=1/b.parquet", "gone.parquet"])
    _data(clone, "own.parquet")
    _table(clone, ["own.parquet", f"file://{source}/a.parquet", f"{source}/p=1/b.parquet",
                   f"file://{source}/gone.parquet"])
    _age(tmp_path)
    return source, clone


def test_a_clone_whose_source_file_is_gone_fails_naming_it(tmp_path):
    source, clone = _clone(tmp_path)
    whole = fsck(str(clone), leftovers=False)
    assert whole.ok and whole.problems == (), whole.problems
    (source / "gone.parquet").unlink()
    log = (clone / "_delta_log").iterdir()
    before = {p.name: p.read_bytes() for p in log}
    result = fsck(str(clone), leftovers=False, repair=True, confirm=True)
    found = [(p.code, p.severity, p.file) for p in result.problems]
    assert found == [("missing_external_file", "error", f"file://{source}/gone.parquet")]
    assert not result.ok and result.repair.entries == ()
    assert {p.name: p.read_bytes() for p in (clone / "_delta_log").iterdir()} == before


def test_a_directory_that_cannot_be_listed_is_a_warning(s3_server):
    """A live file where this run cannot list (here a bucket that does not exist on the
    store): named in a warning, never called missing."""
    from delta_ops.storage import Storage
    from delta_ops_tests.support.staged_tables import OLD_MS, PLAIN_PROTOCOL, SCHEMA

    uri = s3_server.fresh_uri("fsck-external")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    meta = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [], "configuration": {},
                         "createdTime": OLD_MS}}
    adds = [_add("own.parquet"), _add("s3://no-such-bucket-here/x/part-0.parquet")]
    storage.put_atomic(f"_delta_log/{0:020}.json", "".join(
        json.dumps(a) + "\n" for a in [PLAIN_PROTOCOL, meta, *adds]).encode())
    storage.put_atomic("own.parquet", b"data")
    result = fsck(uri, leftovers=False, storage_options=s3_server.storage_options)
    assert [(p.code, p.severity) for p in result.problems] == [("unchecked_external", "warning")]
    assert "s3://no-such-bucket-here/x" in result.problems[0].reason
    assert result.ok
