"""Is the log whole? The log half of fsck: every finding about what lies in `_delta_log`,
from one listing of it (and its `_sidecars` folder).

Spec sections: "Delta Log Entries" (commits are contiguous versions), "Checkpoints" (a
multi-part checkpoint is complete only with every part; "Last Checkpoint File" names a
checkpoint that must exist), "V2 Spec" / "Sidecar Files" (a V2 checkpoint needs every
sidecar it references), "Log Compaction Files" (a compaction covers the commits of its
range).

What is checked, each finding with its severity (`error`: a reader of some version fails or
reads wrong; `warning`: leftovers, or history that can no longer be read):

* `log_unreadable` (error): the segment of the latest version cannot be built (the reason
  names the file).
* `log_gap` (error): a version after the checkpoint readers start from has no commit (and
  no compaction covers it), or there is no checkpoint and version 0 is missing.
* `last_checkpoint` (error): `_last_checkpoint` cannot be read, names a checkpoint that is
  missing or incomplete, or a version beyond the latest (the latest version then does not
  read: its newest files may be missing, `build_log_segment`).
* `corrupt_checkpoint` (error): the checkpoint readers start from does not read in full
  (`verify_checkpoint`; above `verify_up_to_bytes`, only opened, its rows left to the
  caller's stream), or any complete checkpoint's sidecar references do not read.
* `missing_sidecar` (error): a V2 checkpoint references a sidecar that is not there.
* `history_gap` (warning): a commit below the checkpoint is missing while older ones
  remain (time travel to the versions before the gap fails; the latest reads).
* `incomplete_checkpoint` (warning): a multi-part checkpoint with parts missing (readers
  skip it).
* `temp_file` (warning): a writer's temporary file (`is_writer_temp_file`).
* `orphan_sidecar` (warning): a sidecar no checkpoint in the log references.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from delta_ops.errors import CorruptLogError, VersionNotFoundError
from delta_ops.log.files.checkpoint_files import read_sidecar_references, verify_checkpoint
from delta_ops.log.files.log_directory import LogListing, list_log_dir
from delta_ops.log.files.log_listing import CheckpointFiles, complete_checkpoints
from delta_ops.log.segment.log_segment import LogSegment, build_log_segment
from delta_ops.protocol import filenames
from delta_ops.protocol.filenames import LAST_CHECKPOINT, LOG_DIR, LogFileKind
from delta_ops.storage import Storage

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class LogFinding:
    """One thing wrong in the log.

    Attributes:
        code: what kind of problem (see the module docstring).
        severity: `error` or `warning`.
        file: the file, relative to the table root.
        reason: what is wrong, one line.
        version: the version it concerns, when there is one.
    """

    code: str
    severity: str
    file: str
    reason: str
    version: int | None = None


@dataclass(frozen=True)
class LogCheck:
    """What `check_log` found: the segment of the latest version (None when it cannot be
    built), the findings, and the directory listing it used."""

    segment: LogSegment | None
    findings: tuple[LogFinding, ...]
    listing: LogListing
    latest_version: int


def _log_path(name: str) -> str:
    return f"{LOG_DIR}/{name}"


def _ranges(versions: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for v in versions:
        if out and out[-1][1] == v - 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _gap_reason(first: int, last: int) -> str:
    what = f"commit {first} is" if first == last else f"commits {first} to {last} are"
    return f"{what} missing"


def check_log(storage: Storage, *, verify_up_to_bytes: int | None = None) -> LogCheck:
    """Every finding about the log of `storage`'s table (see the module docstring).

    Args:
        storage: the table's storage.
        verify_up_to_bytes: read the checkpoint readers start from in full (every part and
            sidecar decoded, `verify_checkpoint`) only when its files hold at most this many
            bytes (None: whatever its size); a larger one is opened for its sidecar
            references only (as every checkpoint is), and its rows are read by whoever
            streams the state.

    Raises:
        NotATableError: no Delta log at the root.
        StorageError: the log could not be listed or read (a refusal, not a finding).
    """
    listing = list_log_dir(storage)
    findings: list[LogFinding] = []
    log = listing.log
    segment: LogSegment | None
    try:
        segment = build_log_segment(storage)
    except (CorruptLogError, VersionNotFoundError) as exc:
        segment = None
        # `_last_checkpoint` naming a version beyond every commit and checkpoint listed.
        code = "last_checkpoint" if exc.file == _log_path(LAST_CHECKPOINT) else \
            "log_unreadable"
        findings.append(LogFinding(code, ERROR, exc.file or LOG_DIR, exc.reason, exc.version))
    commits = {lf.version for lf, _ in log if lf.kind == LogFileKind.COMMIT}
    compactions = [(lf.start_version, lf.version) for lf, _ in log
                   if lf.kind == LogFileKind.COMPACTION]
    checkpoints = complete_checkpoints(log, None)
    latest = max([*commits, *(c.version for c in checkpoints), *(e for _, e in compactions)],
                 default=-1)
    used: CheckpointFiles | None = (
        segment.checkpoint if segment is not None
        else (checkpoints[0] if checkpoints else None)
    )

    # _last_checkpoint
    if segment is not None and segment.last_checkpoint_problem:
        findings.append(LogFinding(
            "last_checkpoint", ERROR, _log_path(LAST_CHECKPOINT),
            segment.last_checkpoint_problem))
    elif segment is not None and segment.last_checkpoint is not None \
            and segment.last_checkpoint.version > latest:
        findings.append(LogFinding(
            "last_checkpoint", ERROR, _log_path(LAST_CHECKPOINT),
            f"names version {segment.last_checkpoint.version}, beyond the latest version "
            f"{latest}", segment.last_checkpoint.version))

    # Contiguity after the checkpoint readers start from; history before it.
    start = used.version + 1 if used is not None else 0

    def covered(v: int) -> bool:
        return v in commits or any(s <= v <= e for s, e in compactions)

    missing = [v for v in range(start, latest + 1) if not covered(v)]
    for first, last in _ranges(missing):
        findings.append(LogFinding(
            "log_gap", ERROR, _log_path(filenames.commit_name(first)),
            f"{_gap_reason(first, last)}: versions {first} and later cannot be read"
            + (f" (the log starts from the checkpoint of version {used.version})"
               if used is not None else " (there is no checkpoint to start from)"),
            first))
    if used is not None:
        older = sorted(v for v in commits if v < used.version)
        if older:
            holes = [v for v in range(older[0], used.version) if v not in commits]
            for first, last in _ranges(holes):
                findings.append(LogFinding(
                    "history_gap", WARNING, _log_path(filenames.commit_name(first)),
                    f"{_gap_reason(first, last)} below the checkpoint of version "
                    f"{used.version}: versions {older[0]} to {last} can no longer be read "
                    "(time travel); the latest version reads", first))

    if segment is None and any(f.code == "log_gap" for f in findings):
        # The gap is why the segment does not build: one finding, not two.
        findings = [f for f in findings if f.code != "log_unreadable"]

    # Incomplete multi-part checkpoints.
    parts: dict[tuple[int, int], set[int]] = defaultdict(set)
    for lf, _info in log:
        if lf.kind == LogFileKind.CHECKPOINT_MULTIPART and lf.num_parts:
            parts[(lf.version, lf.num_parts)].add(lf.part or 0)
    for (version, total), have in sorted(parts.items()):
        absent = sorted(set(range(1, total + 1)) - have)
        if absent:
            findings.append(LogFinding(
                "incomplete_checkpoint", WARNING,
                _log_path(filenames.multipart_checkpoint_name(version, absent[0], total)),
                f"{len(absent)} of the {total} parts of the checkpoint of version {version} "
                f"are missing (parts {', '.join(map(str, absent))}); readers skip it",
                version))

    # Checkpoints: sidecars, and the one readers start from read in full.
    referenced: set[str] = set()
    for cp in checkpoints:
        try:
            refs = read_sidecar_references(storage, cp)
        except CorruptLogError as exc:
            findings.append(LogFinding(
                "corrupt_checkpoint", ERROR, exc.file or cp.files[0].path, exc.reason,
                cp.version))
            continue
        for ref in refs:
            referenced.add(ref.name)
            if ref.name not in listing.sidecars:
                findings.append(LogFinding(
                    "missing_sidecar", ERROR, ref.path,
                    f"the V2 checkpoint of version {cp.version} "
                    f"({cp.files[0].path.rsplit('/', 1)[-1]}) references this sidecar, "
                    "which does not exist", cp.version))
    if used is not None and not any(
        f.version == used.version and f.code in ("corrupt_checkpoint", "missing_sidecar")
        for f in findings
    ):
        size = sum(info.size or 0 for info in used.files)
        problem = None
        if verify_up_to_bytes is None or size <= verify_up_to_bytes:
            problem = verify_checkpoint(storage, used)
        if problem is not None:
            findings.append(LogFinding(
                "corrupt_checkpoint", ERROR, problem.file or used.files[0].path,
                problem.reason, used.version))

    # Leftovers.
    for info in listing.temp:
        findings.append(LogFinding(
            "temp_file", WARNING, info.path,
            "temporary file a writer left behind (its target was never published under "
            "this name)"))
    for name in sorted(set(listing.sidecars) - referenced):
        findings.append(LogFinding(
            "orphan_sidecar", WARNING, listing.sidecars[name].path,
            "sidecar no checkpoint in the log references"))
    return LogCheck(segment, tuple(findings), listing, latest)


__all__ = ["ERROR", "WARNING", "LogCheck", "LogFinding", "check_log"]
