"""Which columns of OPTIMIZE's and PURGE's new files are written without a dictionary,
learnt from the inputs' Parquet footers (`DictionaryChoice`). The choice changes only the
encoding, never a value. No section of the Delta protocol is implemented here.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

#: pyarrow's dictionary page limit (`dictionary_pagesize_limit`, 1 MiB): past it a column
#: chunk falls back to plain encoding after hashing every value into the dictionary so far.
DICTIONARY_PAGE_LIMIT = 1024 * 1024

#: A column whose dictionary page is more than this share of its column chunk in an input
#: holds mostly distinct values there (an id, a measurement, a timestamp).
DISTINCT_DICTIONARY_SHARE = 0.5

#: An input whose dictionary page (uncompressed, estimated with its chunk's compression
#: ratio) reaches this share of `DICTIONARY_PAGE_LIMIT` was written up to the limit and fell
#: back (pyarrow, parquet-rs and parquet-mr all stop at 1 MiB): its later pages are plain,
#: so the dictionary page is a small share of the chunk although the values are distinct.
FULL_DICTIONARY_SHARE = 0.9

_DICTIONARY_ENCODINGS = frozenset({"PLAIN_DICTIONARY", "RLE_DICTIONARY"})


class DictionaryChoice:
    """Which output columns are written without a dictionary, learnt from the inputs' footers.

    pyarrow dictionary-encodes every column and falls back to plain encoding once a row
    group's dictionary passes `DICTIONARY_PAGE_LIMIT`; on a column of mostly distinct values
    the hashing before the fallback is wasted work and memory. A leaf column goes without a
    dictionary when every input seen so far shows it mostly distinct (no dictionary page,
    a dictionary page over `DISTINCT_DICTIONARY_SHARE` of its chunk, or one that filled
    the limit: `FULL_DICTIONARY_SHARE`) and the inputs' dictionaries together already pass
    the limit. Any other column keeps pyarrow's default.
    The choice changes only the encoding, never a value.
    """

    def __init__(self, file_schema: pa.Schema) -> None:
        # The Parquet leaf paths ("a.b", "l.list.element"): pyarrow's `use_dictionary` list
        # names leaves, and a leaf left out of it goes without a dictionary.
        buf = pa.BufferOutputStream()
        pq.write_table(file_schema.empty_table(), buf)
        schema = pq.ParquetFile(pa.BufferReader(buf.getvalue())).schema
        self.leaves = [schema.column(i).path for i in range(len(schema))]
        self.dictionary_bytes = dict.fromkeys(self.leaves, 0)
        self.distinct = set(self.leaves)

    def observe(self, metadata: pq.FileMetaData) -> None:
        for g in range(metadata.num_row_groups):
            rg = metadata.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                name = col.path_in_schema
                if name not in self.dictionary_bytes:
                    continue
                total = col.total_compressed_size
                if not col.has_dictionary_page:
                    if _DICTIONARY_ENCODINGS & set(col.encodings):
                        # Dictionary-encoded, its page not located (old writers left the
                        # offset out): no evidence either way, keep the default.
                        self.distinct.discard(name)
                    self.dictionary_bytes[name] += total
                    continue
                page = col.data_page_offset - (col.dictionary_page_offset or 0)
                self.dictionary_bytes[name] += page
                unpacked = page * col.total_uncompressed_size / max(total, 1)
                if (page <= DISTINCT_DICTIONARY_SHARE * total
                        and unpacked < FULL_DICTIONARY_SHARE * DICTIONARY_PAGE_LIMIT):
                    self.distinct.discard(name)

    def use_dictionary(self, always_plain: set[str]) -> bool | list[str]:
        """pyarrow's `use_dictionary`: True, or the leaves that keep a dictionary."""
        plain = {n for n in self.distinct
                 if self.dictionary_bytes[n] > DICTIONARY_PAGE_LIMIT} | always_plain
        if not plain & set(self.leaves):
            return True
        return [n for n in self.leaves if n not in plain]


__all__ = [
    "DICTIONARY_PAGE_LIMIT",
    "DISTINCT_DICTIONARY_SHARE",
    "FULL_DICTIONARY_SHARE",
    "DictionaryChoice",
]
