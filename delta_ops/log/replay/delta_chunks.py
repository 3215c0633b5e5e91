"""Reading deltas (commits and compaction files) in pieces of bounded size.

Spec sections: "Delta Log Entries" (a commit is newline-delimited JSON, one action per
line), "Commit Provenance Information" (`commitInfo`), "Log Compaction Files". A commit can
hold a million adds (a CREATE TABLE AS SELECT writes the whole table in one commit: several
hundred MB of JSON). Readers that must stay in bounded memory read it here:

* `delta_chunks` groups whole small deltas up to `CHUNK_BYTES` of JSON, and cuts a larger
  one into pieces of whole lines of about `CHUNK_BYTES` each, read from storage one block at
  a time (the file is never held whole). The pieces come oldest first with the one rule of
  `log.replay.full_replay.delta_lines_oldest_first`: a commit's lines as written, a compaction's
  lines reversed (its blocks are then read from the end of the file). Splitting between lines
  changes nothing of what wins: the reconciler orders every action by its position in the
  oldest-first stream, and inside one commit each file key appears at most once per action
  type anyway (spec "Action Reconciliation"); the last line wins either way.
* `read_commit_info` reads a commit's `commitInfo` and stops there: file action lines are
  skipped without being parsed, so a million adds after it cost nothing but the bytes read
  up to the line that holds it (the first line when in-commit timestamps are on, and in
  practice with every writer).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from delta_ops.errors import StorageError, VersionNotFoundError
from delta_ops.log.files.json_actions import parse_json_line
from delta_ops.log.replay.full_replay import _reverses, delta_lines_oldest_first, read_log_files
from delta_ops.log.segment.log_segment import Delta
from delta_ops.protocol import filenames
from delta_ops.storage import Storage

#: JSON bytes of deltas handled at once: whole small files are grouped up to this, a larger
#: file is cut into pieces of whole lines of about this size.
CHUNK_BYTES = 32 * 1024 * 1024
#: Fewest bytes read from a file at a time.
_MIN_READ = 64 * 1024
#: Bytes read at a time while looking for a commit's `commitInfo`.
COMMIT_INFO_BLOCK = 1024 * 1024

_FILE_ACTION_PREFIXES = (b'{"add":', b'{"remove":')


@dataclass
class DeltaPiece:
    """Some whole lines of one delta, oldest first (`delta_lines_oldest_first`).

    Attributes:
        delta: the delta the lines come from.
        data: the lines (a whole file's or a piece's), oldest first.
        first_line: the line number of the first line in the file as read oldest first
            (1 for a whole file), so errors name the line of the file.
    """

    delta: Delta
    data: bytes
    first_line: int = 1


def delta_chunks(
    storage: Storage, deltas: Sequence[Delta], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[list[DeltaPiece]]:
    """The deltas (oldest first) in chunks of about `chunk_bytes` of JSON, oldest first.

    Whole deltas no larger than `chunk_bytes` are grouped while the group stays within it
    (their files read together: concurrently on object stores); a larger delta is a series
    of chunks of one piece each, read block by block (`_pieces`). A single line longer
    than `chunk_bytes` is a piece of its own.

    Raises:
        StorageError: a file cannot be read.
    """
    group: list[Delta] = []
    size = 0
    for d in deltas:
        if d.file.size > chunk_bytes:
            if group:
                yield _whole(storage, group)
                group, size = [], 0
            for piece in _pieces(storage, d, chunk_bytes):
                yield [piece]
            continue
        if group and size + d.file.size > chunk_bytes:
            yield _whole(storage, group)
            group, size = [], 0
        group.append(d)
        size += d.file.size
    if group:
        yield _whole(storage, group)


def _whole(storage: Storage, group: list[Delta]) -> list[DeltaPiece]:
    blobs = read_log_files(storage, [d.file.path for d in group])
    return [
        DeltaPiece(d, delta_lines_oldest_first(b, is_compaction=d.is_compaction))
        for d, b in zip(group, blobs, strict=True)
    ]


def _pieces(storage: Storage, d: Delta, chunk_bytes: int) -> Iterator[DeltaPiece]:
    """A large delta in pieces of whole lines, oldest first, one block read at a time."""
    path = d.file.path
    try:
        with storage.open_input(path) as fh:
            if _reverses(d.is_compaction):
                yield from _backward_pieces(fh, d, chunk_bytes)
            else:
                yield from _forward_pieces(fh, d, chunk_bytes)
    except OSError as exc:
        raise StorageError(f"cannot read the log file: {exc}", file=path) from exc


def _forward_pieces(fh, d: Delta, chunk_bytes: int) -> Iterator[DeltaPiece]:
    """A commit's lines as written, in pieces of at least `chunk_bytes` (up to the end of
    the line that reaches it); blocks of at least `_MIN_READ` bytes are read at a time."""
    line = 1
    buf = b""
    eof = False
    while not eof:
        block = fh.read(max(chunk_bytes, _MIN_READ))
        eof = not block
        buf = buf + block if buf else block
        while buf:
            cut = buf.find(b"\n", max(chunk_bytes, 1) - 1)
            if cut < 0:
                if not eof:
                    break  # the piece's last line does not end in what was read yet
                cut = len(buf) - 1
            piece, buf = buf[: cut + 1], buf[cut + 1 :]
            yield DeltaPiece(d, piece, line)
            line += piece.count(b"\n")


def _backward_pieces(fh, d: Delta, chunk_bytes: int) -> Iterator[DeltaPiece]:
    """A compaction file's lines newest line first, i.e. its blocks (of at least
    `_MIN_READ` bytes) from the end, each piece's lines reversed (the whole reversed file
    is the pieces joined in this order). Line numbers count from the file's end."""
    end = fh.seek(0, 2)
    line = 1
    carry = b""
    size = max(chunk_bytes, _MIN_READ)
    while end > 0:
        start = max(0, end - size)
        fh.seek(start)
        data = fh.read(end - start) + carry
        end = start
        if start > 0:
            cut = data.find(b"\n")
            if cut < 0:  # the block is inside one line: read further back
                carry = data
                continue
            carry, data = data[: cut + 1], data[cut + 1 :]
        else:
            carry = b""
        if not data.strip():
            continue
        piece = delta_lines_oldest_first(data, is_compaction=True)
        if not piece.endswith(b"\n"):
            piece += b"\n"
        yield DeltaPiece(d, piece, line)
        line += piece.count(b"\n")


def read_commit_info(storage: Storage, version: int) -> dict | None:
    """The `commitInfo` of commit `version` (the first one in the file), or None when the
    commit has none. The file is read block by block up to the line holding it; file
    action lines are not parsed, so neither their number nor their content matters.

    Raises:
        VersionNotFoundError: the commit file does not exist.
        CorruptLogError: a line before the commitInfo that is not a file action is not a
            JSON object (names the file and line).
    """
    path = f"{filenames.LOG_DIR}/{filenames.commit_name(version)}"
    table = storage.root
    try:
        fh = storage.open_input(path)
    except StorageError as exc:
        if not storage.exists(path):
            raise VersionNotFoundError(
                "the commit does not exist", table=table, version=version, file=path
            ) from exc
        raise
    lineno = 0
    carry = b""
    try:
        with fh:
            while True:
                block = fh.read(COMMIT_INFO_BLOCK)
                data = carry + block if carry else block
                lines = data.split(b"\n")
                carry = lines.pop() if block else b""
                for raw in lines:
                    lineno += 1
                    found = _commit_info_line(raw, table=table, version=version, file=path,
                                              lineno=lineno)
                    if found is not None:
                        return found
                if not block:
                    return None
    except OSError as exc:
        raise StorageError(f"cannot read the commit: {exc}", file=path) from exc


def _commit_info_line(
    raw: bytes, *, table: str, version: int, file: str, lineno: int
) -> dict | None:
    line = raw.strip()
    if not line or line.startswith(_FILE_ACTION_PREFIXES):
        return None
    obj = parse_json_line(line, lineno, table=table, version=version, file=file)
    ci = obj.get("commitInfo")
    return ci if isinstance(ci, dict) else None


__all__ = ["CHUNK_BYTES", "DeltaPiece", "delta_chunks", "read_commit_info"]
