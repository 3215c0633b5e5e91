"""Fixtures of the layout wing's tests (OPTIMIZE, PURGE, statistics). Tables are built by
`support/layout_tables.py`; the corpus copies come from the root `conftest.py`'s
`table_copy`."""

from __future__ import annotations

import pytest

from delta_ops.storage import Storage


@pytest.fixture
def layout_storage(tmp_path):
    """Storage of an empty directory for a generated table."""
    root = tmp_path / "table"
    root.mkdir()
    return Storage.of(str(root))
