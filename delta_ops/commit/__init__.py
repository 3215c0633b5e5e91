"""Optimistic commits: transactions, conflict checks, protocol upgrades, row IDs.

Spec sections: "Requirements for Writers", "Creation of New Log Entries", "Commit Provenance
Information", "In-Commit Timestamps", "Table Features" (protocol upgrades), "Domain
Metadata", "Row Tracking". Modules:

- `transaction`: `Transaction` (plan, put-if-absent, conflict check, rebase, retry) and
  `CommitResult`.
- `writes`: `create_table`, `append_files`.
- `conflicts`: what a winning concurrent commit must not have done (pure).
- `actions`: per-commit rules (unique actions, append-only, no feature removal) (pure).
- (`protocol.upgrade`: adding table features to a protocol, pure, re-exported here.)
- `row_ids`: row ID high-water mark, fresh ID assignment, invariants (pure).
- `row_counts`: row counts from Parquet footers through the Engine.
- `refresh`: bring a snapshot up to date from the commits after it.
- `errors`: the package's error classes.
"""

from delta_ops.commit.actions import normalize_metadata, normalize_protocol
from delta_ops.commit.conflicts import Footprint, WinningCommit, check_winning_commit
from delta_ops.commit.refresh import refresh_snapshot
from delta_ops.commit.row_counts import footer_row_counts
from delta_ops.commit.transaction import (
    DEFAULT_MAX_RETRIES,
    ENGINE_INFO,
    CommitResult,
    Transaction,
    system_clock,
)
from delta_ops.commit.writes import append_files, create_table
from delta_ops.errors import (
    AppendOnlyError,
    CommitRetriesExhaustedError,
    InvalidCommitError,
    TableExistsError,
)
from delta_ops.protocol.upgrade import feature_closure, protocol_with_features

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "ENGINE_INFO",
    "AppendOnlyError",
    "CommitResult",
    "CommitRetriesExhaustedError",
    "Footprint",
    "InvalidCommitError",
    "TableExistsError",
    "Transaction",
    "WinningCommit",
    "append_files",
    "check_winning_commit",
    "create_table",
    "feature_closure",
    "footer_row_counts",
    "normalize_metadata",
    "normalize_protocol",
    "protocol_with_features",
    "refresh_snapshot",
    "system_clock",
]
