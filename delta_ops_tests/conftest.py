"""Shared fixtures: where the corpus lives, and copying tables before anything writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from delta_ops_tests.corpus import (
    CORPUS,
    REPO_ROOT,
    all_corpus_tables,
    copy_corpus_table,
    corpus_path,
)

__all__ = ["CORPUS", "REPO_ROOT", "all_corpus_tables", "copy_corpus_table", "corpus_path"]


@pytest.fixture
def table_copy(tmp_path):
    """Factory: `table_copy("golden__checkpoint")` -> a writable copy of that table."""

    def make(name: str) -> Path:
        return copy_corpus_table(name, tmp_path / name.replace("/", "__"))

    return make
