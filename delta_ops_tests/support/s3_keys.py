"""Set-up of the S3 listing tests: keys put straight into moto's bucket under a fresh root
(any key S3 takes, such as a file and a directory of one name), and the listing's page size
for the length of a test."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from delta_ops.storage import Storage
from delta_ops.storage.s3 import _S3Backend


def storage_holding(s3_server: Any, name: str, keys: Iterable[str]) -> Storage:
    """A storage on a fresh root of `s3_server` holding `keys` (relative to the root), each
    with the body b"x"."""
    storage = Storage.for_uri(s3_server.fresh_uri(name), s3_server.storage_options)
    client = s3_server.client()
    prefix = storage.root.split("/", 3)[3]
    for k in keys:
        client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{k}", Body=b"x")
    return storage


@contextmanager
def listing_page_size(keys: int) -> Iterator[None]:
    """S3 listings answer at most `keys` keys a page inside the block."""
    old = _S3Backend.page_size
    _S3Backend.page_size = keys
    try:
        yield
    finally:
        _S3Backend.page_size = old
