"""A commit that landed on S3 but whose answer was lost.

The proxy forwards the first conditional PUT of a commit file to the moto server, then
answers `500 InternalError`; botocore retries the same PUT with `If-None-Match: *` and the
store refuses it (412), because the first one was written. Before the fix the transaction
took its own commit for a concurrent writer's: OPTIMIZE and RESTORE reported a conflict
(exit 1) although their commit was in the log, and COMPUTE STATS committed twice. Now a
refused commit whose bytes are ours is our commit.
"""

from __future__ import annotations

import json

import deltalake

from delta_ops.commit.transaction import Transaction
from delta_ops.log import load_snapshot
from delta_ops.storage import Storage
from delta_ops_tests.support.s3_proxy import S3Proxy


def _commit_puts(kind: str, path_qs: str) -> bool:
    return kind == "PUT" and "/_delta_log/" in path_qs and path_qs.split("?")[0].endswith(
        ".json")


def _peer_table(s3_server, name: str) -> str:
    uri = s3_server.fresh_uri(name)
    for i in range(3):
        deltalake.write_deltalake(
            uri, _rows(i), mode="append", storage_options=s3_server.object_store_options,
        )
    return uri


def _rows(i: int):
    import pyarrow as pa

    return pa.table({"id": pa.array([i * 10 + j for j in range(10)], pa.int64())})


def _commit_infos(storage: Storage) -> list[dict]:
    snap = load_snapshot(storage)
    out = []
    for v in range(snap.version + 1):
        lines = storage.read(f"_delta_log/{v:020d}.json").decode().splitlines()
        out += [json.loads(line)["commitInfo"] for line in lines if '"commitInfo"' in line]
    return out


def test_a_commit_whose_answer_was_lost_is_ours(s3_server):
    uri = _peer_table(s3_server, "lost-answer")
    lost: list[str] = []

    def lose_first(kind: str, path_qs: str) -> bool:
        if _commit_puts(kind, path_qs) and not lost:
            lost.append(path_qs)
            return True
        return False

    with S3Proxy(s3_server.endpoint_url, latency=0.0, lose_answer=lose_first) as proxy:
        storage = Storage.for_uri(uri, proxy.storage_options())
        txn = Transaction(storage, operation="SET TBLPROPERTIES",
                          operation_parameters={"properties": "{}"})
        md = dict(txn.snapshot.metadata.raw)
        md["configuration"] = {**md.get("configuration", {}), "user.key": "v"}
        txn.set_metadata(md)
        result = txn.commit()
        counts = proxy.counts()
    assert lost and counts.get("LostAnswer") == 1, counts
    assert result.version == 3 and result.attempts == 1
    reader = Storage.for_uri(uri, s3_server.storage_options)
    assert load_snapshot(reader).version == 3  # one commit, not two
    ours = [c for c in _commit_infos(reader) if c.get("txnId") == result.txn_id]
    assert len(ours) == 1
    assert deltalake.DeltaTable(uri, storage_options=s3_server.object_store_options).metadata(
        ).configuration.get("user.key") == "v"


def test_a_concurrent_commit_is_still_a_conflict_to_rebase_on(s3_server):
    """The same refusal when another writer did win: its bytes are not ours, so the
    transaction rebases and commits after it, as before."""
    uri = _peer_table(s3_server, "lost-answer-peer")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    txn = Transaction(storage, operation="SET TBLPROPERTIES")
    md = dict(txn.snapshot.metadata.raw)
    md["configuration"] = {**md.get("configuration", {}), "user.key": "w"}
    txn.set_metadata(md)
    deltalake.write_deltalake(uri, _rows(9), mode="append",
                              storage_options=s3_server.object_store_options)
    result = txn.commit()
    assert result.version == 4 and result.attempts == 2
