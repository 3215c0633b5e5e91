"""Fixtures of the log-compaction wing's tests."""

from __future__ import annotations

import pytest

from delta_ops_tests.support.compaction_fixtures import CompactionTable, build_compaction_table


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> CompactionTable:
    """The generated table of `compaction_fixtures.build_compaction_table` (removes and
    re-adds of one path, no compaction files yet), built once per module; tests copy it."""
    return build_compaction_table(tmp_path_factory.mktemp("compaction") / "t")
