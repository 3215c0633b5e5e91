"""The one place where delta_ops touches files: listing, reading, writing and deleting.

Every other module goes through a `Storage` rooted at a table (or any directory) and names
files by paths *relative to that root*. The package holds one contract and one module per
backend:

* `contract`: `Storage` and `FileInfo`, what the rest of delta_ops relies on: sorted
  listings (from a start name), atomic put-if-absent, atomic replace, idempotent delete,
  listings that do not follow symbolic links.
* `paths`: which relative paths a caller may pass (nothing can reach outside the root).
* `uri`: which backend serves a table URI (plain path, ``file:``, ``s3://``, ``memory://``,
  any other fsspec scheme).
* `backend`: the contract each backend implements, on backend-native paths.
* `names`: listing in two steps, names first (`walk_names`), then sizes and times of the
  files a caller still wants (`stat_files`).
* `local` (``file``): the local file system, through `os` directly (fast `os.scandir`
  listings, hard-link based atomic put-if-absent, `os.replace` for atomic overwrite).
* `s3` (``s3``; ``s3a://``/``s3n://`` are accepted as aliases): through s3fs, calling S3
  itself where the semantics matter: ``ListObjectsV2`` with ``StartAfter`` for log
  listings and a conditional ``PutObject`` (``If-None-Match: *``) for put-if-absent.
  Reads go through botocore's synchronous client alone (`s3_client`): s3fs is imported
  only when a write, a delete or a bulk listing needs it.
* `memory` (``memory``): fsspec's process-global in-memory file system, mutated under a
  lock so that put-if-absent is exclusive between threads.
* `generic`: any other protocol fsspec knows: reads work; writes that need atomicity are
  refused unless the caller explicitly accepts a best-effort (non-atomic) write.

s3fs, botocore and fsspec are imported only when a storage of their scheme is built.
Import `Storage`, `FileInfo` and `TableLike` (what operations accept as a table, in
`table_like`) from here (`from delta_ops.storage import Storage`).
"""

from __future__ import annotations

from delta_ops.storage.contract import FileInfo, Storage
from delta_ops.storage.table_like import HasStorage, TableLike

__all__ = ["FileInfo", "HasStorage", "Storage", "TableLike"]
