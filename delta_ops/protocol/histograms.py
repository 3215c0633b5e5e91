"""The histograms of a version checksum: file sizes (Spark's default bin boundaries,
`FILE_SIZE_BIN_BOUNDARIES`) and deleted-record counts per file (10 fixed bins).

Spec section: "Version Checksum File" (`FileSizeHistogram`, `DeletedRecordCountsHistogram`).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from delta_ops.errors import InvalidChecksumError

KB = 1024
MB = 1024 * KB
GB = 1024 * MB

# Spark's FileSizeHistogram.DEFAULT_BINS: powers of two to 4 MB, then finer steps around the
# usual target sizes (128 MB, 512 MB, 1 GB), then powers of two to 256 GB. 95 bins.
FILE_SIZE_BIN_BOUNDARIES: tuple[int, ...] = (
    0,
    *(n * KB for n in (8, 16, 32, 64, 128, 256, 512)),
    *(n * MB for n in (1, 2, 4)),
    *(n * MB for n in range(8, 41, 4)),  # 4 MB steps to 40 MB
    *(n * MB for n in range(48, 121, 8)),  # 8 MB steps to 120 MB
    *(n * MB for n in range(124, 145, 4)),  # 4 MB steps to 144 MB
    *(n * MB for n in range(160, 577, 16)),  # 16 MB steps to 576 MB
    *(n * MB for n in range(640, 1409, 64)),  # 64 MB steps to 1408 MB
    *(n * MB for n in range(1536, 2049, 128)),  # 128 MB steps to 2 GB
    *(n * MB for n in range(2304, 4097, 256)),  # 256 MB steps to 4 GB
    *(n * GB for n in (8, 16, 32, 64, 128, 256)),
)

INT_MAX = 2**31 - 1
# Lower bounds of the 10 deleted-record-count bins (spec; Spark's
# DeletedRecordCountsHistogramUtils.BUCKET_BOUNDARIES without its Long.MaxValue end).
DELETED_RECORD_COUNT_BIN_STARTS: tuple[int, ...] = (
    0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, INT_MAX,
)
NUM_DELETED_RECORD_BINS = len(DELETED_RECORD_COUNT_BIN_STARTS)

HISTOGRAM_FIELD = "fileSizeHistogram"  # the spec's name
LEGACY_HISTOGRAM_FIELD = "histogramOpt"  # Spark's (default) and Databricks' name


def file_size_bin(size: int, boundaries: Sequence[int] = FILE_SIZE_BIN_BOUNDARIES) -> int:
    """Index of the bin holding `size`: the last i with boundaries[i] <= size; -1 below 0.

    Spark's `FileStatsHistogram.getBinIndex` (a binary search): a size equal to a boundary
    opens that bin; sizes past the last boundary fall in the last (open-ended) bin.
    """
    lo, hi = 0, len(boundaries)
    while lo < hi:
        mid = (lo + hi) // 2
        if boundaries[mid] <= size:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def deleted_records_bin(cardinality: int) -> int:
    """Bin of the deleted-record-counts histogram for a file with `cardinality` deleted rows.

    Bins: [0], [1, 9], [10, 99], ..., [10^7, 2^31 - 2], [2^31 - 1, inf).

    Raises:
        ValueError: a negative cardinality.
    """
    if cardinality < 0:
        raise ValueError(f"a deletion vector cardinality cannot be negative: {cardinality}")
    return file_size_bin(cardinality, DELETED_RECORD_COUNT_BIN_STARTS)


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise InvalidChecksumError(f"{what} must be a list of integers, got {value!r:.200}")
    return tuple(value)


@dataclass(frozen=True)
class FileSizeHistogram:
    """File counts and byte totals per size bin (spec `FileSizeHistogram`).

    Bin i holds sizes in [sorted_bin_boundaries[i], sorted_bin_boundaries[i + 1]); the last
    bin is open-ended.
    """

    sorted_bin_boundaries: tuple[int, ...]
    file_counts: tuple[int, ...]
    total_bytes: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.sorted_bin_boundaries
        if not b or b[0] != 0:
            raise InvalidChecksumError(f"histogram boundaries must start at 0: {list(b)[:5]}")
        if any(x >= y for x, y in zip(b, b[1:], strict=False)):
            raise InvalidChecksumError("histogram boundaries must be strictly increasing")
        if len(self.file_counts) != len(b) or len(self.total_bytes) != len(b):
            raise InvalidChecksumError(
                f"histogram has {len(b)} boundaries but {len(self.file_counts)} file counts "
                f"and {len(self.total_bytes)} byte totals"
            )

    @classmethod
    def empty(cls, boundaries: Sequence[int] = FILE_SIZE_BIN_BOUNDARIES) -> FileSizeHistogram:
        zeros = (0,) * len(boundaries)
        return cls(tuple(boundaries), zeros, zeros)

    @classmethod
    def from_sizes(
        cls, sizes: Iterable[int], boundaries: Sequence[int] = FILE_SIZE_BIN_BOUNDARIES
    ) -> FileSizeHistogram:
        return cls.empty(boundaries).updated(added=sizes)

    @classmethod
    def from_dict(cls, d: Any) -> FileSizeHistogram:
        if not isinstance(d, Mapping):
            raise InvalidChecksumError(f"a file size histogram must be an object: {d!r:.200}")
        try:
            return cls(
                _int_list(d["sortedBinBoundaries"], "sortedBinBoundaries"),
                _int_list(d["fileCounts"], "fileCounts"),
                _int_list(d["totalBytes"], "totalBytes"),
            )
        except KeyError as exc:
            raise InvalidChecksumError(f"file size histogram lacks {exc.args[0]}") from exc

    def to_dict(self) -> dict[str, list[int]]:
        return {
            "sortedBinBoundaries": list(self.sorted_bin_boundaries),
            "fileCounts": list(self.file_counts),
            "totalBytes": list(self.total_bytes),
        }

    def updated(
        self, *, added: Iterable[int] = (), removed: Iterable[int] = ()
    ) -> FileSizeHistogram:
        """A new histogram with file sizes inserted and removed (Spark's insert/remove).

        Sizes below the first boundary (negative) belong to no bin and are ignored, as in
        Spark.
        """
        counts = list(self.file_counts)
        totals = list(self.total_bytes)
        b = self.sorted_bin_boundaries
        for sign, sizes in ((1, added), (-1, removed)):
            for size in sizes:
                i = file_size_bin(size, b)
                if i >= 0:
                    counts[i] += sign
                    totals[i] += sign * size
        return FileSizeHistogram(b, tuple(counts), tuple(totals))

    @property
    def is_valid(self) -> bool:
        """No negative count or total (an incremental update gone wrong would show one)."""
        return min(self.file_counts, default=0) >= 0 and min(self.total_bytes, default=0) >= 0


@dataclass(frozen=True)
class DeletedRecordCountsHistogram:
    """Number of files per deleted-record-count bin (spec `DeletedRecordCountsHistogram`)."""

    deleted_record_counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.deleted_record_counts) != NUM_DELETED_RECORD_BINS:
            raise InvalidChecksumError(
                f"deletedRecordCounts must have {NUM_DELETED_RECORD_BINS} bins, "
                f"not {len(self.deleted_record_counts)}"
            )

    @classmethod
    def empty(cls) -> DeletedRecordCountsHistogram:
        return cls((0,) * NUM_DELETED_RECORD_BINS)

    @classmethod
    def from_dict(cls, d: Any) -> DeletedRecordCountsHistogram:
        if not isinstance(d, Mapping) or "deletedRecordCounts" not in d:
            raise InvalidChecksumError(
                f"deletedRecordCountsHistogramOpt must hold deletedRecordCounts: {d!r:.200}"
            )
        return cls(_int_list(d["deletedRecordCounts"], "deletedRecordCounts"))

    def to_dict(self) -> dict[str, list[int]]:
        return {"deletedRecordCounts": list(self.deleted_record_counts)}

    def updated(
        self, *, added: Iterable[int] = (), removed: Iterable[int] = ()
    ) -> DeletedRecordCountsHistogram:
        """Insert/remove files by their deleted-record count (0 for files without a DV)."""
        counts = list(self.deleted_record_counts)
        for c in added:
            counts[deleted_records_bin(c)] += 1
        for c in removed:
            counts[deleted_records_bin(c)] -= 1
        return DeletedRecordCountsHistogram(tuple(counts))

    @property
    def is_valid(self) -> bool:
        return min(self.deleted_record_counts) >= 0
