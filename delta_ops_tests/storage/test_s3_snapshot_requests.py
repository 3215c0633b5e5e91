"""What a snapshot costs on an object store, counted at a proxy in front of the moto S3
server: no HEAD at all (the log's listing names every file and its size; a missing
`_last_checkpoint` is a GET answered "not found", not a HEAD first), and the state equals
what `deltalake` reads from the same table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from delta_ops.table import DeltaTable
from delta_ops_tests.support.s3_proxy import S3Proxy

pytestmark = pytest.mark.s3


def _table(s3_server, *, commits: int, checkpoint: bool) -> str:
    from deltalake import DeltaTable as Peer
    from deltalake import write_deltalake

    uri = s3_server.fresh_uri("snap")
    opts = s3_server.object_store_options
    for i in range(commits):
        write_deltalake(uri, pa.table({"id": pa.array(range(i * 5, i * 5 + 5), pa.int64())}),
                        mode="append", storage_options=opts)
    if checkpoint:
        Peer(uri, storage_options=opts).create_checkpoint()
    return uri


def _peer_files(uri: str, opts) -> set[str]:
    from deltalake import DeltaTable as Peer

    return {u.rsplit("/", 1)[1] for u in Peer(uri, storage_options=opts).file_uris()}


@pytest.mark.parametrize("checkpoint", [True, False])
def test_a_snapshot_sends_no_head(s3_server, checkpoint):
    uri = _table(s3_server, commits=4, checkpoint=checkpoint)
    with S3Proxy(s3_server.endpoint_url, latency=0.0) as proxy:
        snap = DeltaTable(uri, storage_options=proxy.storage_options()).snapshot()
        counts = proxy.counts()
    assert snap.version == 3
    paths = {p.rsplit("/", 1)[-1] for p in snap.files.column("path").to_pylist()}
    assert paths == _peer_files(uri, s3_server.object_store_options)
    assert counts.get("HEAD", 0) == 0, counts
    # _last_checkpoint (one GET, found or not); the checkpoint whole in one GET, its footer
    # and row groups decoded from those bytes (before, each open sent a HEAD first and
    # read in ranges; then the row groups took a second whole GET); every commit after it
    # (none here, or all four).
    assert counts["GET"] == (2 if checkpoint else 5), proxy.requests
