"""Reads on S3 without s3fs: a snapshot or a VACUUM dry run, each run as its own process
against the moto server, never imports s3fs, aiobotocore or aiohttp (botocore's
synchronous client serves their listings and GETs, at the request limit from threads),
and the light client keeps s3fs's semantics: SlowDown answers are
retried, a missing file is reported by name, options it cannot reproduce leave every call
to s3fs. A small whole-file put (what s3fs sends as one PutObject) goes through the light
client too; conditional puts, uploads and single deletes still go through s3fs."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from delta_ops.errors import MissingFileError
from delta_ops.storage import Storage
from delta_ops.storage.s3 import S3FS_OWN_OPTIONS
from delta_ops_tests.support.corpus import REPO_ROOT
from delta_ops_tests.support.s3_proxy import S3Proxy

pytestmark = pytest.mark.s3

#: Modules s3fs brings (aiobotocore imports aiohttp); a read-only run needs none of them.
_HEAVY = ("s3fs", "aiobotocore", "aiohttp", "fsspec.asyn")

_RUN_AND_REPORT = """
import json, sys
from delta_ops.cli import main
code = main(json.loads(sys.argv[1]))
heavy = json.loads(sys.argv[2])
print("MODULES=" + json.dumps(sorted(m for m in sys.modules if m in heavy)))
sys.exit(code)
"""


def _cli_in_process_of_its_own(argv: list[str]) -> tuple[dict, list[str]]:
    """(the CLI's JSON output, the modules of `_HEAVY` it imported) of one CLI run."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_REPORT, json.dumps(argv), json.dumps(_HEAVY)],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out, _, modules = done.stdout.rpartition("MODULES=")
    return json.loads(out), json.loads(modules)


def _peer_table(s3_server, name: str, commits: int, checkpoint: bool) -> str:
    from deltalake import DeltaTable as Peer
    from deltalake import write_deltalake

    uri = s3_server.fresh_uri(name)
    opts = s3_server.object_store_options
    for i in range(commits):
        write_deltalake(uri, pa.table({"id": pa.array([i], pa.int64())}), mode="append",
                        storage_options=opts)
    if checkpoint:
        Peer(uri, storage_options=opts).create_checkpoint()
    return uri


@pytest.mark.parametrize("checkpoint", [True, False])
def test_a_snapshot_on_s3_imports_neither_s3fs_nor_aiobotocore(s3_server, checkpoint):
    uri = _peer_table(s3_server, "light", commits=3, checkpoint=checkpoint)
    options = [
        "--storage-option", f"AWS_ENDPOINT_URL={s3_server.endpoint_url}",
        "--storage-option", f"AWS_ACCESS_KEY_ID={s3_server.storage_options['key']}",
        "--storage-option", f"AWS_SECRET_ACCESS_KEY={s3_server.storage_options['secret']}",
        "--storage-option", "AWS_REGION=us-east-1",
        "--storage-option", "AWS_ALLOW_HTTP=true",
    ]
    shown, modules = _cli_in_process_of_its_own(["snapshot", uri, "--json", *options])
    assert shown["version"] == 2, shown
    assert modules == [], f"a snapshot on S3 imported {modules}"


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_vacuum_on_s3_imports_neither_s3fs_nor_aiobotocore(s3_server, dry_run):
    """A dry run reads only; a real run also deletes (DeleteObjects through the bulk
    client) and records `_delta_log/_last_vacuum_info` (one small put)."""
    uri = _peer_table(s3_server, f"light-vacuum-{dry_run}", commits=2, checkpoint=False)
    writer = Storage.for_uri(uri, s3_server.storage_options)
    writer.put_atomic("stray.parquet", b"not referenced")
    shown, modules = _cli_in_process_of_its_own(
        ["vacuum", uri, "--json", "--retention-hours", "0", "--force-retention",
         *(["--dry-run"] if dry_run else []),
         "--storage-option", f"endpoint_url={s3_server.endpoint_url}",
         "--storage-option", f"key={s3_server.storage_options['key']}",
         "--storage-option", f"secret={s3_server.storage_options['secret']}",
         "--storage-option", "AWS_REGION=us-east-1"]
    )
    assert "stray.parquet" in json.dumps(shown), shown  # listed at the request limit
    assert modules == [], f"a VACUUM on S3 (dry run: {dry_run}) imported {modules}"
    reader = Storage.for_uri(uri, s3_server.storage_options)
    assert reader.exists("stray.parquet") is dry_run
    assert reader.exists("_delta_log/_last_vacuum_info") is not dry_run


def test_reads_ride_out_slowdown_answers_without_s3fs(s3_server):
    uri = s3_server.fresh_uri("light-slow")
    writer = Storage.for_uri(uri, s3_server.storage_options)
    for i in range(6):
        writer.put_if_absent(f"d/{i:03d}.json", f"{{\"n\": {i}}}".encode())
    with S3Proxy(s3_server.endpoint_url, latency=0.0, slowdown=0.3, seed=5) as proxy:
        storage = Storage.for_uri(uri, proxy.storage_options())
        names = [f.path for f in storage.list_dir("d")]
        contents = [storage.read(name) for name in names]
        sizes = [storage.info(name).size for name in names]
        with storage.open_input("d/005.json") as f:
            opened = f.read()
        counts = proxy.counts()
    assert names == [f"d/{i:03d}.json" for i in range(6)]
    assert contents == [f"{{\"n\": {i}}}".encode() for i in range(6)]
    assert sizes == [len(c) for c in contents]
    assert opened == b'{"n": 5}'
    assert counts.get("SlowDown", 0) > 0, counts  # the proxy refused some, all were retried
    backend = storage._backend
    assert backend.light and backend._fs is None  # served without building s3fs


def test_a_missing_file_is_reported_by_name(s3_server):
    uri = s3_server.fresh_uri("light-missing")
    storage = Storage.for_uri(uri, s3_server.storage_options)
    with pytest.raises(MissingFileError, match="gone.json"):
        storage.read("gone.json")
    with pytest.raises(MissingFileError, match="gone.json"):
        storage.open_input("gone.json")
    assert storage.info("gone.json") is None
    assert storage._backend._fs is None


def test_storages_with_the_same_options_share_one_light_client(s3_server):
    one = Storage.for_uri(s3_server.fresh_uri("light-a"), s3_server.storage_options)
    two = Storage.for_uri(s3_server.fresh_uri("light-b"), s3_server.storage_options)
    assert one.list_dir("") == two.list_dir("") == []
    assert one._backend._client is two._backend._client
    other = {**s3_server.storage_options, "config_kwargs": {"read_timeout": 30}}
    three = Storage.for_uri(s3_server.fresh_uri("light-c"), other)
    assert three.list_dir("") == []
    assert three._backend._client is not one._backend._client


def test_writes_and_deletes_still_go_through_s3fs(s3_server):
    # Options of their own: s3fs hands back a file system built earlier for the same ones.
    options = {**s3_server.storage_options, "config_kwargs": {"connect_timeout": 7}}
    storage = Storage.for_uri(s3_server.fresh_uri("light-write"), options)
    assert storage.list_dir("") == []  # a read first: the light client is built
    assert storage.put_if_absent("a.json", b"1")
    assert not storage.put_if_absent("a.json", b"2")  # If-None-Match: * held
    assert storage.read("a.json") == b"1"
    backend = storage._backend
    assert backend._fs is not None
    # One loaded S3 service model for both clients.
    loader = backend._session.get_component("data_loader")
    assert backend.fs.session.get_component("data_loader") is loader
    assert storage.delete_many(["a.json", "b.json"]) == 1
    assert [f.path for f in storage.list_dir("")] == []


@pytest.mark.parametrize(
    "extra",
    [{"requester_pays": False}, {"config_kwargs": {"connector_args": {"keepalive_timeout": 5}}}],
)
def test_options_the_light_client_does_not_reproduce_leave_reads_to_s3fs(s3_server, extra):
    uri = s3_server.fresh_uri("light-fallback")
    storage = Storage.for_uri(uri, {**s3_server.storage_options, **extra})
    assert not storage._backend.light
    assert storage.put_if_absent("x.json", b"{}")
    assert [f.path for f in storage.list_dir("")] == ["x.json"]
    assert storage.read("x.json") == b"{}"


def test_the_s3fs_option_names_written_out_are_the_installed_s3fs_ones():
    import s3fs

    params = inspect.signature(s3fs.S3FileSystem.__init__).parameters.values()
    own = {p.name for p in params
           if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    assert own == S3FS_OWN_OPTIONS


def test_a_small_put_goes_through_the_light_client_and_a_large_one_through_s3fs(
    s3_server, monkeypatch
):
    import delta_ops.storage.s3 as s3

    storage = Storage.for_uri(s3_server.fresh_uri("light-put"), s3_server.storage_options)
    storage.put_atomic("_delta_log/_last_vacuum_info", b'{"a": 1}\n')
    storage.put_atomic("_delta_log/_last_vacuum_info", b'{"a": 2}\n')  # overwrites
    assert storage.read("_delta_log/_last_vacuum_info") == b'{"a": 2}\n'
    assert storage._backend._fs is None  # no s3fs file system was built for it
    # From s3fs's multipart size on, s3fs uploads (here the size is lowered to 8 bytes).
    monkeypatch.setattr(s3, "_SINGLE_PUT_BYTES", 8)
    storage.put_atomic("big.bin", b"0123456789abcdef")
    assert storage._backend._fs is not None
    assert storage.read("big.bin") == b"0123456789abcdef"


def test_a_put_through_the_light_client_leaves_no_stale_s3fs_listing(s3_server):
    # A user may turn s3fs's listings cache on (it is off by default here).
    options = {**s3_server.storage_options, "use_listings_cache": True}
    storage = Storage.for_uri(s3_server.fresh_uri("light-put-cache"), options)
    assert storage._backend.light
    assert storage.put_if_absent("d/a.json", b"1")  # through s3fs: the file system is built
    fs = storage._backend.fs
    native = storage._native("d")
    assert [i["size"] for i in fs.ls(native, detail=True)] == [1]  # cached by s3fs
    storage.put_atomic("d/a.json", b"12345")
    assert [i["size"] for i in fs.ls(native, detail=True)] == [5]
    with storage.open_input("d/a.json") as f:
        assert f.read() == b"12345"
