"""Cross-check with delta-rs: for every corpus table it loads, the live file set is ours."""

from __future__ import annotations

from deltalake import DeltaTable as RsTable

from delta_ops.table import DeltaTable
from delta_ops_tests.support.broken_tables import BROKEN
from delta_ops_tests.support.corpus import all_corpus_tables, corpus_path
from delta_ops_tests.support.oracle import _abs_key


def _rs_files(root) -> set[str] | None:
    try:
        t = RsTable(str(root))
        paths = t.get_add_actions(flatten=False).column("path").to_pylist()
    except Exception:  # noqa: BLE001 - delta-rs raises many types; "cannot load" is all we need
        return None
    return {_abs_key(p, root) for p in paths}


def test_live_files_match_deltalake():
    compared, not_loaded, mismatched = [], [], {}
    for name in all_corpus_tables():
        if name in BROKEN:
            continue
        root = corpus_path(name)
        theirs = _rs_files(root)
        if theirs is None:
            not_loaded.append(name)
            continue
        snap = DeltaTable(str(root)).snapshot()
        ours = {_abs_key(p, root) for p in snap.files.column("path").to_pylist()}
        if ours != theirs:
            mismatched[name] = (sorted(ours ^ theirs))[:5]
        compared.append(name)
    assert not mismatched, mismatched
    # delta-rs loads most of the corpus; a drop here means the cross-check stopped checking.
    assert len(compared) >= 100, (len(compared), not_loaded)
