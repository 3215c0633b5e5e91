"""Property: over an alphabet of awkward path spellings, VACUUM never lists a file a version
inside the retention references, and never touches anything outside the table root.

Each example builds a tiny table by hand in a fresh directory whose own name is drawn from
the same alphabet (`%`, `%25`, `%41`, `:`, spaces, `=`, unicode): two commits, live files
referenced in one of many spellings (relative encoded once or raw; `/abs`, `file:/`,
`file://`, `file:///`, `file://localhost/`, with `//` inside), tombstones inside the
retention (their files are still needed by version 0), expired tombstones and never
committed files (both old, both fair game), sentinels beside the root and, sometimes, a
symbolic link from inside the root to a directory outside it. A dry run and a real run must
agree, delete only unreferenced files, and leave everything outside the root as it was.
The run may also refuse as a whole (`UnsafeDeletionError`), and then nothing is deleted.
A second property adds what deltalake opens (where it can open the table) to what must stay.

Aliases of the root (issue 22): live files may also be spelt through a second link to
the root, a link to an ancestor of the root, `..` after a link whose target lies elsewhere
(`base/deep/..` is the root to the file system, `base` to the text), or a link to one of
the root's own directories (relative); and the root itself may be given through a linked
ancestor while the adds spell the real path. Catalog-managed tables (issue 22): files
added only by staged commits (`_delta_log/_staged_commits`, versions at, below and above
the latest published one) and live files removed by a staged commit must stay; a
malformed staged commit must make the run refuse.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from delta_ops_tests.support.awkward_paths import (
    check,
    files_deltalake_reads_survive_vacuum,
    tables,
    vacuum_never_lists_a_referenced_file_nor_touches_outside_the_root,
)


def test_vacuum_never_lists_a_referenced_file_nor_touches_outside_the_root():
    vacuum_never_lists_a_referenced_file_nor_touches_outside_the_root()


def test_files_deltalake_reads_survive_vacuum():
    """What deltalake opens for the latest version (where it can open the table) is never
    a candidate and exists afterwards."""
    files_deltalake_reads_survive_vacuum()


@pytest.mark.spark
@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spec=tables())
def test_spark_vacuum_never_lists_a_referenced_file_nor_touches_outside_the_root(
    spark_engine, spec  # noqa: F811
):
    check(spec, spark_engine)
