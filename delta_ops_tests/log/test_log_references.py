"""The references-only replay (`log.replay.references`) equals the full replay.

For every corpus table, for generated histories (the commit API's `histories`, and the raw
generator's V1/V2 checkpoints with sidecars, multi-part checkpoints, absolute paths and
deletion vectors) and for the compaction fixture with compaction files in both forms, the
state VACUUM reads (one row per logical file) and the references it protects equal what
`load_snapshot` gives: its live files and their DV files, and its tombstones within the
retention and theirs. The expectation is computed from the snapshot's Arrow tables with
plain Python; only the spec's DV path rule (`decode_uuid_path`) and the listing-key rules
(`reader_key_array`, `relative_key`) are shared, since they are not reconciliation.
"""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_ops.errors import DeltaOpsError
from delta_ops.log.replay.checkpoint_fallback import read_with_usable_checkpoint
from delta_ops.log.replay.full_replay import replay
from delta_ops.log.replay.references import (
    _column,
    _commit_rows_columnar,
    _commit_rows_python,
    commit_rows,
    file_references,
    read_deltas,
    reference_rows,
)
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.protocol.actions import reader_key_array, relative_key
from delta_ops.protocol.arrays import string_array
from delta_ops.protocol.deletion_vectors import decode_uuid_path
from delta_ops.storage import Storage
from delta_ops_tests.support.compaction_fixtures import (
    build_compaction_table,
    write_databricks_compaction,
    write_spec_compaction,
)
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path
from delta_ops_tests.support.histories import (
    build_history,
    compaction_windows,
    histories,
    write_compaction,
)
from delta_ops_tests.support.raw_histories import build_raw, raw_specs

FAR_FUTURE = 1 << 60


def _dv_file(dv: dict | None) -> str | None:
    if not dv or dv.get("storageType") not in ("u", "p") or not dv.get("pathOrInlineDv"):
        return None
    if dv["storageType"] == "p":
        return dv["pathOrInlineDv"]
    prefix, uid = decode_uuid_path(dv["pathOrInlineDv"])
    name = f"deletion_vector_{uid}.bin"
    return f"{prefix}/{name}" if prefix else name


def _dv_triple(dv: dict | None) -> tuple:
    if not dv or dv.get("storageType") is None:
        return (None, None)
    return (dv["storageType"], dv.get("pathOrInlineDv"))


def _expected_state(adds: pa.Table, removes: pa.Table) -> tuple[set, set]:
    """(adds, removes) of the full replay as (path, DV) and (path, deletionTimestamp, DV)."""
    live = {
        (a["path"], *_dv_triple(a.get("deletionVector")))
        for a in adds.select(["path", "deletionVector"]).to_pylist()
    }
    tombs = {
        (r["path"], r.get("deletionTimestamp"), *_dv_triple(r.get("deletionVector")))
        for r in removes.select(["path", "deletionTimestamp", "deletionVector"]).to_pylist()
    }
    return live, tombs


def _state_of_rows(rows: pa.Table) -> tuple[set, set]:
    live, tombs = set(), set()
    for r in rows.to_pylist():
        if r["is_add"]:
            live.add((r["path"], r["st"], r["dvp"]))
        else:
            tombs.add((r["path"], r["ts"], r["st"], r["dvp"]))
    return live, tombs


def _expected_references(
    root: str, adds: pa.Table, removes: pa.Table, delete_before: int
) -> tuple[set, set, set]:
    """(written, keep, expired) as VACUUM computes them, from the full replay's tables."""
    protected: set[str] = set()
    gone: set[str] = set()
    for a in adds.select(["path", "deletionVector"]).to_pylist():
        protected.add(a["path"])
        if (dv := _dv_file(a.get("deletionVector"))) is not None:
            protected.add(dv)
    for r in removes.select(["path", "deletionTimestamp", "deletionVector"]).to_pylist():
        target = protected if (r["deletionTimestamp"] or 0) >= delete_before else gone
        target.add(r["path"])
        if (dv := _dv_file(r.get("deletionVector"))) is not None:
            target.add(dv)
    keep = set(reader_key_array(string_array(sorted(protected)), root).to_pylist())
    expired = {k for p in gone if (k := relative_key(p, root)) is not None} - keep
    return protected, keep, expired


def _cutoffs(removes: pa.Table) -> list[int]:
    """Retention cut-offs that protect every tombstone, none, and some but not all."""
    stamps = sorted({t for t in removes.column("deletionTimestamp").to_pylist() if t})
    out = [0, FAR_FUTURE]
    if stamps:
        out.append(stamps[len(stamps) // 2])
    return out


def _assert_same(storage: Storage, adds: pa.Table, removes: pa.Table) -> None:
    segment, rows = read_with_usable_checkpoint(storage, lambda s: reference_rows(storage, s))
    assert _state_of_rows(rows) == _expected_state(adds, removes), storage.root
    keys = rows.column("key").to_pylist()
    assert len(keys) == len(set(keys))  # one row per logical file
    # The deltas read one at a time, newest first, reconcile as when read all at once
    # (a compaction's lines in either order).
    blobs = read_deltas(storage, segment)
    for first_wins in (True, False):
        order = {"compaction_first_wins": first_wins}
        whole = commit_rows(segment, blobs, storage.root, batch_bytes=1 << 60, **order)
        one_by_one = commit_rows(segment, blobs, storage.root, batch_bytes=1, **order)
        assert one_by_one.sort_by("key").to_pylist() == whole.sort_by("key").to_pylist()
    for delete_before in _cutoffs(removes):
        refs = file_references(storage, segment, read_deltas(storage, segment), delete_before)
        written, keep, expired = _expected_references(storage.root, adds, removes, delete_before)
        assert set(refs.written.to_pylist()) == written, (storage.root, delete_before)
        assert set(refs.keep.to_pylist()) == keep, (storage.root, delete_before)
        assert refs.expired.to_pylist() == sorted(expired), (storage.root, delete_before)


def _assert_same_as_snapshot(storage: Storage) -> None:
    snap = load_snapshot(storage)
    _assert_same(storage, snap.files, snap.tombstones)


# ---- the corpus -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", all_corpus_tables())
def test_corpus_references_equal_the_full_replay(name):
    """Readable tables: the same state and references as `load_snapshot` (or, where the
    snapshot refuses the protocol or metadata, as the full replay it is built from);
    tables the full replay cannot read are refused by the references-only replay too."""
    storage = Storage.for_uri(str(corpus_path(name)))
    try:
        snap = load_snapshot(storage)
    except DeltaOpsError:
        try:
            _, state = read_with_usable_checkpoint(storage, lambda s: replay(storage, s))
        except DeltaOpsError as exc:
            with pytest.raises(DeltaOpsError) as refused:
                read_with_usable_checkpoint(storage, lambda s: reference_rows(storage, s))
            assert refused.value.table == exc.table == storage.root
            return
        _assert_same(storage, state.adds, state.removes)
        return
    _assert_same(storage, snap.files, snap.tombstones)


# ---- generated histories --------------------------------------------------------------------


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=histories(max_steps=6), data=st.data())
def test_generated_histories_with_compactions(tmp_path_factory, spec, data):
    root = tmp_path_factory.mktemp("refs") / "t"
    storage = Storage.for_uri(str(root))
    built = build_history(storage, spec)
    for start, end, form in data.draw(compaction_windows(len(built.versions)), "windows"):
        write_compaction(storage, start, end, form=form)
    _assert_same_as_snapshot(storage)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=raw_specs())
def test_raw_histories_with_checkpoints_of_every_kind(tmp_path_factory, spec):
    """V1 (classic, multi-part, incomplete multi-part) and V2 (JSON, Parquet, sidecars)
    checkpoints, compactions, absolute paths, `u` and inline DVs."""
    hist = build_raw(tmp_path_factory.mktemp("raw") / "t", {**spec, "outside": True})
    _assert_same_as_snapshot(hist.storage)


@pytest.mark.parametrize("form", ["databricks", "spec"])
def test_compaction_fixture_in_both_forms(tmp_path, form):
    template = build_compaction_table(tmp_path / "template")
    root = tmp_path / "t"
    shutil.copytree(template.root, root)
    storage = Storage.for_uri(str(root))
    write = write_databricks_compaction if form == "databricks" else write_spec_compaction
    for start, end in [(1, 5), (6, 12)]:
        write(storage, start, end)
    segment = load_snapshot(storage).segment
    assert [(d.start, d.end) for d in segment.deltas if d.is_compaction] == [(1, 5), (6, 12)]
    _assert_same_as_snapshot(storage)
    # Both commit readers (columnar, and action by action) give the same rows.
    blobs = read_deltas(storage, segment)
    columnar = _commit_rows_columnar(segment, blobs, storage.root)
    assert columnar is not None and columnar.num_rows > 0
    python = _commit_rows_python(segment, blobs, storage.root)
    assert columnar.sort_by("key").to_pylist() == python.sort_by("key").to_pylist()


def test_unusable_checkpoint_is_left_out_as_the_snapshot_does(tmp_path):
    """A corrupt checkpoint: both readers fall back to the commits, through one helper."""
    root = tmp_path / "t"
    shutil.copytree(corpus_path("kernel-defaults__basic-with-checkpoint"), root)
    storage = Storage.for_uri(str(root))
    (root / "_delta_log" / "00000000000000000010.checkpoint.parquet").write_bytes(b"junk")
    snap = load_snapshot(storage)
    assert snap.checkpoint_version is None
    segment, _ = read_with_usable_checkpoint(storage, lambda s: reference_rows(storage, s))
    assert segment.checkpoint is None and segment.version == snap.version
    _assert_same_as_snapshot(storage)


def test_missing_sidecar_without_fallback_names_table_version_and_file(tmp_path):
    from delta_ops.log.replay.full_replay import SidecarMissingError

    root = tmp_path / "t"
    shutil.copytree(corpus_path("kernel-defaults__kernel-pagination-v2-checkpoint-parquet"), root)
    log = root / "_delta_log"
    for p in log.iterdir():
        if p.name[:20].isdigit() and int(p.name[:20]) < 4:
            p.unlink()
    sidecar = next((log / "_sidecars").iterdir())
    sidecar.unlink()
    storage = Storage.for_uri(str(root))
    with pytest.raises(SidecarMissingError, match="can stand in") as info:
        read_with_usable_checkpoint(storage, lambda s: reference_rows(storage, s))
    err = info.value
    assert (err.table, err.version) == (storage.root, 4)
    assert err.file == f"_delta_log/_sidecars/{sidecar.name}"
    with pytest.raises(SidecarMissingError, match=sidecar.name):
        load_snapshot(storage)


def test_references_of_plain_paths_are_held_once_and_sorted():
    """Paths that name only themselves are their own listing keys: `keep` is `written`
    (one array, not two copies), sorted. An empty `expired` holds no part of the rows it
    was read from (an empty slice of them would keep their buffers for the whole run)."""
    storage = Storage.for_uri(str(corpus_path("kernel-defaults__basic-with-checkpoint")))
    segment = load_snapshot(storage).segment
    refs = file_references(storage, segment, None, 0)
    assert len(refs.keep) > 0
    assert refs.keep is refs.written
    assert refs.keep.to_pylist() == sorted(set(refs.keep.to_pylist()))
    assert len(refs.expired) == 0
    assert sum(b.size for b in refs.expired.buffers() if b is not None) <= 64


def test_a_column_with_one_non_empty_chunk_is_that_chunk_not_a_copy():
    """The state's rows are the commits' (often none) and the checkpoint's, concatenated:
    their path column is read as the checkpoint's own array, not copied (a second copy of
    every path at the references' peak)."""
    paths = pa.array(["a", "b", "c"])
    table = pa.Table.from_batches([
        pa.record_batch([paths.slice(0, 0)], names=["path"]),
        pa.record_batch([paths], names=["path"]),
        pa.record_batch([paths.slice(3, 0)], names=["path"]),
    ])
    got = _column(table, "path")
    assert got.to_pylist() == ["a", "b", "c"]
    assert got.buffers()[2].address == paths.buffers()[2].address
    two = pa.Table.from_batches([pa.record_batch([paths], names=["path"])] * 2)
    assert _column(two, "path").to_pylist() == ["a", "b", "c"] * 2
    assert len(_column(table.slice(0, 0), "path")) == 0
