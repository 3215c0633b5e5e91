"""`TableLike`: what every operation accepts as its table, and `Storage.of` resolves.

A `delta_ops.DeltaTable` (or anything else that carries a table's `Storage`, a
`HasStorage`), a `Storage` rooted at the table, or a table URI. Operations take a
`TableLike` first and resolve it with `Storage.of(table, storage_options)`, the one
resolver, before anything else.
"""

from __future__ import annotations

import os
from typing import Protocol

from delta_ops.storage.contract import Storage


class HasStorage(Protocol):
    """Anything that carries the Storage of a table, as `delta_ops.DeltaTable` does."""

    @property
    def storage(self) -> Storage: ...


#: A DeltaTable (any `HasStorage`), a Storage rooted at the table, or a table URI (or a
#: local path, `pathlib.Path` too).
TableLike = Storage | HasStorage | str | os.PathLike

