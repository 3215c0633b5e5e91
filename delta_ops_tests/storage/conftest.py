"""Fixtures of the storage wing's tests."""

from __future__ import annotations

import uuid

import pytest

from delta_ops.storage import Storage


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request, tmp_path):
    """An empty storage root on each backend (local files, fsspec's memory, moto's S3)."""
    if request.param == "local":
        yield Storage.for_uri(str(tmp_path / "root"))
    elif request.param == "memory":
        st = Storage.for_uri(f"memory://delta-ops-test-{uuid.uuid4().hex}")
        yield st
        st.delete_many([f.path for f in st.walk()])
    else:
        server = request.getfixturevalue("s3_server")
        yield Storage.for_uri(server.fresh_uri("contract"), server.storage_options)
