"""Cross-check a state before it is published, against an independent path through the log.

Spec sections: "Action Reconciliation", "Log Compaction Files" (readers may use a
compaction file instead of the commits it covers), "Checkpoints", "Version Checksum File".

Every operation that publishes derived state (a checkpoint of any kind, a log compaction
file, a version checksum) compares what it is about to publish with the same version
replayed through an independent path before the file gets its final name, so that one
wrong reading rule cannot reach a published file unseen. The independent path of version v
is the newest checkpoint at or below v plus the commits after it, never a compaction file
(`build_log_segment(use_compactions=False)`). Three cases:

* The segment the operation read holds no compaction file: it already is the independent
  path. Replaying it again would run the same code on the same files and prove nothing, so
  there is no second replay; instead the operation decodes the bytes it is about to publish
  (the checkpoint writer's `verify.py`, the `.crc` parsed again, the compaction file read by
  the log reader) and compares them with that replay.
* It holds one: the deltas after the checkpoint are reconciled both ways (as read, and
  from the commits alone) and their winning actions compared; equal winners on the same
  checkpoint mean equal states, so the checkpoint is not read twice. Otherwise the
  independent path is replayed in full and compared with the state read through the
  compaction files (`compare_snapshots`), which names the counts and the first differing
  file. The operation's own read-back of its bytes then compares them with the state, so
  the published bytes equal the independent replay on every compared field.
* A commit a compaction covers is gone (metadata cleanup removed it): no independent path
  exists. The operation goes on and records `unavailable (...)` in its result: the issue
  asks for the check "whenever that path exists", and refusing would leave such tables
  without checkpoints forever.

What is compared: the live file set (file key: canonical path plus deletion vector id),
the number of live files, the total and per-file sizes, the tombstones kept (the unexpired
ones when a clock is given), protocol, metadata (id, schema, partition columns,
configuration), transaction identifiers and live domain metadata. A difference raises
`CrossCheckError` naming the table, the version, both counts and the first differing file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_ops.errors import CorruptLogError, CrossCheckError, UnusableCheckpointError
from delta_ops.log import LogSegment, ReplayState, Snapshot, build_log_segment
from delta_ops.log import replay_segment as replay
from delta_ops.log import snapshot_from_state as _snapshot_from_state
from delta_ops.protocol import filenames
from delta_ops.protocol.actions import file_keys


@dataclass(frozen=True)
class IndependentPath:
    """The independent replay of one version, or why there is none.

    Attributes:
        snapshot: the version replayed from the previous checkpoint plus the commits; the
            operation's own snapshot when that is what it read (no compaction file); None
            when no independent path exists.
        note: what was (or could not be) cross-checked, for the operation's Result.
        replayed: a second full replay was made and `snapshot` is it (the operation read
            compaction files and the cheap proof of `_same_after_checkpoint` did not hold).
    """

    snapshot: Snapshot | None
    note: str
    replayed: bool = False

    @property
    def available(self) -> bool:
        return self.snapshot is not None


def _ranges(versions: list[int]) -> str:
    """`[1, 2, 3, 7]` -> `1..3, 7`."""
    out: list[str] = []
    i = 0
    while i < len(versions):
        j = i
        while j + 1 < len(versions) and versions[j + 1] == versions[j] + 1:
            j += 1
        out.append(str(versions[i]) if i == j else f"{versions[i]}..{versions[j]}")
        i = j + 1
    return ", ".join(out)


def describe_segment(segment: LogSegment) -> str:
    """`checkpoint 10 + commits 11..20` (compactions named as `compaction 3..5`)."""
    parts = []
    if segment.checkpoint is not None:
        parts.append(f"checkpoint {segment.checkpoint.version}")
    commits = [d.end for d in segment.deltas if not d.is_compaction]
    if commits:
        parts.append(f"commits {_ranges(commits)}")
    parts += [f"compaction {d.start}..{d.end}" for d in segment.deltas if d.is_compaction]
    return " + ".join(parts) or f"version {segment.version}"


def _commit_version(path: str) -> int | None:
    lf = filenames.parse(path.rsplit("/", 1)[-1])
    return None if lf is None else lf.version


def independent_path(snapshot: Snapshot) -> IndependentPath:
    """The independent replay of `snapshot`'s version (see the module docstring).

    Raises:
        CorruptLogError: a commit of the independent path cannot be read (it exists but is
            malformed): the log is damaged and nothing should be published from it.
    """
    segment = snapshot.segment
    if not any(d.is_compaction for d in segment.deltas):
        return IndependentPath(
            snapshot,
            f"commits-only segment ({describe_segment(segment)}): it is the independent "
            "path; the bytes to publish were read back and compared with it",
        )
    start = segment.checkpoint.version + 1 if segment.checkpoint is not None else 0
    listed = {_commit_version(info.path) for info in segment.commits}
    missing = [v for v in range(start, segment.version + 1) if v not in listed]
    if missing:
        return IndependentPath(
            None,
            f"unavailable (commits {_ranges(missing)} were cleaned up; only compaction files "
            "cover them)",
        )
    storage = snapshot.storage
    fast = _same_after_checkpoint(snapshot)
    if fast is not None:
        return fast
    excluded: set[str] = set()
    while True:
        try:
            independent = build_log_segment(
                storage,
                segment.version,
                use_compactions=False,
                exclude_checkpoints=frozenset(excluded),
            )
        except CorruptLogError as exc:
            return IndependentPath(None, f"unavailable ({exc.reason})")
        try:
            state = replay(storage, independent)
        except UnusableCheckpointError:
            assert independent.checkpoint is not None
            excluded.add(independent.checkpoint.identity)
            continue
        break
    other = _snapshot_from_state(storage, independent, state)
    return IndependentPath(
        other,
        f"passed: the state read through {describe_segment(segment)} equals the independent "
        f"replay of {describe_segment(independent)}",
        replayed=True,
    )


def _same_after_checkpoint(snapshot: Snapshot) -> IndependentPath | None:
    """The cheap proof, when it holds: the independent segment starts from the same
    checkpoint, and the deltas after it (compactions as read) reconcile to exactly the same
    winning actions as the commits after it (every add and remove by key and size, protocol,
    metadata, txns, domains with their tombstones). A state is the checkpoint's actions
    minus the keys the deltas touch plus the deltas' winners, so equal winners mean equal
    states: the checkpoint is not read twice and the cost grows with the commits, not the
    table. None when it does not hold (a different checkpoint, or any difference): the
    caller then replays the independent path in full, which gives the exact counts and the
    first differing file (or finds that only expired tombstones differed)."""
    segment = snapshot.segment
    storage = snapshot.storage
    try:
        independent = build_log_segment(storage, segment.version, use_compactions=False)
    except CorruptLogError:
        return None
    if (independent.checkpoint is None) != (segment.checkpoint is None) or (
        independent.checkpoint is not None
        and segment.checkpoint is not None
        and independent.checkpoint.identity != segment.checkpoint.identity
    ):
        return None
    version = segment.version
    if segment.checkpoint is None:
        # The snapshot is the deltas' reconciliation already: no second read of them.
        ours = ReplayState(
            protocol=snapshot.protocol,
            metadata=snapshot.metadata,
            adds=snapshot.files,
            removes=snapshot.tombstones,
            txns=snapshot.txns,
            domains=snapshot.all_domains,
        )
    else:
        ours = replay(storage, LogSegment(storage.root, version, None, segment.deltas, ()))
    theirs = replay(storage, LogSegment(storage.root, version, None, independent.deltas, ()))
    if not _same_state(ours, theirs, storage.root):
        return None
    return IndependentPath(
        snapshot,
        f"passed: the deltas read through {describe_segment(segment)} reconcile to the same "
        f"actions as the independent {describe_segment(independent)}",
        replayed=False,
    )


def _same_state(a: ReplayState, b: ReplayState, root: str) -> bool:
    """Equal winning file actions (key and size), protocol, metadata, txns and domains."""
    for x, y in ((a.adds, b.adds), (a.removes, b.removes)):
        kx, ky = _keys_and_sizes(x, root), _keys_and_sizes(y, root)
        if not kx.equals(ky):
            return False
    ma = None if a.metadata is None else _clean(a.metadata.raw)
    mb = None if b.metadata is None else _clean(b.metadata.raw)
    return (
        _clean(a.protocol) == _clean(b.protocol)
        and ma == mb
        and {k: t.version for k, t in a.txns.items()} == {k: t.version for k, t in b.txns.items()}
        and {k: d.to_dict() for k, d in a.domains.items()}
        == {k: d.to_dict() for k, d in b.domains.items()}
    )


# ---- comparison ---------------------------------------------------------------------------


def _keys_and_sizes(actions: pa.Table, root: str) -> pa.Table:
    """(key, size) of file actions, sorted by key."""
    if not actions.num_rows:
        return pa.table({"key": pa.array([], pa.string()), "size": pa.array([], pa.int64())})
    struct = actions.select(["path", "deletionVector"]).to_struct_array()
    keys = file_keys(struct, root)
    sizes = actions.column("size") if "size" in actions.column_names else None
    if sizes is None:
        sizes = pa.nulls(actions.num_rows, pa.int64())
    t = pa.table({"key": keys, "size": pc.cast(sizes, pa.int64())})
    return t.sort_by("key")


def readable_key(key: str) -> str:
    """A file key as a message shows it: the path, and the deletion vector id if any."""
    path, _, dv = key.partition("\x00")
    return f"{path} (deletion vector {dv})" if dv else path


def first_difference(a: pa.Array, b: pa.Array) -> tuple[str, str] | None:
    """The first differing key of two sorted key arrays and which side holds it
    ("published" or "independent"); None when they are equal."""
    n = min(len(a), len(b))
    if n:
        neq = pc.fill_null(pc.not_equal(a.slice(0, n), b.slice(0, n)), True)
        idx = pc.index(neq, True).as_py()
        if idx >= 0:
            x, y = a[idx].as_py(), b[idx].as_py()
            return (x, "published") if x < y else (y, "independent")
    if len(a) > n:
        return a[n].as_py(), "published"
    if len(b) > n:
        return b[n].as_py(), "independent"
    return None


def _combined(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _clean(value: Any) -> Any:
    """JSON-like value with nulls dropped, string lists sorted (feature lists), maps as
    dicts: a protocol read from a Parquet checkpoint and one read from JSON compare equal."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _clean(v) for k, v in value if v is not None}
        items = [_clean(v) for v in value]
        return sorted(items) if all(isinstance(v, str) for v in items) else items
    return value


def _metadata_view(snapshot: Snapshot) -> dict[str, Any]:
    m = snapshot.metadata
    return {
        "id": m.id,
        "schemaString": m.schema_string,
        "partitionColumns": list(m.partition_columns),
        "configuration": dict(m.configuration),
    }


def compare_snapshots(
    published: Snapshot,
    independent: Snapshot,
    *,
    operation: str,
    now_ms: int | None = None,
    independent_desc: str | None = None,
) -> None:
    """Raise CrossCheckError when two reconstructions of one version differ.

    Args:
        published: the state the operation is about to publish.
        independent: the same version replayed through the independent path.
        operation: named in the message ("checkpoint", "crc write", ...).
        now_ms: the operation's clock: only tombstones unexpired at that time are compared
            (those a checkpoint keeps); None compares every tombstone.
        independent_desc: how the independent replay was made, for the message.
    """
    table, version = published.table, published.version
    root = published.storage.root
    where = independent_desc or describe_segment(independent.segment)

    def fail(what: str, n_pub: int, n_ind: int, key: str | None, side: str | None = None):
        detail = f"{what}: {n_pub} in the state to publish, {n_ind} in the independent replay"
        file = None
        if key is not None:
            file = readable_key(key)
            detail += f"; first differing file: {file}"
            if side is not None:
                holder = "state to publish" if side == "published" else "independent replay"
                detail += f" (only in the {holder})"
        raise CrossCheckError(
            f"{operation} refused: the state read through {describe_segment(published.segment)} "
            f"differs from the independent replay of {where} in {detail}; nothing was published",
            table=table,
            version=version,
            published_count=n_pub,
            independent_count=n_ind,
            differing_file=file,
        )

    a = _keys_and_sizes(published.files, root)
    b = _keys_and_sizes(independent.files, root)
    ka, kb = _combined(a.column("key")), _combined(b.column("key"))
    diff = first_difference(ka, kb)
    if diff is not None:
        fail("live files", a.num_rows, b.num_rows, diff[0], diff[1])
    sa = pc.fill_null(_combined(a.column("size")), -1)
    sb = pc.fill_null(_combined(b.column("size")), -1)
    if a.num_rows:
        idx = pc.index(pc.not_equal(sa, sb), True).as_py()
        if idx >= 0:
            key = ka[idx].as_py()
            raise CrossCheckError(
                f"{operation} refused: the state read through "
                f"{describe_segment(published.segment)} differs from the independent replay "
                f"of {where} in the size of a live file ({sa[idx].as_py()} against "
                f"{sb[idx].as_py()} bytes; {a.num_rows} live files on both sides; first "
                f"differing file: {readable_key(key)}); nothing was published",
                table=table,
                version=version,
                published_count=a.num_rows,
                independent_count=b.num_rows,
                differing_file=readable_key(key),
            )
    if now_ms is None:
        ta, tb = published.tombstones, independent.tombstones
    else:
        ta, tb = published.unexpired_tombstones(now_ms), independent.unexpired_tombstones(now_ms)
    ra = _combined(_keys_and_sizes(ta, root).column("key"))
    rb = _combined(_keys_and_sizes(tb, root).column("key"))
    diff = first_difference(ra, rb)
    if diff is not None:
        fail("tombstones kept", len(ra), len(rb), diff[0], diff[1])
    n = a.num_rows
    checks = (
        ("the protocol", _clean(published.protocol), _clean(independent.protocol)),
        ("the metadata", _clean(_metadata_view(published)), _clean(_metadata_view(independent))),
        (
            "transaction identifiers",
            {k: t.version for k, t in published.txns.items()},
            {k: t.version for k, t in independent.txns.items()},
        ),
        (
            "domain metadata",
            {k: d.configuration for k, d in published.domains.items()},
            {k: d.configuration for k, d in independent.domains.items()},
        ),
    )
    for what, x, y in checks:
        if x != y:
            raise CrossCheckError(
                f"{operation} refused: the state read through "
                f"{describe_segment(published.segment)} differs from the independent replay "
                f"of {where} in {what} ({str(x)[:200]} against {str(y)[:200]}; {n} live "
                "files on both sides); nothing was published",
                table=table,
                version=version,
                published_count=n,
                independent_count=n,
            )


def cross_check_snapshot(
    snapshot: Snapshot, *, operation: str, now_ms: int | None = None
) -> IndependentPath:
    """Find the independent path of `snapshot`'s version and compare; returns it (with
    the note for the Result).

    Raises:
        CrossCheckError: the states differ (nothing may be published).
    """
    path = independent_path(snapshot)
    if path.replayed:
        assert path.snapshot is not None
        compare_snapshots(snapshot, path.snapshot, operation=operation, now_ms=now_ms)
    return path


__all__ = [
    "IndependentPath",
    "compare_snapshots",
    "cross_check_snapshot",
    "describe_segment",
    "first_difference",
    "independent_path",
    "readable_key",
]
