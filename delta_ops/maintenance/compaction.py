"""Log compaction: write `x.y.compacted.json`, and the policy that decides which ranges.

Spec section: "Log Compaction Files" (a compaction holds the action reconciliation of
commits x..y; readers may use it instead of those commits), with "Action Reconciliation"
for what survives: the latest `add`/`remove` per file key (path + deletion vector id;
removes stay as tombstones, since an earlier checkpoint may still list the file), the latest
`txn` per appId, the latest `domainMetadata` per domain (removed ones stay as tombstones for
the same reason), and the latest `protocol` and `metaData` when the range has one. No
`commitInfo`, no `cdc`: they are per-commit information, not state.

Reading compactions is the log segment's job (`delta_ops.log.segment.log_segment`); this module
writes them. Before the file gets its name, its bytes are read back with the log reader and compared
with the log reader's replay of the commits it covers (`_cross_check`; CrossCheckError and
nothing written on a difference). The file appears atomically (put-if-absent) and an
existing file under the same name is never replaced: it is an `already_existed` result, with
a check of whether it reconciles to the same actions (read with the log reader's rule, so a
Databricks-form file, newest commit first with repeated keys, is read right).

The policy (`compaction_plan`) compacts the commits after the latest checkpoint in fixed
windows of `interval` commits starting right after that checkpoint. It is off by default
(`DEFAULT_COMPACTION_INTERVAL` is None): delta-kernel-rs switched log compaction off for
insufficient integration coverage once, and readers that ignore compactions gain nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from delta_ops.errors import CorruptLogError, CrossCheckError, VersionNotFoundError
from delta_ops.log import (
    Delta,
    LogSegment,
    ReplayState,
    Snapshot,
    build_log_segment,
    delta_lines_oldest_first,
    list_log,
    parse_json_actions,
    read_checksum,
    read_commit,
    read_protocol_metadata,
)
from delta_ops.log import (
    complete_checkpoints as _complete_checkpoints,
)
from delta_ops.log import (
    replay_segment as replay,
)
from delta_ops.maintenance.crosscheck import first_difference, readable_key
from delta_ops.protocol.actions import file_key
from delta_ops.protocol.crc import InvalidChecksumError
from delta_ops.protocol.filenames import (
    LOG_DIR,
    LogFile,
    LogFileKind,
    commit_name,
    compaction_name,
)
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import FileInfo, Storage, TableLike

#: Off until a table (or the registry's policy) asks for it.
DEFAULT_COMPACTION_INTERVAL: int | None = None
#: Table property read by `compaction_interval` (delta_ops' own; Delta defines none).
COMPACTION_INTERVAL_PROPERTY = "delta.logCompactionInterval"

# Actions kept by reconciliation, in the order they are written.
_ORDER = ("protocol", "metaData", "txn", "domainMetadata", "add", "remove")


@dataclass(frozen=True)
class CompactionResult:
    """Outcome of compacting commits `start`..`end`.

    Attributes:
        file: the compaction file, relative to the table root.
        num_actions: actions in the compaction we computed.
        already_existed: a file with that name was already there (it was not replaced).
        existing_matches: when it already existed: whether its actions reconcile to the
            same state as ours (False means the existing file is wrong for its range).
    """

    table: str
    start: int
    end: int
    file: str
    num_actions: int
    already_existed: bool
    existing_matches: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "start": self.start,
            "end": self.end,
            "file": self.file,
            "num_actions": self.num_actions,
            "already_existed": self.already_existed,
            "existing_matches": self.existing_matches,
        }


def reconcile_actions(commits: Iterable[Sequence[Mapping[str, Any]]], *, root: str) -> list[dict]:
    """Action reconciliation of consecutive commits, oldest first. Pure.

    Within a commit a later line wins over an earlier one for the same key, as readers do.

    Args:
        commits: the actions of each commit, oldest commit first.
        root: the table root URI (to canonicalize absolute paths in file keys).

    Returns:
        The surviving actions as single-key dicts: protocol, metaData, txns (by appId),
        domainMetadata (by domain), adds, then removes.

    Raises:
        CorruptLogError: a file action without a path, or a txn/domain without its key.
    """
    protocol: dict | None = None
    metadata: dict | None = None
    txns: dict[str, dict] = {}
    domains: dict[str, dict] = {}
    files: dict[str, tuple[str, dict]] = {}
    for actions in commits:
        for action in actions:
            for kind in ("add", "remove"):
                body = action.get(kind)
                if body is None:
                    continue
                path = body.get("path")
                if not isinstance(path, str):
                    raise CorruptLogError(
                        f"{kind} action without a path: {body!r:.200}", table=root
                    )
                key = file_key(path, body.get("deletionVector"), root)
                files.pop(key, None)  # the newest occurrence decides the position
                files[key] = (kind, body)
            if (p := action.get("protocol")) is not None:
                protocol = p
            elif (m := action.get("metaData")) is not None:
                metadata = m
            elif (t := action.get("txn")) is not None:
                app = t.get("appId")
                if not isinstance(app, str):
                    raise CorruptLogError(f"txn action without an appId: {t!r:.200}", table=root)
                txns[app] = t
            elif (d := action.get("domainMetadata")) is not None:
                domain = d.get("domain")
                if not isinstance(domain, str):
                    raise CorruptLogError(
                        f"domainMetadata action without a domain: {d!r:.200}", table=root
                    )
                domains[domain] = d
    out: list[dict] = []
    if protocol is not None:
        out.append({"protocol": protocol})
    if metadata is not None:
        out.append({"metaData": metadata})
    out += [{"txn": t} for t in txns.values()]
    out += [{"domainMetadata": d} for d in domains.values()]
    out += [{kind: body} for kind, body in files.values() if kind == "add"]
    out += [{kind: body} for kind, body in files.values() if kind == "remove"]
    return out


def _canonical_set(actions: Iterable[Mapping[str, Any]]) -> set[bytes]:
    return {orjson.dumps(a, option=orjson.OPT_SORT_KEYS) for a in actions}


class _WithFile:
    """A Storage seen with one more file (the compaction about to be written): the log
    reader reads the bytes before they have a name. Everything else is the storage's."""

    def __init__(self, storage: Storage, path: str, data: bytes) -> None:
        self._storage = storage
        self._path = path
        self._data = data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def read(self, path: str) -> bytes:
        return self._data if path == self._path else self._storage.read(path)


def _range_state(storage: Any, deltas: Sequence[Delta], end: int) -> ReplayState:
    return replay(storage, LogSegment(storage.root, end, None, tuple(deltas), ()))


def _file_rows(actions: Any) -> list[bytes]:
    rows = actions.to_pylist(maps_as_pydicts="strict")
    return sorted(orjson.dumps(r, default=str, option=orjson.OPT_SORT_KEYS) for r in rows)


def _cross_check(storage: Storage, start: int, end: int, data: bytes) -> None:
    """Read the compaction about to be written back with the log reader and compare it with
    the log reader's replay of commits start..end (an implementation independent of
    `reconcile_actions`): every add and remove (all fields), protocol, metadata, txns and
    domains.

    Raises:
        CrossCheckError: they differ; nothing was written.
    """
    path = f"{LOG_DIR}/{compaction_name(start, end)}"
    commits = []
    for v in range(start, end + 1):
        info = storage.info(f"{LOG_DIR}/{commit_name(v)}")
        if info is None:
            raise VersionNotFoundError(
                "the commit does not exist", table=storage.root, version=v,
                file=f"{LOG_DIR}/{commit_name(v)}",
            )
        commits.append(Delta(v, v, info))
    independent = _range_state(storage, commits, end)
    staged = FileInfo(path, len(data), 0)
    ours = _range_state(_WithFile(storage, path, data), [Delta(start, end, staged)], end)
    root = storage.root
    for what, mine, theirs in (("add", ours.adds, independent.adds),
                               ("remove", ours.removes, independent.removes)):
        a, b = _file_rows(mine), _file_rows(theirs)
        if a == b:
            continue
        ka = sorted(file_key(r["path"], r.get("deletionVector"), root) for r in mine.to_pylist())
        kb = sorted(
            file_key(r["path"], r.get("deletionVector"), root) for r in theirs.to_pylist()
        )
        diff = first_difference(pa.array(ka, pa.string()), pa.array(kb, pa.string()))
        if diff is None:  # same keys: a field differs; name the first such file
            first = next(x for x, y in zip(a, b, strict=True) if x != y)
            key = readable_key(orjson.loads(first)["path"])
        else:
            key = readable_key(diff[0])
        raise CrossCheckError(
            f"compaction refused: {compaction_name(start, end)} read back holds {len(a)} "
            f"{what} actions, the commits {start}..{end} replayed hold {len(b)}; first "
            f"differing file: {key}; nothing was published",
            table=root, version=end, file=path,
            published_count=len(a), independent_count=len(b), differing_file=key,
        )
    for what, x, y in (
        ("protocol", ours.protocol, independent.protocol),
        ("metaData", None if ours.metadata is None else ours.metadata.raw,
         None if independent.metadata is None else independent.metadata.raw),
        ("txn", {k: t.to_dict() for k, t in ours.txns.items()},
         {k: t.to_dict() for k, t in independent.txns.items()}),
        ("domainMetadata", {k: d.to_dict() for k, d in ours.domains.items()},
         {k: d.to_dict() for k, d in independent.domains.items()}),
    ):
        if x != y:
            n = ours.adds.num_rows
            raise CrossCheckError(
                f"compaction refused: {compaction_name(start, end)} read back differs from "
                f"the commits {start}..{end} replayed in {what} ({str(x)[:200]} against "
                f"{str(y)[:200]}; {n} add actions on both sides); nothing was published",
                table=root, version=end, file=path,
                published_count=n, independent_count=independent.adds.num_rows,
            )


def _configuration_at(
    storage: Storage, start: int, end: int, range_newest_first: Sequence[list[dict]]
) -> TableConfiguration:
    """The table configuration in force at the end of the range, found cheaply.

    The newest protocol and metaData actions inside the range (its commits are already
    parsed); what the range lacks comes from `start-1.crc`, else from the log's light replay
    of version `start-1`.
    """
    found: dict[str, Any] = {}
    for actions in range_newest_first:
        for action in reversed(actions):
            for key in ("protocol", "metaData"):
                if key not in found and (value := action.get(key)) is not None:
                    found[key] = value
    if len(found) < 2 and start > 0:
        try:
            recorded = read_checksum(storage, start - 1)
        except InvalidChecksumError:
            recorded = None
        if recorded is not None and recorded.protocol is not None and recorded.metadata is not None:
            found.setdefault("protocol", recorded.protocol)
            found.setdefault("metaData", recorded.metadata)
        else:
            before = read_protocol_metadata(storage, build_log_segment(storage, start - 1))
            found.setdefault("protocol", before.protocol)
            found.setdefault("metaData", before.metadata)
    return TableConfiguration.of(
        found.get("protocol"), found.get("metaData"), table=storage.root, version=end
    )


def compact_log(
    table_or_storage: TableLike,
    *,
    start: int,
    end: int,
    storage_options: Mapping[str, Any] | None = None,
) -> CompactionResult:
    """Write `start.end.compacted.json` holding the reconciliation of commits start..end.

    Args:
        table_or_storage: a DeltaTable, Storage or table URI.
        start: first commit of the range.
        end: last commit of the range (> start: one commit is its own compaction).
        storage_options: Used when `table_or_storage` is a URI (see `Storage.for_uri`).

    Raises:
        ValueError: an empty or one-commit range, or a negative start.
        VersionNotFoundError: a commit of the range does not exist.
        UnsupportedFeatureError: the table's protocol does not allow delta_ops to write.
        CorruptLogError: a commit is not valid JSON or has malformed actions.
        CrossCheckError: the file read back with the log reader differs from the log
            reader's replay of the commits; nothing was written.
    """
    if start < 0 or end <= start:
        raise ValueError(
            f"a compaction covers at least two commits (start < end); got {start}..{end}"
        )
    storage = Storage.of(table_or_storage, storage_options)
    commits = [read_commit(storage, v) for v in range(start, end + 1)]
    _configuration_at(storage, start, end, commits[::-1]).ensure_supported("compaction")
    actions = reconcile_actions(commits, root=storage.root)
    path = f"{LOG_DIR}/{compaction_name(start, end)}"
    data = b"".join(orjson.dumps(a) + b"\n" for a in actions)
    _cross_check(storage, start, end, data)
    written = storage.put_if_absent(path, data)
    matches = None
    if not written:
        # Either form (reconciled, or Databricks' newest-first with repeated keys) becomes
        # one oldest-first stream in which the last line wins, as one commit.
        existing = parse_json_actions(
            delta_lines_oldest_first(storage.read(path), is_compaction=True),
            table=storage.root, version=end, file=path,
        )
        ours = _canonical_set(actions)
        theirs = _canonical_set(reconcile_actions([existing], root=storage.root))
        matches = ours == theirs
    return CompactionResult(
        storage.root, start, end, path, len(actions), not written, matches
    )


# ---- policy -------------------------------------------------------------------------------


def compaction_interval(
    configuration: Mapping[str, str] | None, *, override: int | None = None
) -> int | None:
    """The compaction interval for a table: `override`, else the table property
    `delta.logCompactionInterval`, else DEFAULT_COMPACTION_INTERVAL (off). 0 means off.

    Raises:
        ValueError: the property is not a non-negative integer.
    """
    if override is not None:
        value: Any = override
    else:
        value = (configuration or {}).get(COMPACTION_INTERVAL_PROPERTY)
        if value is None:
            return DEFAULT_COMPACTION_INTERVAL
    try:
        interval = int(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{COMPACTION_INTERVAL_PROPERTY} must be an integer, not {value!r}"
        ) from exc
    if interval < 0:
        raise ValueError(f"{COMPACTION_INTERVAL_PROPERTY} cannot be negative: {interval}")
    return interval or None


def compaction_plan(
    snapshot_or_listing: Snapshot | Sequence[tuple[LogFile, FileInfo]], interval: int | None
) -> list[tuple[int, int]]:
    """The compactions the policy asks for that do not exist yet. Pure.

    Windows of `interval` commits start right after the latest checkpoint (or at 0):
    [c+1, c+interval], [c+interval+1, c+2*interval], ...; only windows that end at or
    before the latest version are planned, and never one whose file exists.

    Args:
        snapshot_or_listing: the latest Snapshot, or a parsed `_delta_log` listing
            (`delta_ops.log.segment.log_segment.list_log`), which also shows existing compactions.
        interval: commits per compaction; None or < 2 plans nothing.
    """
    if interval is None or interval < 2:
        return []
    if isinstance(snapshot_or_listing, Snapshot):
        snap = snapshot_or_listing
        checkpoint = snap.checkpoint_version
        latest = snap.version
        existing = {(d.start, d.end) for d in snap.segment.deltas if d.is_compaction}
    else:
        listing = list(snapshot_or_listing)
        commits = [lf.version for lf, _ in listing if lf.kind == LogFileKind.COMMIT]
        if not commits:
            return []
        latest = max(commits)
        cps = _complete_checkpoints(listing, latest)
        checkpoint = cps[0].version if cps else None
        existing = {
            (lf.start_version, lf.version)
            for lf, _ in listing
            if lf.kind == LogFileKind.COMPACTION
        }
    first = 0 if checkpoint is None else checkpoint + 1
    plan = []
    window_start = first
    while window_start + interval - 1 <= latest:
        window = (window_start, window_start + interval - 1)
        if window not in existing:
            plan.append(window)
        window_start += interval
    return plan


def compact_by_policy(
    table_or_storage: TableLike,
    *,
    interval: int | None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[CompactionResult]:
    """Write every compaction `compaction_plan` asks for on the table's current log.

    `table_or_storage` is a DeltaTable, Storage or table URI (opened with
    `storage_options`).
    """
    storage = Storage.of(table_or_storage, storage_options)
    plan = compaction_plan(list_log(storage), interval)
    return [compact_log(storage, start=s, end=e) for s, e in plan]


__all__ = [
    "COMPACTION_INTERVAL_PROPERTY",
    "DEFAULT_COMPACTION_INTERVAL",
    "CompactionResult",
    "compact_by_policy",
    "compact_log",
    "compaction_interval",
    "compaction_plan",
    "reconcile_actions",
]
