"""Deletion-vector files of corpus tables: the corpus quirks (prefixed DV file names, the
special-character table's template path), the resolver from a descriptor to its file, and
the decoder to a row set (shared by the deletion-vector tests)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from urllib.parse import unquote

from delta_ops.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    RoaringBitmap64,
    inline_dv_bitmap,
    read_dv_from_file_bytes,
)
from delta_ops_tests.support.corpus import corpus_path

PREFIXED_DV_FILE_TABLES = frozenset(
    {
        "spark__table-with-dv-small",
        "spark__table-with-dv-large",
        "spark__table-with-dv-gigantic",
        "spark__partitioned-table-with-dv-large",
    }
)


SPECIAL_CHAR_TABLE = "spark__table-with-dv-special-char"
SPECIAL_CHAR_TEMPLATE = "file:{{FOLDER_WITH_SPECIAL_CHAR}}/"
SPECIAL_CHAR_FOLDER = "folder&with%special char"


def resolve_dv_file(table: str, d: DeletionVectorDescriptor) -> Path:
    """Local file holding a `u` or `p` DV of a corpus table (corpus quirks: module doc)."""
    root = corpus_path(table)
    if d.storage_type == "u":
        path = root / d.relative_path()
        if table not in PREFIXED_DV_FILE_TABLES:
            return path
        assert not path.exists(), f"{table} no longer needs the prefix workaround"
        matches = list(path.parent.glob(f"*deletion_vector_{d.file_uuid()}.bin"))
        assert len(matches) == 1, matches
        return matches[0]
    assert d.storage_type == "p" and table == SPECIAL_CHAR_TABLE, (table, d)
    uri = d.absolute_path(str(root))
    assert uri is not None and uri.startswith(SPECIAL_CHAR_TEMPLATE), uri
    return root / SPECIAL_CHAR_FOLDER / unquote(uri[len(SPECIAL_CHAR_TEMPLATE) :])


@cache
def _file_bytes(path: Path) -> bytes:
    return path.read_bytes()


def decode_dv(table: str, d: DeletionVectorDescriptor) -> RoaringBitmap64:
    if d.storage_type == "i":
        return inline_dv_bitmap(d)
    path = resolve_dv_file(table, d)
    assert d.offset is not None
    return read_dv_from_file_bytes(
        _file_bytes(path), d.offset, d.size_in_bytes,
        expected_cardinality=d.cardinality, file=str(path),
    )
