"""One exception tree for delta_ops.

Every error names what it is about: the table, and where it applies the version and the
file involved, so that a message on its own tells an operator what went wrong and where.

Every exception class of delta_ops lives here (the modules that raise one re-export it, so
`from delta_ops.protocol.crc import InvalidChecksumError` keeps working), except a few
private control-flow signals that never leave their module. Importing this module imports
nothing of delta_ops, so every layer can.
"""

from __future__ import annotations

from typing import Any


class DeltaOpsError(Exception):
    """Base class of every error delta_ops raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        version: int | None = None,
        file: str | None = None,
    ) -> None:
        self.table = table
        self.version = version
        self.file = file
        self.reason = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.table is not None:
            where.append(f"table {self.table}")
        if self.version is not None:
            where.append(f"version {self.version}")
        if self.file is not None:
            where.append(f"file {self.file}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def __reduce__(self):
        # Pickled with every attribute, whatever the subclass's constructor takes (the
        # default rebuilds an exception by calling it with its message alone): an error
        # raised in another process (a Spark executor's Python worker, a process pool)
        # comes back with its table, version, file and reason.
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type, args: tuple, state: dict) -> DeltaOpsError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class StorageError(DeltaOpsError):
    """A storage operation failed (I/O, permissions, unsupported scheme)."""


class MissingFileError(StorageError):
    """A file to read or open is not there (the store answered "not found")."""


class AtomicityUnsupportedError(StorageError):
    """The storage scheme has no atomic put-if-absent and the caller did not accept the risk."""


class CorruptLogError(DeltaOpsError):
    """The log is malformed: unparsable file, gap between versions, missing protocol/metadata."""


class VersionNotFoundError(DeltaOpsError):
    """The requested version (or timestamp) does not exist in the table's log."""


class NotATableError(DeltaOpsError):
    """No Delta log was found at the given location."""


class UnsupportedFeatureError(DeltaOpsError):
    """The table uses protocol features this operation does not support."""

    def __init__(self, message: str, *, features: list[str] | None = None, **kwargs) -> None:
        self.features = sorted(features or [])
        super().__init__(message, **kwargs)


class DeletionVectorError(DeltaOpsError):
    """A deletion vector descriptor or file is invalid (bad magic, checksum, size)."""


class RetentionError(DeltaOpsError, ValueError):
    """A destructive operation was asked to use a retention shorter than is safe, or one
    that is no retention (negative, beyond the longest accepted, not a duration). A
    ValueError too, as an invalid retention was before it was checked in one place."""


class CommitConflictError(DeltaOpsError):
    """A concurrent commit conflicts logically with ours and the transaction cannot be rebased."""


class EngineError(DeltaOpsError):
    """The execution engine (Spark session, executors) failed or is misconfigured."""


class InvalidCommitError(DeltaOpsError, ValueError):
    """The transaction's actions break a rule of the protocol (duplicate actions, removed
    features, a system domain, enabling row tracking too early...); nothing was written."""


class AppendOnlyError(InvalidCommitError):
    """The table is append-only (`delta.appendOnly=true`) and the commit removes data."""


class TableExistsError(CommitConflictError):
    """`create_table` found a table (a commit or checkpoint) already there."""


class CommitRetriesExhaustedError(CommitConflictError):
    """Every attempt lost the race to concurrent writers; the transaction gave up."""


class ProtocolUpgradeNotConfirmedError(DeltaOpsError):
    """An operation would add table features that lock other writers out, and nobody
    confirmed it; nothing was written."""


class ChecksumMismatchError(DeltaOpsError):
    """A version checksum (.crc) does not match the recomputed table state."""


class UnsafeDeletionError(DeltaOpsError):
    """A destructive operation could not prove a file safe to delete (it may be referenced
    under another spelling of its path, lie outside the table root, or be reached through
    a symbolic link); nothing was deleted."""


class InventoryError(DeltaOpsError):
    """A VACUUM inventory cannot be used: unreadable, lacking fields, older than the
    retention window, or naming paths outside the table root; nothing was deleted."""


class LiteVacuumUnavailableError(DeltaOpsError):
    """VACUUM LITE cannot see every file a full VACUUM would delete: the log no longer
    holds every commit since the last VACUUM (`_delta_log/_last_vacuum_info`); nothing
    was deleted. A full VACUUM (listing the table) removes them and makes lite possible
    again."""


class RestoreFilesMissingError(DeltaOpsError):
    """A restore needs data or deletion vector files that no longer exist (VACUUM, a
    lifecycle rule or a hand deleted them) or cannot be checked; nothing was committed."""


class CrossCheckError(CorruptLogError):
    """A state about to be published (checkpoint, compaction file, `.crc`) differs from the
    same version replayed through an independent path (the previous checkpoint plus the
    commits, never through compaction files); nothing was published.

    Attributes:
        published_count: live files (or actions) in the state that was to be published.
        independent_count: the same count in the independent replay.
        differing_file: the first file key that differs (sorted order), when one does.
    """

    def __init__(
        self,
        message: str,
        *,
        published_count: int | None = None,
        independent_count: int | None = None,
        differing_file: str | None = None,
        **kwargs,
    ) -> None:
        self.published_count = published_count
        self.independent_count = independent_count
        self.differing_file = differing_file
        super().__init__(message, **kwargs)


# ---- raised by one layer, kept here with the rest of the tree --------------------------------


class UnsupportedTypeError(UnsupportedFeatureError):
    """A Delta data type has no Arrow mapping (a type name the spec does not define)."""


class InvalidTablePropertyError(DeltaOpsError, ValueError):
    """A table property has a value the protocol does not allow (names key and value)."""

    def __init__(self, key: str, value: str, why: str, **kwargs: Any) -> None:
        self.key = key
        self.value = value
        super().__init__(f"table property {key}={value!r} is invalid: {why}", **kwargs)


class InvalidVariantError(CorruptLogError):
    """Bytes that are not a variant in the Parquet Variant binary encoding."""


class InvalidChecksumError(CorruptLogError):
    """A `.crc` file is not a valid version checksum (not JSON, wrong types, bad histogram)."""


class IncrementalChecksumUnavailableError(DeltaOpsError):
    """An incremental checksum was asked for but cannot be derived soundly."""


class CheckpointError(DeltaOpsError):
    """A checkpoint could not be written."""


class CheckpointRaceLost(CheckpointError):
    """A checkpoint file under a shared name (classic, multi-part) appeared, readable,
    while ours was written: another writer's, which is never replaced."""


class InvalidCheckpointRequestError(CheckpointError, ValueError):
    """The requested kind, format, parts or sidecar size is not allowed for this table."""


class CheckpointVerificationError(CheckpointError):
    """The checkpoint read back does not reproduce the snapshot; it was not published."""


class RebuildCheckError(CheckpointVerificationError):
    """A state reconciled by bucket (`log.snapshot.rebuild`) failed its own check: a bucket's
    winners differ from the independent aggregation, or spilled actions were lost; nothing
    was published."""


class UnusableCheckpointError(CorruptLogError):
    """A checkpoint cannot be read (corrupt Parquet or JSON, or a V2 checkpoint whose
    sidecar is missing); readers fall back to an older checkpoint or the commits."""


class SidecarMissingError(UnusableCheckpointError):
    """A V2 checkpoint names a sidecar file that is not there (the checkpoint is unusable)."""


class MissingSecretError(DeltaOpsError):
    """A storage option refers to an environment variable that is not set."""


class EmptyPrefixError(StorageError):
    """A table discovery prefix lists no directory at all: missing, mistyped or empty."""


class RegistryError(DeltaOpsError):
    """The registry file is missing, unreadable or invalid (one line per problem)."""

    def __init__(self, problems: list[str], *, file: str) -> None:
        self.problems = list(problems)
        if len(problems) == 1:
            message = f"invalid table registry: {problems[0]}"
        else:
            message = "invalid table registry:\n  " + "\n  ".join(problems)
        super().__init__(message, file=file)

    def _render(self) -> str:
        return f"{self.file}: {self.reason}" if self.file else self.reason


class InvalidPredicateError(DeltaOpsError, ValueError):
    """A layout `where` predicate that cannot be applied: it names a column that is not a
    partition column, or is outside the grammar `delta_ops.layout.predicate` documents."""


class RewriteError(DeltaOpsError):
    """A data file could not be rewritten by OPTIMIZE or PURGE (it does not fit the table
    schema, or holds another number of rows than its stats say); names the table and file."""


class StatsReadError(DeltaOpsError):
    """A data file (or its deletion vector) could not be read to compute its statistics."""
