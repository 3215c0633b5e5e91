"""Action-by-action reconciliation of commits, in plain Python (orjson dicts, no Arrow).

Spec section: "Action Reconciliation". Deltas are applied newest first: the first action
seen for a file key `(canonical path, deletion vector unique id)` wins, and so do the first
protocol, metaData, txn (per appId) and domainMetadata (per domain) seen.

This is the one action-by-action rule. `log.replay.full_replay` runs it when the columnar reader of
commits steps aside (its `_Reconciler` adds the Arrow tables of the winners), VACUUM's
references do the same (`log.replay.references`), and `log.snapshot.small_snapshot` runs it alone
for a small log, where importing Arrow would cost more than the whole reconciliation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from delta_ops.errors import CorruptLogError
from delta_ops.log.files.json_actions import parse_json_actions
from delta_ops.protocol.actions import (
    CommitInfo,
    DomainMetadata,
    Metadata,
    Txn,
    canonical_path,
    dv_unique_id,
)
from delta_ops.storage import Storage


@dataclass
class NonFileState:
    """The non-file actions a reconciliation keeps: the latest protocol and metadata, the
    latest txn per appId and domainMetadata per domain (removed ones included), and the
    commitInfo of each commit read."""

    protocol: dict | None = None
    metadata: Metadata | None = None
    txns: dict[str, Txn] = field(default_factory=dict)
    domains: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_infos: dict[int, CommitInfo] = field(default_factory=dict)


class ActionReconciler:
    """Newest-first reconciliation of the non-checkpoint part of a segment.

    Args:
        root: the table root (relative and absolute paths get one key through it).
        state: where the non-file actions go (`log.replay.full_replay` passes its ReplayState);
            a new NonFileState when None.

    Attributes:
        seen: the key of every file action applied so far.
        adds, removes: the winning add and remove actions, newest first (`winners` gives
            them in log order).
        state: the non-file state.
    """

    def __init__(self, root: str, state: Any = None) -> None:
        self.root = root
        self.seen: set[str] = set()
        self.adds: list[dict] = []
        self.removes: list[dict] = []
        self.state = NonFileState() if state is None else state
        self._have_protocol = False
        self._have_metadata = False

    def apply_file(
        self,
        data: bytes,
        *,
        table: str,
        version: int,
        file: str,
        reverse: bool = False,
        first_line: int = 1,
    ) -> None:
        """Parse one delta's newline-delimited actions and apply them (this delta is older
        than every one applied before). `reverse`: its lines are newest first (a
        compaction file, `log.replay.full_replay.delta_lines_oldest_first`). `first_line`: the line
        number of `data`'s first line in the file (a piece of a large delta)."""
        actions = parse_json_actions(
            data, table=table, version=version, file=file, first_line=first_line
        )
        if reverse:
            actions.reverse()
        self.apply_newest_first(actions, table=table, version=version, file=file)

    def apply_newest_first(
        self, actions: list[dict], *, table: str, version: int, file: str
    ) -> None:
        root = self.root
        seen = self.seen
        seen_add = seen.add
        # Hot loop (one iteration per action of every commit): locals, no helper calls for
        # the common case of a relative path without a deletion vector.
        for obj in reversed(actions):
            a = obj.get("add")
            out = self.adds
            if a is None:
                a = obj.get("remove")
                out = self.removes
            if a is not None:
                path = a.get("path")
                if path.__class__ is not str:
                    raise CorruptLogError(
                        f"file action without a path: {obj!r}",
                        table=table,
                        version=version,
                        file=file,
                    )
                if "%" in path or ":" in path or path[:1] == "/":
                    path = canonical_path(path, root)
                dv = a.get("deletionVector")
                key = f"{path}\x00{dv_unique_id(dv)}" if dv else path
                if key not in seen:
                    seen_add(key)
                    out.append(a)
            else:
                self.apply_other(obj, table=table, version=version, file=file)

    def apply_other(self, obj: dict, *, table: str, version: int, file: str) -> None:
        """Apply one non-file action (newest first): protocol, metaData, txn, domain
        metadata, commitInfo; anything else is ignored."""
        state = self.state
        if (m := obj.get("metaData")) is not None:
            if not self._have_metadata:
                state.metadata = Metadata(m)
                self._have_metadata = True
        elif (p := obj.get("protocol")) is not None:
            if not self._have_protocol:
                state.protocol = p
                self._have_protocol = True
        elif (t := obj.get("txn")) is not None:
            try:
                txn = Txn.from_dict(t)
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptLogError(
                    f"invalid txn action {t!r}", table=table, version=version, file=file
                ) from exc
            state.txns.setdefault(txn.app_id, txn)
        elif (d := obj.get("domainMetadata")) is not None:
            try:
                dm = DomainMetadata.from_dict(d)
            except (KeyError, TypeError) as exc:
                raise CorruptLogError(
                    f"invalid domainMetadata action {d!r}",
                    table=table,
                    version=version,
                    file=file,
                ) from exc
            state.domains.setdefault(dm.domain, dm)
        elif (c := obj.get("commitInfo")) is not None:
            state.commit_infos.setdefault(version, CommitInfo(c))

    def take_winners(self) -> tuple[list[dict], list[dict]]:
        """The adds and removes that won since the last call (or since the start), newest
        first, handed over: the reconciler keeps only their keys, which still decide what
        wins among the older deltas applied next."""
        adds, removes = self.adds, self.removes
        self.adds, self.removes = [], []
        return adds, removes

    def winners(self) -> tuple[list[dict], list[dict]]:
        """The winning adds and removes in log order (of each winner's position in the
        oldest-first stream of deltas), the order the columnar reader gives them in."""
        return self.adds[::-1], self.removes[::-1]


def read_log_files(storage: Storage, paths: list[str]) -> list[bytes]:
    """The contents of log files: concurrently where each read waits on the network
    (`Storage.latency_bound`), else one after the other (a local read takes microseconds,
    less than handing it to a thread)."""
    if not storage.latency_bound or len(paths) <= 1:
        return [storage.read(p) for p in paths]
    from delta_ops.engine.threads import io_map  # only where reads wait on a network

    return io_map(storage.read, paths)
