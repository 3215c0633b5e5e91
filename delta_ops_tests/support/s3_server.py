"""A real S3 endpoint for tests: moto's server on 127.0.0.1, one per test session.

The root `conftest.py` makes the fixture visible to every test module::

    @pytest.mark.s3
    def test_something(s3_server):
        storage = Storage.for_uri(s3_server.fresh_uri("my-table"), s3_server.storage_options)

`s3_server.storage_options` are s3fs options (`endpoint_url`, `key`, `secret`,
`client_kwargs`); `s3_server.object_store_options` are the same credentials spelled for
delta-rs / object_store (`AWS_ENDPOINT_URL`, ...), for tests that hand the table to the
`deltalake` package.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

BUCKET = "delta-ops-test"
REGION = "us-east-1"
# moto accepts any credentials; these are not secrets.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"


class _SerializedApp:
    """WSGI wrapper that runs one request at a time.

    moto implements ``If-None-Match: *`` as a check followed by a write, without a lock,
    while its server handles requests in threads; two concurrent conditional PUTs could
    then both succeed, which real S3 never allows. Serializing requests makes moto as
    linearizable as S3 for our concurrency tests.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with self._lock:
            # moto builds whole responses eagerly; materialize inside the lock anyway.
            return list(self._app(environ, start_response))


@dataclass(frozen=True)
class S3Server:
    """A running moto S3 server with one bucket.

    Attributes:
        endpoint_url: ``http://127.0.0.1:<port>``.
        bucket: The bucket created for the tests.
        storage_options: s3fs options reaching the server (what `Storage.for_uri` takes).
    """

    endpoint_url: str
    bucket: str
    storage_options: dict[str, Any] = field(repr=False)

    @property
    def object_store_options(self) -> dict[str, str]:
        """The same endpoint and credentials in delta-rs / object_store spelling."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        }

    def fresh_uri(self, name: str = "t") -> str:
        """A new, empty ``s3://`` location in the bucket (unique per call)."""
        return f"s3://{self.bucket}/{name}-{uuid.uuid4().hex[:12]}"

    def client(self) -> Any:
        """A boto3 S3 client for the server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """Start moto's S3 server on a free local port with bucket `BUCKET`; stop it at the end."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    wsgi_server = getattr(server, "_server", None)
    if wsgi_server is not None and hasattr(wsgi_server, "app"):
        wsgi_server.app = _SerializedApp(wsgi_server.app)
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        info = S3Server(
            endpoint_url=endpoint,
            bucket=BUCKET,
            storage_options={
                "endpoint_url": endpoint,
                "key": ACCESS_KEY,
                "secret": SECRET_KEY,
                "client_kwargs": {"region_name": REGION},
            },
        )
        info.client().create_bucket(Bucket=BUCKET)
        yield info
    finally:
        server.stop()
