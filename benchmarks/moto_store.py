"""A moto S3 server in a process of its own, loaded with the benchmark tables directly
(objects put through moto's backend, not over HTTP: 275,000 PUTs through the server would
take minutes), every object dated `s3_tables.T0` so that it is older than any retention.

Run by `bench_object_store` as ``python -m benchmarks.moto_store``; it prints one JSON line
``{"endpoint": ..., "bucket": ...}`` when it serves, then reads commands on stdin, one a
line, answering each with one JSON line:

- ``load <table dir> <prefix>``: put the table's log and its data keys (empty bodies)
  under ``<prefix>/``, after deleting whatever is there (so a VACUUM can be run again);
  answers ``{"objects": n, "seconds": s}``.

Closing stdin stops the server. No request is serialized here (unlike the test fixture,
which serializes for its put-if-absent races): the benchmark measures throughput.

One change to moto (`_index_listings`): its ListObjectsV2 walks and sorts every key of the
bucket for each page (about 1 s a page at 275,000 keys on this machine), where S3's cost
is the page's. The replacement answers from a sorted index of the key names, rebuilt after
writes, with the same results (prefix, delimiter, StartAfter, continuation tokens,
MaxKeys); it serves both tools alike.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

BUCKET = "bench"


def _backend():  # type: ignore[no-untyped-def]
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    return s3_backends[DEFAULT_ACCOUNT_ID]["global"]


_STATE = {"dirty": True, "names": []}


def _index_listings() -> None:
    """Answer ListObjectsV2 from a sorted index of key names (see the module)."""
    from bisect import bisect_left, bisect_right

    from moto.s3.models import FakeDeleteMarker, S3Backend

    def mark(fn):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            _STATE["dirty"] = True
            return fn(*args, **kwargs)

        return wrapped

    for name in ("put_object", "delete_object", "delete_objects", "copy_object"):
        setattr(S3Backend, name, mark(getattr(S3Backend, name)))

    def list_objects_v2(self, bucket, prefix, delimiter, continuation_token,  # type: ignore[no-untyped-def]
                        start_after, max_keys):
        if _STATE["dirty"]:
            _STATE["names"] = sorted(bucket.keys.keys())
            _STATE["dirty"] = False
        names = _STATE["names"]
        prefix = prefix or ""
        start = (self._pagination_tokens.get(continuation_token) if continuation_token
                 else start_after)
        i = bisect_left(names, prefix)
        if start:
            i = max(i, bisect_right(names, start))
        out: list = []
        while i < len(names) and len(out) <= max_keys:
            name = names[i]
            if not name.startswith(prefix):
                break
            rest = name[len(prefix):]
            if delimiter and delimiter in rest:
                folder = prefix + rest.split(delimiter)[0] + delimiter
                if not start or folder > start:
                    out.append(folder)
                i = bisect_left(names, folder[:-1] + chr(ord(delimiter) + 1))
                continue
            key = bucket.keys.get(name)
            if key is not None and not isinstance(key, FakeDeleteMarker):
                out.append(key)
            i += 1
        return self._truncate_result(out, max_keys)

    S3Backend.list_objects_v2 = list_objects_v2
    _fast_listing_xml()


def _fast_listing_xml() -> None:
    """Render ListObjectsV2 answers with a string template: moto's generic serializer
    spends about 1 ms a key (timestamps parsed again by botocore, a schema walk per
    field), S3 answers a page in tens of ms."""
    from xml.sax.saxutils import escape

    from moto.s3.responses import S3Response

    original = S3Response.serialized

    def serialized(self, action_result):  # type: ignore[no-untyped-def]
        if self.data.get("Action") != "ListObjectsV2":
            return original(self, action_result)
        r = action_result.result
        parts = ['<?xml version="1.0" encoding="UTF-8"?>\n'
                 '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">']

        def tag(name: str, value: object) -> None:
            if isinstance(value, bool):
                value = "true" if value else "false"
            parts.append(f"<{name}>{escape(str(value))}</{name}>")

        for name in ("Name", "Prefix", "MaxKeys", "KeyCount", "IsTruncated", "Delimiter",
                     "EncodingType", "NextContinuationToken", "StartAfter"):
            if name in r:
                tag(name, r[name])
        for c in r["Contents"]:
            parts.append("<Contents>")
            tag("Key", c["Key"])
            tag("LastModified", c["LastModified"])
            tag("ETag", c["ETag"])
            tag("Size", c["Size"])
            tag("StorageClass", c["StorageClass"])
            parts.append("</Contents>")
        for folder in r.get("CommonPrefixes", ()):
            parts.append("<CommonPrefixes>")
            tag("Prefix", folder["Prefix"])
            parts.append("</CommonPrefixes>")
        parts.append("</ListBucketResult>")
        headers = {"Content-Type": "application/xml", **self.response_headers}
        return 200, headers, "".join(parts).encode("utf-8")

    S3Response.serialized = serialized


def load(table: Path, prefix: str) -> dict:
    from benchmarks.datasets import T0

    t0 = time.perf_counter()
    backend = _backend()
    bucket = backend.buckets[BUCKET]
    for name in [k for k in list(bucket.keys.keys()) if k.startswith(prefix + "/")]:
        bucket.keys.pop(name)
    _STATE["dirty"] = True
    when = datetime.fromtimestamp(T0 / 1000, timezone.utc).replace(tzinfo=None)
    n = 0
    for f in sorted((table / "_delta_log").iterdir()):
        key = backend.put_object(BUCKET, f"{prefix}/_delta_log/{f.name}", f.read_bytes())
        key.last_modified = when
        n += 1
    with open(table / "keys.txt", encoding="utf-8") as fh:
        for line in fh:
            rel = line.rstrip("\n")
            if rel:
                key = backend.put_object(BUCKET, f"{prefix}/{rel}", b"")
                key.last_modified = when
                n += 1
    return {"objects": n, "seconds": time.perf_counter() - t0}


def main() -> int:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _index_listings()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    _backend().create_bucket(BUCKET, "us-east-1")
    print(json.dumps({"endpoint": f"http://{host}:{port}", "bucket": BUCKET}), flush=True)
    try:
        for line in sys.stdin:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "load":
                print(json.dumps(load(Path(parts[1]), parts[2])), flush=True)
            else:
                print(json.dumps({"error": f"unknown command {parts[0]!r}"}), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
