"""`delta_ops.fsck` on every corpus table (copied to tmp_path): the healthy ones report
nothing at all, the ones the corpus README marks as hurt report exactly what is wrong with
them; and the unreferenced-file warnings equal what a plain walk of the table finds."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from delta_ops.errors import UnsupportedFeatureError
from delta_ops.log import load_snapshot
from delta_ops.maintenance.fsck import fsck
from delta_ops.protocol.deletion_vectors import DeletionVectorDescriptor
from delta_ops.protocol.path_identity import relative_key
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import all_corpus_tables, copy_corpus_table

#: Every file of a copy is dated here ...
OLD_S = 1_600_000_000
#: ... and, in the "nothing to report" test, fsck runs an hour later: every file is then
#: younger than VACUUM's retention, so no file is an unreferenced leftover yet.
SOON_MS = (OLD_S + 3600) * 1000

#: The hurt corpus tables (README: "files-missing", "last_cp-corrupt", the deliberately
#: broken `golden__deltalog-*` ones, DV files named with a prefix their descriptors lack)
#: and exactly what fsck finds in each: problem code -> count.
HURT: dict[str, dict[str, int]] = {
    "golden__checkpoint": {"missing_file": 1},
    "golden__corrupted-last-checkpoint": {"missing_file": 11, "corrupt_checkpoint": 1},
    "golden__corrupted-last-checkpoint-kernel": {"last_checkpoint": 1},
    # No metaData action at all; its files are named through "..//Users/...".
    "golden__data-reader-absolute-paths-escaped-chars": {"log_unreadable": 1},
    "golden__delete-re-add-same-file-different-transactions": {"missing_file": 2},
    "golden__deltalog-commit-info": {"missing_file": 1},
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-metadata": {
        "log_unreadable": 1, "corrupt_checkpoint": 1},
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-protocol": {
        "log_unreadable": 1, "corrupt_checkpoint": 1},
    "golden__deltalog-state-reconstruction-without-metadata": {"log_unreadable": 1},
    "golden__deltalog-state-reconstruction-without-protocol": {"log_unreadable": 1},
    "golden__log-replay-special-characters-b": {"missing_file": 1},
    "golden__parquet-decimal-dictionaries-v1": {"missing_file": 1},
    # Its checkpoint's metaData has no schemaString.
    "golden__update-deleted-directory": {"missing_file": 10, "corrupt_checkpoint": 1},
    "golden__versions-not-contiguous": {"log_gap": 1},
    "kernel-defaults__spark-variant-stable-feature-checkpoint": {"missing_file": 4},
    "spark__partitioned-table-with-dv-large": {"missing_dv": 7},
    "spark__table-with-dv-gigantic": {"missing_dv": 1, "missing_file": 1},
    "spark__table-with-dv-large": {"missing_dv": 8},
    "spark__table-with-dv-small": {"missing_dv": 1},
}
#: Tables fsck refuses to read (reader version 99).
UNREADABLE = {"golden__deltalog-invalid-protocol-version"}
#: Tables VACUUM refuses to plan for (so the unreferenced files are a note, not checked).
NOT_VACUUMED = {
    "golden__collations-preview-table", "golden__collations-table",
    "kernel-benchmarks__basic_catalog_managed/delta", "kernel-defaults__catalog-owned-preview",
}


def _dated_copy(name: str, dest: Path) -> Path:
    root = copy_corpus_table(name, dest)
    for folder, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(folder, f), (OLD_S, OLD_S))
    return root


def test_the_hurt_list_names_corpus_tables():
    tables = set(all_corpus_tables())
    assert set(HURT) | UNREADABLE | NOT_VACUUMED <= tables


@pytest.mark.parametrize("name", all_corpus_tables())
def test_corpus_table_reports_exactly_what_is_wrong(tmp_path, name):
    root = _dated_copy(name, tmp_path / "t")
    if name in UNREADABLE:
        with pytest.raises(UnsupportedFeatureError, match="reader version 99"):
            fsck(str(root), clock=lambda: SOON_MS)
        return
    result = fsck(str(root), clock=lambda: SOON_MS)
    found = Counter(p.code for p in result.problems)
    assert dict(found) == HURT.get(name, {}), [p.line() for p in result.problems]
    assert all(p.severity == "error" for p in result.problems)
    assert result.ok is (name not in HURT)
    for p in result.problems:  # each names a file and says what is wrong
        assert p.file and p.reason
    if name not in HURT:
        assert result.notes == ((
            result.notes[0],) if name in NOT_VACUUMED else ())
        snap = load_snapshot(Storage.for_uri(str(root)))
        assert result.version == snap.version
        assert result.num_files == snap.num_files


def _unreferenced_by_walk(root: Path) -> set[str]:
    """Data files on disk that no live file or live DV names: every file outside
    `_delta_log` and hidden directories (`_x`, `.x`; not partition directories `_x=...` nor
    `_change_data`), with the Hadoop side checksum `.x.crc` of such a file."""
    storage = Storage.for_uri(str(root))
    snap = load_snapshot(storage)
    live: set[str] = set()
    for row in snap.files.select(["path", "deletionVector"]).to_pylist():
        live.add(relative_key(row["path"], storage.root) or "")
        dv = row["deletionVector"]
        if dv and dv.get("storageType") in ("u", "p"):
            d = DeletionVectorDescriptor.from_dict(dv)
            key = d.relative_path() if d.storage_type == "u" else relative_key(
                d.path_or_inline_dv, storage.root)
            live.add(key or "")
    out: set[str] = set()
    for folder, _dirs, files in os.walk(root):
        parts = Path(folder).relative_to(root).parts
        if any(p.startswith(".") or (p.startswith("_") and "=" not in p
                                     and p != "_change_data") for p in parts):
            continue
        for f in files:
            key = "/".join((*parts, f))
            if f.startswith("."):
                main = "/".join((*parts, f[1:-4]))
                if f.endswith(".crc") and not f[1:].startswith(("_", ".")) and main not in live:
                    out.add(key)
            elif not f.startswith("_") and key not in live:
                out.add(key)
    return out


@pytest.mark.parametrize("name", sorted(set(all_corpus_tables()) - UNREADABLE - {
    n for n, codes in HURT.items() if "log_unreadable" in codes or "log_gap" in codes}))
def test_unreferenced_files_are_what_vacuum_would_delete(tmp_path, name):
    root = _dated_copy(name, tmp_path / "t")
    result = fsck(str(root))  # now: years after every file's date
    warned = {p.file for p in result.problems if p.code == "unreferenced_file"}
    assert all(p.severity == "warning" for p in result.problems
               if p.code == "unreferenced_file")
    if name in NOT_VACUUMED:
        assert warned == set()
        assert any("VACUUM cannot plan" in n for n in result.notes)
    else:
        assert warned == _unreferenced_by_walk(root)
