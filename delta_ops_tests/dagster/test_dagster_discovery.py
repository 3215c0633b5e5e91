"""Discovery of tables under a prefix (issue 22, item 7): a table reached through a
symbolic link is not found a second time under another name, and a prefix that lists
nothing (vanished, mistyped) keeps the tables it had instead of dropping them silently.
"""

from __future__ import annotations

import os
import shutil

from delta_ops.defs.sources import RegistrySource, discovered_tables, refresh_discovery
from delta_ops_tests.support.corpus import copy_corpus_table


def _source(tmp_path, prefix) -> RegistrySource:
    return RegistrySource(base_dir=str(tmp_path), discovery_cache="cache.json",
                          discover=[{"prefix": str(prefix), "max_depth": 3}])


def test_a_symlinked_directory_does_not_give_a_table_a_second_name(tmp_path):
    lake = tmp_path / "lake"
    copy_corpus_table("basic_append", lake / "sales" / "orders")
    os.symlink(lake / "sales", lake / "sales_alias")               # a linked directory
    os.symlink(lake / "sales" / "orders", lake / "orders_link")   # a linked table
    source = _source(tmp_path, lake)
    found = refresh_discovery(source)
    assert found["found"] == 1 and found["added"] == ["sales__orders"], found
    assert [t.uri for t in discovered_tables(source)] == [str(lake / "sales" / "orders")]


def test_a_prefix_that_lists_nothing_keeps_its_tables_and_says_why(tmp_path):
    lake = tmp_path / "lake"
    copy_corpus_table("basic_append", lake / "sales" / "orders")
    copy_corpus_table("basic_append", lake / "hr" / "people")
    source = _source(tmp_path, lake)
    assert refresh_discovery(source)["found"] == 2

    shutil.move(str(lake), str(tmp_path / "elsewhere"))  # vanished (or mistyped)
    found = refresh_discovery(source)
    assert found["found"] == 2 and found["removed"] == [], found
    (error,) = found["errors"]
    assert str(lake) in error and "lists nothing" in error and "keeping the 2 tables" in error
    assert {t.name for t in discovered_tables(source)} == {"sales__orders", "hr__people"}

    # Back again, with one table really removed: that one goes, and no error.
    shutil.move(str(tmp_path / "elsewhere"), str(lake))
    shutil.rmtree(lake / "hr")
    found = refresh_discovery(source)
    assert found["removed"] == ["hr__people"] and not found["errors"], found


def test_an_empty_prefix_with_nothing_found_before_is_reported(tmp_path):
    (tmp_path / "empty").mkdir()
    found = refresh_discovery(_source(tmp_path, tmp_path / "empty"))
    assert found["found"] == 0
    (error,) = found["errors"]
    assert "lists nothing" in error
