"""Version checksums (`N.crc`): compute, write, backfill and verify.

Spec section: "Version Checksum File" (fields; writers write `N.crc` only after commit N and
never overwrite one; readers may validate a version against it). The object model, bin
boundaries and comparison live in `delta_ops.protocol.crc`; this module gets the state.

Two ways to compute version N's checksum:

* **full**: reconstruct the snapshot of N (checkpoint + commits) and aggregate it; the file
  size histogram is aggregated by the Engine, so on Spark it runs where the files are.
* **incremental**: `N-1.crc` plus commit N alone, as Spark's `incrementallyDeriveChecksum`
  does; the cost grows with the commit, not the table. It is used only when sound; otherwise
  (previous checksum missing, unreadable or incomplete, a remove without its size, a file
  key touched twice in the commit, an operation that re-adds live files such as COMPUTE
  STATS or a row-tracking backfill, or a result with a negative count) the full path runs.
  When `N-1.crc` lists `allFiles`, the new state is reconciled exactly from that list, so
  small tables need no trust in the commit at all.

Writing cross-checks before publishing: the bytes of a `.crc` are parsed again and compared
with the independent replay of the version (previous checkpoint + commits, never compaction
files) when the computation read compaction files, else with the state they were computed
from, which then is that replay or `N-1.crc` plus commit N; a difference raises
CrossCheckError and no file is written (`_cross_check`).

Computing and verifying only read the log (they work on tables with features delta_ops
does not know, such as variantType or collations, whose checksums Spark wrote); writing a
`.crc` passes the "checksum" feature gate first.

Incremental and full computation give the same checksum (a property test checks it on
random histories with deletion vectors, transactions, domain tombstones and in-commit
timestamps).

Verifying compares a recorded `.crc` with its version's state through one function,
`compare.compare_with_state` (`crc verify` and the Dagster check `checksum_matches` alike):
`allFiles` as a set keyed by file, statistics by meaning (JSON or a checkpoint's typed
`stats_parsed`). A log whose commits are large (a commit of a million adds) is aggregated
from the state rebuilt by bucket, its commits read in chunks (`log.snapshot.rebuild`).

Modules: `base` (policy, results, shared helpers), `full`, `incremental` (the two
computations), `compare` and `operations`; every name is importable from here as before.
"""

from __future__ import annotations

from delta_ops.errors import IncrementalChecksumUnavailableError
from delta_ops.log import read_checksum, read_commit
from delta_ops.maintenance.checksum.base import (
    DEFAULT_ALL_FILES_THRESHOLD,
    DEFAULT_POLICY,
    ChecksumBackfillResult,
    ChecksumMismatch,
    ChecksumPolicy,
    ChecksumWriteResult,
    ComputedChecksum,
    Method,
    VerifyResult,
    action_dict,
    checksum_path,
)
from delta_ops.maintenance.checksum.compare import compare_with_state
from delta_ops.maintenance.checksum.full import (
    checksum_from_snapshot,
)
from delta_ops.maintenance.checksum.incremental import (
    derive_checksum,
)
from delta_ops.maintenance.checksum.operations import (
    checksum_versions,
    compute_checksum,
    compute_version_checksum,
    verify_checksum,
    write_checksum,
    write_checksums,
)

__all__ = [
    "action_dict",
    "checksum_from_snapshot",
    "checksum_path",
    "checksum_versions",
    "compare_with_state",
    "ChecksumBackfillResult",
    "ChecksumMismatch",
    "ChecksumPolicy",
    "ChecksumWriteResult",
    "compute_checksum",
    "compute_version_checksum",
    "ComputedChecksum",
    "DEFAULT_ALL_FILES_THRESHOLD",
    "DEFAULT_POLICY",
    "derive_checksum",
    "IncrementalChecksumUnavailableError",
    "Method",
    "read_checksum",
    "read_commit",
    "verify_checksum",
    "VerifyResult",
    "write_checksum",
    "write_checksums",
]
