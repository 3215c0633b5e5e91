"""`history` against deltalake's `DeltaTable.history()` on every corpus table: the same
versions, operations, timestamps, parameters and metrics; every difference is named per
table with its reason.

Two kinds of tables differ, each for a stated reason:
* commits without a `commitInfo` (written before writers recorded one, or by hand): ours
  lists them (operation None, timestamp from the file); deltalake's history leaves them out.
  Each such version is checked against the raw commit file.
* tables deltalake cannot open at all (its error is pinned here): ours is checked against
  the commit files read directly (`_raw_commit_infos`, json from the standard library).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import deltalake
import pytest
from deltalake.exceptions import DeltaError

from delta_ops.maintenance.history import COMMIT_INFO, ICT, MODIFICATION_TIME, table_history
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path

#: Versions whose commit has no commitInfo, per table: deltalake's history() leaves them out.
NO_COMMIT_INFO: dict[str, set[int]] = {
    # Delta 0.1.0 wrote no commitInfo yet.
    "spark__delta-0.1.0": {0, 1, 2, 3},
    # A generated DV table whose version 0 was written without commitInfo.
    "spark__table-with-dv-gigantic": {0},
    # Golden tables written by hand: their commits hold only the actions under test.
    "golden__canonicalized-paths-normal-a": {0, 1},
    "golden__canonicalized-paths-normal-b": {0, 1},
    "golden__canonicalized-paths-special-a": {0, 1},
    "golden__canonicalized-paths-special-b": {0, 1},
    "golden__deltalog-invalid-protocol-version": {0},
    "golden__deltalog-state-reconstruction-without-metadata": {0},
    "golden__deltalog-state-reconstruction-without-protocol": {0},
    # Version 4 is a hand-written commit of the evolvability test.
    "spark__transaction_log_schema_evolvability": {4},
}

#: Tables deltalake 1.x cannot open, and the start of its error (history needs no state).
DELTALAKE_CANNOT_OPEN: dict[str, str] = {
    # Its JSON reader refuses a metaData without the non-nullable fields the spec makes
    # optional in these hand-written logs.
    "golden__canonicalized-paths-normal-a": "Kernel error: Json error",
    "golden__canonicalized-paths-normal-b": "Kernel error: Json error",
    "golden__canonicalized-paths-special-a": "Kernel error: Json error",
    "golden__canonicalized-paths-special-b": "Kernel error: Json error",
    "golden__deltalog-commit-info": "Kernel error: Json error",
    "golden__corrupted-last-checkpoint": "Kernel error: Invalid argument error",
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-protocol":
        "Kernel error: Invalid argument error",
    "golden__update-deleted-directory": "Kernel error: Invalid argument error",
    # Logs built without a metaData or protocol on purpose.
    "golden__data-reader-absolute-paths-escaped-chars": "Kernel error: No table metadata",
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-metadata":
        "Kernel error: No table metadata",
    "golden__deltalog-state-reconstruction-without-metadata": "Kernel error: No table metadata",
    "golden__deltalog-state-reconstruction-without-protocol": "Kernel error: No protocol",
    "golden__deltalog-invalid-protocol-version": "Kernel error: Invalid protocol action",
    # A gap in the commits (version 1 missing): history lists the commits there are.
    "golden__versions-not-contiguous": "Kernel error: Generic delta kernel error",
    # Catalog-managed: deltalake needs the catalog's max version; history reads the
    # published commits.
    "kernel-benchmarks__basic_catalog_managed/delta": "Kernel error: Max catalog version",
    "kernel-defaults__catalog-owned-preview": "Kernel error: Max catalog version",
    # A stats string that is not JSON (history does not parse stats).
    "spark__transaction_log_schema_evolvability": "Invalid JSON in file stats",
}

TABLES = all_corpus_tables()
_COMMIT = re.compile(r"^(\d{20})\.json$")


def _raw_commit_infos(root: Path) -> dict[int, dict | None]:
    """Each commit file's first commitInfo (None: it has none), read with json."""
    out: dict[int, dict | None] = {}
    for f in (root / "_delta_log").iterdir():
        m = _COMMIT.match(f.name)
        if not m:
            continue
        found = None
        for line in f.read_bytes().splitlines():
            if line.strip() and b'"commitInfo"' in line:
                obj = json.loads(line)
                if isinstance(obj.get("commitInfo"), dict):
                    found = obj["commitInfo"]
                    break
        out[int(m.group(1))] = found
    return out


def test_every_named_table_is_in_the_corpus() -> None:
    assert set(NO_COMMIT_INFO) <= set(TABLES)
    assert set(DELTALAKE_CANNOT_OPEN) <= set(TABLES)


@pytest.mark.parametrize("name", TABLES)
def test_history_matches_deltalake_and_the_commit_files(name: str) -> None:
    root = corpus_path(name)
    ours = table_history(str(root))
    raw = _raw_commit_infos(root)
    # Every commit file is an entry, newest first, with its own commitInfo.
    assert [e.version for e in ours.entries] == sorted(raw, reverse=True)
    for e in ours.entries:
        assert dict(e.commit_info) == (raw[e.version] or {})
        assert e.operation == (raw[e.version] or {}).get("operation")
    missing_ci = {e.version for e in ours.entries if not e.commit_info}
    assert missing_ci == NO_COMMIT_INFO.get(name, set())
    for e in ours.entries:
        if not e.commit_info:
            assert (e.timestamp_source, e.timestamp) == (MODIFICATION_TIME, e.modification_time)
        elif e.timestamp_source == COMMIT_INFO:
            assert e.timestamp == e.commit_info["timestamp"]
        else:
            assert e.timestamp_source == ICT
            assert e.timestamp == e.commit_info["inCommitTimestamp"]

    if name in DELTALAKE_CANNOT_OPEN:
        with pytest.raises(DeltaError, match=re.escape(DELTALAKE_CANNOT_OPEN[name])):
            deltalake.DeltaTable(str(root)).history()
        return
    theirs = deltalake.DeltaTable(str(root)).history()
    with_ci = [e for e in ours.entries if e.commit_info]
    assert [(e.version, e.operation) for e in with_ci] == [
        (h["version"], h.get("operation")) for h in theirs
    ]
    for e, h in zip(with_ci, theirs, strict=True):
        for key in ("timestamp", "operationParameters", "operationMetrics", "engineInfo",
                    "isBlindAppend", "clientVersion", "readVersion"):
            assert e.commit_info.get(key) == h.get(key), (e.version, key)


@pytest.mark.parametrize("name", [t for t in TABLES if t not in DELTALAKE_CANNOT_OPEN])
def test_limit_reads_the_newest_commits_like_deltalake(name: str) -> None:
    root = str(corpus_path(name))
    ours = table_history(root, limit=2)
    theirs = deltalake.DeltaTable(root).history(limit=2)
    newest_two = [e.version for e in table_history(root).entries][:2]
    assert [e.version for e in ours.entries] == newest_two
    # deltalake counts only commits with a commitInfo within its limit.
    assert [h["version"] for h in theirs] == [
        v for v in newest_two if v not in NO_COMMIT_INFO.get(name, set())
    ]


def test_versions_removed_by_cleanup_are_named_with_their_checkpoint() -> None:
    ours = table_history(str(corpus_path("no_replay")))
    theirs = deltalake.DeltaTable(str(corpus_path("no_replay"))).history()
    assert [e.version for e in ours.entries] == [h["version"] for h in theirs] == [5, 4, 3, 2]
    assert ours.removed is not None
    assert (ours.removed.first, ours.removed.last, ours.removed.checkpoint) == (0, 1, 2)
    assert ours.removed.reason == "removed by log cleanup"
