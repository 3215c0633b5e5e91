"""fsck on the moto S3 server: a hurt table (objects deleted, a DV object corrupted) is found
and repaired; and a listing the store refuses (403 AccessDenied, through the S3 proxy) is a
refusal of the check and of the repair, never "missing": nothing is committed."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import deltalake
import pytest

from delta_ops.errors import StorageError
from delta_ops.log import load_snapshot
from delta_ops.maintenance.fsck import fsck
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import corpus_path
from delta_ops_tests.support.s3_proxy import S3Proxy

pytestmark = pytest.mark.s3

PARTITIONED = "golden__dv-partitioned-with-checkpoint"


def _upload(s3_server, name: str) -> tuple[str, str]:
    """Upload a corpus table to a fresh location; its URI and key prefix."""
    uri = s3_server.fresh_uri("fsck")
    prefix = uri.split("/", 3)[3]
    client = s3_server.client()
    local = corpus_path(name)
    for path in sorted(Path(local).rglob("*")):
        if path.is_file():
            client.upload_file(str(path), s3_server.bucket,
                               f"{prefix}/{path.relative_to(local).as_posix()}")
    return uri, prefix


def _log_keys(s3_server, prefix: str) -> list[str]:
    found = s3_server.client().list_objects_v2(
        Bucket=s3_server.bucket, Prefix=f"{prefix}/_delta_log/")
    return sorted(o["Key"] for o in found.get("Contents", []))


def test_hurt_table_on_s3_is_found_and_repaired(s3_server):
    uri, prefix = _upload(s3_server, PARTITIONED)
    opts = s3_server.storage_options
    rows = load_snapshot(Storage.for_uri(uri, opts)).files.to_pylist()
    plain = sorted(unquote(r["path"]) for r in rows if not r["deletionVector"])
    dv_rows = [r for r in rows if r["deletionVector"]]
    dv = DeletionVectorDescriptor.from_dict(dv_rows[0]["deletionVector"]).relative_path()
    users = {unquote(r["path"]) for r in dv_rows
             if DeletionVectorDescriptor.from_dict(r["deletionVector"]).relative_path() == dv}
    client = s3_server.client()
    client.delete_object(Bucket=s3_server.bucket, Key=f"{prefix}/{plain[0]}")
    client.delete_object(Bucket=s3_server.bucket, Key=f"{prefix}/{dv}")

    result = fsck(uri, storage_options=opts, leftovers=False)
    assert {(p.code, p.file, p.data_file) for p in result.problems} == {
        ("missing_file", plain[0], None), *(("missing_dv", dv, u) for u in users)}

    repaired = fsck(uri, storage_options=opts, leftovers=False, repair=True, confirm=True)
    assert {e.key for e in repaired.repair.entries} == {plain[0], *users}
    assert repaired.repair.version == result.version + 1
    again = fsck(uri, storage_options=opts)
    assert again.ok
    table = deltalake.DeltaTable(uri, storage_options=s3_server.object_store_options)
    assert table.version() == repaired.repair.version
    live = {unquote(r["path"]) for r in load_snapshot(Storage.for_uri(uri, opts)).files.to_pylist()}
    assert {unquote(u.split(f"{prefix}/", 1)[1]) for u in table.file_uris()} == live
    assert live == {unquote(r["path"]) for r in rows} - {plain[0], *users}


def test_listing_refused_by_the_store_refuses_the_repair(s3_server):
    uri, prefix = _upload(s3_server, PARTITIONED)
    rows = load_snapshot(Storage.for_uri(uri, s3_server.storage_options)).files.to_pylist()
    gone = sorted(unquote(r["path"]) for r in rows if not r["deletionVector"])[0]
    s3_server.client().delete_object(Bucket=s3_server.bucket, Key=f"{prefix}/{gone}")
    log_before = _log_keys(s3_server, prefix)

    def deny(kind: str, path_qs: str) -> bool:
        # The data directories may not be listed; the log may (a bucket policy like that).
        return kind == "LIST" and "_delta_log" not in unquote(path_qs)

    with S3Proxy(s3_server.endpoint_url, latency=0.0, deny=deny) as proxy:
        opts = proxy.storage_options()
        with pytest.raises(StorageError, match="refusing to repair"):
            fsck(uri, storage_options=opts, repair=True, confirm=True)
        with pytest.raises(StorageError):
            fsck(uri, storage_options=opts)
        assert proxy.counts().get("AccessDenied", 0) >= 2
    assert _log_keys(s3_server, prefix) == log_before
    # Without the denial the same repair goes ahead.
    done = fsck(uri, storage_options=s3_server.storage_options, repair=True, confirm=True)
    assert [e.key for e in done.repair.entries] == [gone]
    assert len(_log_keys(s3_server, prefix)) == len(log_before) + 1
