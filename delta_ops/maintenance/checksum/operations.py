"""The version checksum operations: compute, write (one version, or a backfill of a range)
and verify `.crc` files; writing cross-checks the bytes before they get their name.

Spec section: "Version Checksum File" (writers write `N.crc` only after commit N and never
overwrite one; readers may validate a version against it).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

from delta_ops.engine.base import Engine
from delta_ops.errors import (
    CrossCheckError,
    IncrementalChecksumUnavailableError,
    VersionNotFoundError,
)
from delta_ops.log import (
    ReadOptions,
    Snapshot,
    StateKind,
    build_log_segment,
    choose_state,
    list_log,
    load_snapshot,
    read_checksum,
    read_commit,
    rebuild_snapshot,
)
from delta_ops.maintenance.checksum.base import (
    DEFAULT_POLICY,
    ChecksumBackfillResult,
    ChecksumMismatch,
    ChecksumPolicy,
    ChecksumWriteResult,
    ComputedChecksum,
    Method,
    VerifyResult,
    _commit_path,
    _engine,
    _first_commit_info,
    checksum_path,
)
from delta_ops.maintenance.checksum.compare import compare_with_state
from delta_ops.maintenance.checksum.full import checksum_from_snapshot
from delta_ops.maintenance.checksum.incremental import derive_checksum
from delta_ops.maintenance.crosscheck import cross_check_snapshot
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.crc import (
    InvalidChecksumError,
    VersionChecksum,
    compare_checksums,
    parse_checksum,
)
from delta_ops.protocol.filenames import LogFileKind, checksum_name
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage, TableLike

# ---- the operations -----------------------------------------------------------------------


#: The largest commit (bytes of JSON) the incremental computation reads into memory; a
#: larger one (a CREATE TABLE AS SELECT of a million adds is hundreds of MB) takes the full
#: computation, which reads commits in bounded chunks.
INCREMENTAL_MAX_COMMIT_BYTES = 64 * 1024 * 1024


def _load(
    storage: Storage,
    version: int | None,
    engine: Engine | None,
    stack: ExitStack,
    read_options: ReadOptions | None,
) -> Snapshot:
    """The snapshot a full computation aggregates, in memory that does not grow with the
    table: streamed when its checkpoint is large (`log.replay.streamed_actions`); rebuilt by bucket
    when it has no checkpoint and its commits are large (`log.snapshot.rebuild`: the commits read in
    chunks of 32 MiB, a big commit in pieces; on the local engine, whose aggregation reads the
    spill in this process), its spill files removed when `stack` closes. The thresholds are
    `read_options`'s, else the environment's (`ReadOptions.from_env`)."""
    if read_options is None:
        read_options = ReadOptions.from_env()
    state = choose_state(
        storage, version, read_options, may_rebuild=not _engine(engine).distributed
    )
    if state is StateKind.REBUILT:
        rebuilt = rebuild_snapshot(storage, version, buckets=read_options.rebuild_buckets)
        return stack.enter_context(rebuilt).snapshot
    return load_snapshot(storage, version, stream=state is StateKind.STREAMED)


def _incremental_commit_too_large(storage: Storage, version: int) -> str | None:
    """Why commit `version` is not read whole for the incremental computation, or None."""
    info = storage.info(_commit_path(version))
    if info is not None and info.size > INCREMENTAL_MAX_COMMIT_BYTES:
        return (
            f"commit {version} holds {info.size} bytes of JSON, more than the incremental "
            f"computation reads at once ({INCREMENTAL_MAX_COMMIT_BYTES})"
        )
    return None


def _latest_version(storage: Storage) -> int:
    return build_log_segment(storage).version


def compute_version_checksum(
    table_or_storage: TableLike,
    *,
    version: int | None = None,
    engine: Engine | None = None,
    method: Method = "auto",
    policy: ChecksumPolicy = DEFAULT_POLICY,
    storage_options: Mapping[str, Any] | None = None,
    read_options: ReadOptions | None = None,
) -> ComputedChecksum:
    """Compute version `version`'s checksum (latest when None).

    Args:
        table_or_storage: a DeltaTable, Storage or table URI.
        version: the version; None for the latest.
        engine: for the full computation (LocalEngine when None).
        method: "auto" (incremental when `version-1.crc` allows it, else full), "full" or
            "incremental" (raise IncrementalChecksumUnavailableError when not possible).
        policy: optional content.
        storage_options: Used when `table_or_storage` is a URI (see `Storage.for_uri`).
        read_options: the log's reading thresholds for a full computation (None: the
            environment's, `ReadOptions.from_env`).

    Raises:
        VersionNotFoundError, CorruptLogError, NotATableError: the version cannot be read.
        UnsupportedFeatureError: the table cannot be read by delta_ops.
        IncrementalChecksumUnavailableError: method="incremental" and it is not sound.
    """
    storage = Storage.of(table_or_storage, storage_options)
    with ExitStack() as stack:
        computed, _ = _compute(storage, version, engine, method, policy, stack, read_options)
    return computed


def _compute(
    storage: Storage,
    version: int | None,
    engine: Engine | None,
    method: Method,
    policy: ChecksumPolicy,
    stack: ExitStack,
    read_options: ReadOptions | None = None,
) -> tuple[ComputedChecksum, Snapshot | None]:
    """`compute_version_checksum`, also returning the snapshot of a full computation
    (valid until `stack` closes)."""
    if method not in ("auto", "full", "incremental"):
        raise ValueError(f"method must be auto, full or incremental, not {method!r}")
    if version is None:
        version = _latest_version(storage)
    reason = "method full was asked for"
    if method != "full":
        reason = "version 0 has no previous version"
        if version > 0:
            try:
                previous = read_checksum(storage, version - 1)
            except InvalidChecksumError as exc:
                previous, reason = None, f"the previous checksum is invalid: {exc.reason}"
            else:
                if previous is None:
                    reason = f"version {version - 1} has no checksum file"
            if previous is not None and (
                large := _incremental_commit_too_large(storage, version)
            ):
                previous, reason = None, large
            if previous is not None:
                actions = read_commit(storage, version)
                checksum, reason = derive_checksum(
                    previous, actions, version=version, table=storage.root, policy=policy
                )
                if checksum is not None:
                    return ComputedChecksum(version, checksum, "incremental"), None
        if method == "incremental":
            raise IncrementalChecksumUnavailableError(
                f"cannot derive the checksum incrementally: {reason}",
                table=storage.root, version=version,
            )
    snapshot = _load(storage, version, engine, stack, read_options)
    checksum = checksum_from_snapshot(snapshot, engine=engine, policy=policy)
    return ComputedChecksum(version, checksum, "full", reason), snapshot


def compute_checksum(
    table_or_storage: TableLike,
    *,
    version: int | None = None,
    engine: Engine | None = None,
    method: Method = "auto",
    policy: ChecksumPolicy = DEFAULT_POLICY,
    storage_options: Mapping[str, Any] | None = None,
    read_options: ReadOptions | None = None,
) -> dict[str, Any]:
    """The checksum object `write_checksum` would write for `version` (latest when None).

    See `compute_version_checksum` for the arguments and errors.
    """
    return compute_version_checksum(
        table_or_storage, version=version, engine=engine, method=method, policy=policy,
        storage_options=storage_options, read_options=read_options,
    ).checksum.to_dict()


def write_checksum(
    table_or_storage: TableLike,
    *,
    version: int | None = None,
    engine: Engine | None = None,
    method: Method = "auto",
    policy: ChecksumPolicy | None = None,
    storage_options: Mapping[str, Any] | None = None,
    read_options: ReadOptions | None = None,
) -> ChecksumWriteResult:
    """Write `version.crc` (latest version when None) unless it exists.

    The file is created with an atomic put-if-absent, only after commit `version` exists,
    and never overwrites an existing checksum: that is an `already_existed` result.
    `table_or_storage` is a DeltaTable, Storage or table URI (opened with
    `storage_options`); the other arguments are those of `compute_version_checksum` (a
    `policy` of None is `DEFAULT_POLICY`).

    Raises:
        VersionNotFoundError: commit `version` does not exist.
        UnsupportedFeatureError: the table's protocol does not allow delta_ops to write.
        CrossCheckError: the checksum differs from the independent replay (nothing written).
        See also `compute_version_checksum`.
    """
    storage = Storage.of(table_or_storage, storage_options)
    policy = DEFAULT_POLICY if policy is None else policy
    if version is None:
        version = _latest_version(storage)
    path = checksum_path(version)
    if storage.exists(path):
        return ChecksumWriteResult(storage.root, version, path, False, True)
    if not storage.exists(_commit_path(version)):
        raise VersionNotFoundError(
            "the commit does not exist; a checksum is written only after its commit",
            table=storage.root, version=version, file=_commit_path(version),
        )
    with ExitStack() as stack:
        computed, snapshot = _compute(
            storage, version, engine, method, policy, stack, read_options
        )
        return _put(storage, computed, snapshot=snapshot, engine=engine, policy=policy)


def _put(
    storage: Storage,
    computed: ComputedChecksum,
    *,
    snapshot: Snapshot | None,
    engine: Engine | None,
    policy: ChecksumPolicy,
) -> ChecksumWriteResult:
    version = computed.version
    assert computed.checksum.protocol is not None
    config = TableConfiguration(
        computed.checksum.protocol, Metadata(computed.checksum.metadata or {}), version,
        storage.root,
    )
    config.ensure_supported("checksum")
    path = checksum_path(version)
    data = computed.checksum.to_json()
    note = _cross_check(storage, computed, data, snapshot, engine=engine, policy=policy)
    written = storage.put_if_absent(path, data)
    return ChecksumWriteResult(
        storage.root, version, path, written, not written, computed.method,
        computed.fallback_reason, note,
    )


def _cross_check(
    storage: Storage,
    computed: ComputedChecksum,
    data: bytes,
    snapshot: Snapshot | None,
    *,
    engine: Engine | None,
    policy: ChecksumPolicy,
) -> str:
    """Check the bytes of a `.crc` before they get their name; returns what was checked.

    The bytes are parsed again and compared field by field (`compare_checksums`: numFiles,
    tableSizeBytes, numMetadata, numProtocol, the histograms, DV counts, txns, domains,
    metadata, protocol, allFiles) with a reference: the checksum of the independent replay
    (previous checkpoint + commits) when the snapshot was read through compaction files,
    after the two states were compared file by file; else the state the checksum was
    computed from, which then is itself the commits-only replay (full computation) or
    `N-1.crc` plus commit N (incremental: no compaction file is read).

    Raises:
        CrossCheckError: the bytes or the state differ from the reference; nothing written.
    """
    version = computed.version
    reference = computed.checksum
    if snapshot is None:
        note = (
            f"derived from {checksum_name(version - 1)} and commit {version} (no compaction "
            "file read); the bytes to publish were read back and compared with it"
        )
    else:
        path = cross_check_snapshot(snapshot, operation="crc write")
        note = path.note
        if path.replayed:
            assert path.snapshot is not None
            reference = checksum_from_snapshot(path.snapshot, engine=engine, policy=policy)
    try:
        decoded = parse_checksum(data)
    except InvalidChecksumError as exc:
        raise CrossCheckError(
            f"crc write refused: the checksum to publish cannot be read back: {exc.reason}",
            table=storage.root, version=version, file=checksum_path(version),
        ) from exc
    mismatches = compare_checksums(decoded, reference)
    if mismatches:
        fields = ", ".join(
            f"{m.field} {str(m.recorded)[:80]} against {str(m.computed)[:80]}"
            for m in mismatches
        )
        raise CrossCheckError(
            f"crc write refused: the checksum to publish (numFiles {decoded.num_files}) "
            f"differs from the independent reference (numFiles {reference.num_files}) in "
            f"{fields}; nothing was published",
            table=storage.root, version=version, file=checksum_path(version),
            published_count=decoded.num_files, independent_count=reference.num_files,
        )
    return note


def write_checksums(
    table_or_storage: TableLike,
    *,
    start: int,
    end: int,
    engine: Engine | None = None,
    policy: ChecksumPolicy = DEFAULT_POLICY,
    storage_options: Mapping[str, Any] | None = None,
    read_options: ReadOptions | None = None,
) -> ChecksumBackfillResult:
    """Write the missing `.crc` files of versions `start`..`end` (inclusive), cheaply.

    One full computation at most per unsound step: each version's checksum is derived from
    the previous one (written or existing) and its commit alone. `table_or_storage` is a
    DeltaTable, Storage or table URI (opened with `storage_options`); `read_options` tunes
    the full computations' reads (None: `ReadOptions.from_env`).

    Raises:
        ValueError: start > end or start < 0.
        VersionNotFoundError: a commit in the range does not exist.
    """
    if start < 0 or start > end:
        raise ValueError(f"invalid version range {start}..{end}")
    storage = Storage.of(table_or_storage, storage_options)
    previous: VersionChecksum | None = None
    if start > 0:
        try:
            previous = read_checksum(storage, start - 1)
        except InvalidChecksumError:
            previous = None
    written: list[int] = []
    existed: list[int] = []
    full = incremental = 0
    for version in range(start, end + 1):
        try:
            existing = read_checksum(storage, version)
        except InvalidChecksumError:
            existing = None
            existed.append(version)  # present but invalid: never overwritten
            previous = None
            continue
        if existing is not None:
            existed.append(version)
            previous = existing
            continue
        if not storage.exists(_commit_path(version)):
            raise VersionNotFoundError(
                "the commit does not exist", table=storage.root, version=version,
                file=_commit_path(version),
            )
        checksum = None
        reason = "no previous checksum"
        actions = None
        if previous is not None and (large := _incremental_commit_too_large(storage, version)):
            previous, reason = None, large
        if previous is not None:
            actions = read_commit(storage, version)
            checksum, reason = derive_checksum(
                previous, actions, version=version, table=storage.root, policy=policy
            )
        with ExitStack() as stack:
            snapshot = None
            if checksum is not None:
                computed = ComputedChecksum(version, checksum, "incremental")
                incremental += 1
            else:
                snapshot = _load(storage, version, engine, stack, read_options)
                checksum = checksum_from_snapshot(
                    snapshot, engine=engine,
                    commit_info=None if actions is None else _first_commit_info(actions),
                    policy=policy,
                )
                computed = ComputedChecksum(version, checksum, "full", reason)
                full += 1
            result = _put(
                storage,
                computed,
                snapshot=snapshot if computed.method == "full" else None,
                engine=engine,
                policy=policy,
            )
        (written if result.written else existed).append(version)
        previous = checksum
    return ChecksumBackfillResult(
        storage.root, start, end, tuple(written), tuple(existed), full, incremental
    )


def checksum_versions(storage: Storage) -> list[int]:
    """Versions that have a `.crc` file, ascending."""
    return [lf.version for lf, _ in list_log(storage) if lf.kind == LogFileKind.CHECKSUM]


def verify_checksum(
    table_or_storage: TableLike,
    *,
    version: int | None = None,
    all_versions: bool = False,
    engine: Engine | None = None,
    storage_options: Mapping[str, Any] | None = None,
    read_options: ReadOptions | None = None,
) -> VerifyResult:
    """Recompute the state of versions with a `.crc` and compare it field by field.

    Every field present in both the recorded and the recomputed checksum is compared (old
    files without metadata, protocol or histograms are verified on what they have); the
    histogram is recomputed with the recorded bin boundaries; `allFiles` is compared when
    recorded, as a set keyed by file, statistics by meaning (`compare.compare_with_state`,
    which the Dagster check `checksum_matches` uses through this function).

    Args:
        table_or_storage: a DeltaTable, Storage or table URI.
        version: the version to verify (latest when None and not `all_versions`).
        all_versions: verify every `.crc` in the log.
        engine: for the recomputation.
        storage_options: Used when `table_or_storage` is a URI (see `Storage.for_uri`).
        read_options: the log's reading thresholds (None: `ReadOptions.from_env`).

    Raises:
        VersionNotFoundError: `version` has no `.crc` file (with `all_versions`: the log
            has none).
    """
    storage = Storage.of(table_or_storage, storage_options)
    if all_versions:
        if version is not None:
            raise ValueError("give either a version or all_versions, not both")
        versions = checksum_versions(storage)
        if not versions:  # nothing checked is not a pass
            raise VersionNotFoundError(
                "there is no version checksum file to verify: the log holds no .crc file",
                table=storage.root)
    else:
        if version is None:
            version = _latest_version(storage)
        if not storage.exists(checksum_path(version)):
            raise VersionNotFoundError(
                "there is no version checksum file to verify",
                table=storage.root, version=version, file=checksum_path(version),
            )
        versions = [version]
    mismatches: list[ChecksumMismatch] = []
    removed: list[int] = []
    latest = _latest_version(storage) if all_versions else None
    for v in versions:
        found = _verify_one(storage, v, engine, read_options)
        if (latest is not None and v < latest and len(found) == 1
                and found[0].field == "version"):
            # Below where the log now starts: another writer's log cleanup left the .crc.
            removed.append(v)
            continue
        mismatches.extend(found)
    checked = tuple(v for v in versions if v not in removed)
    if not checked:  # nothing checked is not a pass
        raise VersionNotFoundError(
            "there is no verifiable version checksum file: the .crc of version(s) "
            f"{', '.join(map(str, removed))} remain from commits log cleanup removed",
            table=storage.root)
    return VerifyResult(storage.root, not mismatches, checked, tuple(mismatches),
                        tuple(removed))


def _verify_one(
    storage: Storage, version: int, engine: Engine | None, read_options: ReadOptions | None
) -> list[ChecksumMismatch]:
    try:
        recorded = read_checksum(storage, version)
    except InvalidChecksumError as exc:
        return [ChecksumMismatch(version, "file", exc.reason, None)]
    if recorded is None:  # deleted since listed
        return []
    with ExitStack() as stack:
        try:
            snapshot = _load(storage, version, engine, stack, read_options)
        except VersionNotFoundError as exc:
            return [ChecksumMismatch(version, "version", "checksum file present", exc.reason)]
        return [
            ChecksumMismatch(version, m.field, m.recorded, m.computed)
            for m in compare_with_state(recorded, snapshot, engine=engine)
        ]
