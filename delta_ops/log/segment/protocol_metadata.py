"""The protocol and metaData in force at one version, without replaying file actions.

Spec sections: "Protocol Evolution" and "Change Metadata" (the newest action of each kind is
the one in force), "Action Reconciliation", "Log Compaction Files", "Checkpoints".

A light replay of a `LogSegment`, as delta-kernel-rs does it in
`log_segment/protocol_metadata_replay.rs`: the deltas (commits and compaction files) are
read newest first, and the search stops as soon as both actions are found; whatever is still
missing comes from the checkpoint, of which only the `protocol` and `metaData` columns (or,
for a JSON checkpoint, the lines naming them) are read. No `add` or `remove` is parsed.

Inside one delta the rule is the one every delta reader in delta_ops uses
(`replay.delta_lines_oldest_first`): the lines oldest first, the last one for a key wins; a
compaction file in Databricks' form is newest commit first, so there the first line wins.

With a starting point (`since`: what was in force at an older version, e.g. kept in the
Dagster sensor's cursor), only the deltas after it are read, and what they do not hold is
taken from it. A starting point the segment's deltas do not reach back to (a checkpoint
newer than it, or a version past the segment) is ignored.

Every operation that needs the protocol or the table properties without a snapshot (metadata
cleanup, VACUUM, log compaction, the sensor and the Dagster checks) reads them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import orjson

from delta_ops.engine.threads import io_map
from delta_ops.errors import CorruptLogError
from delta_ops.log.segment.log_segment import CheckpointFiles, Delta, LogSegment
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.table_configuration import TableConfiguration
from delta_ops.storage import Storage

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow (and the modules reading Arrow) are imported where a log file is read, not here:
# what imports this module only to name its functions (the Dagster definitions, the due
# rules) then loads without Arrow.

PROTOCOL = "protocol"
METADATA = "metaData"

# Deltas are read this many at a time (concurrently), newest batch first, until both
# actions are found: most tables find them in the checkpoint or in the first few files.
_READ_BATCH = 32
# The reads run on the process's one I/O pool (`engine.threads`): a sensor tick reads the
# newest commits of every table in turn, and starting threads per table cost more than the
# reads (1,000 small local tables: 4,700 threads started, 3 of the 4 seconds of a first tick).


def read_protocol_metadata(
    storage: Storage,
    segment: LogSegment,
    *,
    blobs: Mapping[str, bytes] | None = None,
    since: TableConfiguration | None = None,
) -> TableConfiguration:
    """The protocol and metaData in force at `segment.version`, as the table's configuration
    at that version (nothing in them is parsed yet: `TableConfiguration` does it on demand).

    Args:
        storage: the table's storage.
        segment: the log segment of the version wanted.
        blobs: contents of the segment's deltas already read, by path (the others are read
            here).
        since: what was in force at an older version; when the segment's deltas reach back
            to it, only the deltas after it are read.

    Raises:
        CorruptLogError: a log file that is not valid JSON or not readable Parquet (names
            the file), or no protocol or no metaData action in the segment.
    """
    found = _replay(storage, segment, (PROTOCOL, METADATA), blobs=blobs, since=since)
    return TableConfiguration(
        found[PROTOCOL], Metadata(found[METADATA]), segment.version, storage.root
    )


def read_protocol(storage: Storage, segment: LogSegment) -> dict:
    """The protocol in force at `segment.version` (the metaData is not looked for).

    Raises:
        CorruptLogError: as `read_protocol_metadata`.
    """
    return _replay(storage, segment, (PROTOCOL,), blobs=None, since=None)[PROTOCOL]


def _replay(
    storage: Storage,
    segment: LogSegment,
    keys: tuple[str, ...],
    *,
    blobs: Mapping[str, bytes] | None,
    since: TableConfiguration | None,
) -> dict[str, dict]:
    seed: dict[str, dict] | None = None
    deltas: list[Delta] = list(segment.deltas)
    if since is not None and since.version is not None:
        if since.version == segment.version:
            return {PROTOCOL: since.protocol, METADATA: dict(since.metadata.raw)}
        newer = [d for d in deltas if d.end > since.version]
        if since.version < segment.version and newer and newer[0].start <= since.version + 1:
            seed = {PROTOCOL: since.protocol, METADATA: dict(since.metadata.raw)}
            deltas = newer
    want = set(keys)
    found: dict[str, dict] = {}
    _scan_deltas(storage, reversed(deltas), blobs, want, found)
    if want and seed is not None:
        for key in tuple(want):
            found[key] = seed[key]
            want.discard(key)
    if want and segment.checkpoint is not None:
        _scan_checkpoint(storage, segment.checkpoint, want, found)
    for key in keys:
        if key not in found:
            raise CorruptLogError(
                f"no {key} action found in the log segment of version {segment.version} "
                f"({_segment_files(segment)})",
                table=storage.root, version=segment.version,
            )
    return found


def _segment_files(segment: LogSegment) -> str:
    """The files a light replay of `segment` reads, for error messages."""
    parts = []
    if segment.checkpoint is not None:
        parts.append(f"checkpoint {', '.join(segment.checkpoint.names)}")
    names = [d.file.path.rsplit("/", 1)[-1] for d in segment.deltas]
    if len(names) == 1:
        parts.append(names[0])
    elif names:
        parts.append(f"{names[0]} to {names[-1]} ({len(names)} files)")
    return "read: " + (" and ".join(parts) or "no log file")


def _scan_deltas(
    storage: Storage,
    newest_first: Iterable[Delta],
    blobs: Mapping[str, bytes] | None,
    want: set[str],
    found: dict[str, dict],
) -> None:
    deltas = list(newest_first)
    for start in range(0, len(deltas), _READ_BATCH):
        if not want:
            return
        batch = deltas[start : start + _READ_BATCH]
        missing = [d.file.path for d in batch if blobs is None or d.file.path not in blobs]
        read: dict[str, bytes] = {}
        if len(missing) > 1:
            read = dict(zip(missing, io_map(storage.read, missing), strict=True))
        elif missing:
            read = {missing[0]: storage.read(missing[0])}
        for d in batch:
            path = d.file.path
            data = read[path] if path in read else blobs[path]  # type: ignore[index]
            _scan_delta(data, d.is_compaction, want, found,
                        table=storage.root, version=d.end, file=path)
            if not want:
                return


def _scan_delta(
    data: bytes,
    is_compaction: bool,
    want: set[str],
    found: dict[str, dict],
    *,
    table: str,
    version: int,
    file: str,
) -> None:
    """Take from one delta the action of each wanted key that wins inside it."""
    needles = {key: f'"{key}"'.encode() for key in want}
    if not any(n in data for n in needles.values()):
        return  # most commits hold neither: one substring search each
    from delta_ops.log.replay.full_replay import delta_lines_oldest_first

    lines = delta_lines_oldest_first(data, is_compaction=is_compaction).splitlines()
    for line in reversed(lines):  # newest line first: the first one met is the last to win
        keys = [k for k in tuple(want) if needles[k] in line]
        if not keys:
            continue
        obj = _json_line(line, table=table, version=version, file=file)
        for key in keys:
            if isinstance(obj, dict) and isinstance(obj.get(key), dict):
                found[key] = obj[key]
                want.discard(key)
        if not want:
            return


def _json_line(line: bytes, *, table: str, version: int, file: str) -> object:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(
            f"invalid JSON: {exc}", table=table, version=version, file=file
        ) from exc


def _scan_checkpoint(
    storage: Storage, checkpoint: CheckpointFiles, want: set[str], found: dict[str, dict]
) -> None:
    """The checkpoint's protocol/metaData (one of each in a valid checkpoint; the first met
    is taken). Parquet: only those columns are read; JSON: only the lines naming them."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # here, not at module level: JSON-only logs never need it

    from delta_ops.log.files.checkpoint_reader import _columns_with_values

    table = storage.root
    for lf, info in zip(checkpoint.log_files, checkpoint.files, strict=True):
        if not want:
            return
        if lf.format == "json":
            data = storage.read(info.path)
            for line in data.splitlines():
                keys = [k for k in tuple(want) if f'"{k}"'.encode() in line]
                if not keys:
                    continue
                obj = _json_line(line, table=table, version=lf.version, file=info.path)
                for key in keys:
                    if isinstance(obj, dict) and isinstance(obj.get(key), dict):
                        found[key] = obj[key]
                        want.discard(key)
                if not want:
                    return
            continue
        try:
            with storage.open_input(info.path) as fh:
                pf = pq.ParquetFile(fh)
                meta = pf.metadata
                # Row group by row group, skipping those whose statistics say the columns
                # are all null there: memory follows a row group, not the checkpoint.
                for i in range(meta.num_row_groups):
                    names = [c for c in sorted(want) if c in pf.schema_arrow.names]
                    columns = _columns_with_values(meta.row_group(i), names)
                    if not columns:
                        if not names:
                            break
                        continue
                    t = pf.read_row_group(i, columns=columns)
                    _take_first(t, columns, want, found)
                    if not want:
                        break
        except (OSError, pa.ArrowInvalid) as exc:
            raise CorruptLogError(
                f"checkpoint file cannot be read as Parquet: {exc}",
                table=table, version=lf.version, file=info.path,
            ) from exc


def _take_first(t: pa.Table, columns: list[str], want: set[str], found: dict[str, dict]) -> None:
    """The first non-null value of each of `columns` in `t`, into `found`."""
    import pyarrow.compute as pc

    from delta_ops.log.files.checkpoint_reader import _drop_nulls

    for name in columns:
        col = t.column(name)
        valid = col.filter(pc.is_valid(col))
        if len(valid):
            # Shaped as the JSON log writes it (absent fields dropped, maps as objects),
            # exactly as the full replay reads a checkpoint.
            found[name] = _drop_nulls(valid.slice(0, 1).to_pylist(maps_as_pydicts="strict")[0])
            want.discard(name)


__all__ = [
    "METADATA",
    "PROTOCOL",
    "read_protocol",
    "read_protocol_metadata",
]
