"""Protocol upgrades: adding table features to a protocol action.

Spec sections: "Table Features" ("Table Features for New and Existing Tables": moving a
legacy (reader, writer) version pair to table features lists every feature the old versions
imply, assumed used unless proven otherwise; reader features are listed in both lists;
reader version 3 needs writer version 7), "Protocol Evolution". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from delta_ops.protocol import features
from delta_ops.protocol.features import (
    TABLE_FEATURES_READER_VERSION,
    TABLE_FEATURES_WRITER_VERSION,
    feature,
)

__all__ = ["feature_closure", "protocol_with_features"]


def feature_closure(names: Iterable[str]) -> frozenset[str]:
    """`names` plus every feature they require, transitively (rowTracking -> domainMetadata).

    Raises:
        ValueError: A name the spec does not define.
    """
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        record = feature(name)
        if record is None:
            raise ValueError(f"unknown table feature {name!r}")
        if record.name in out:
            continue
        out.add(record.name)
        todo.extend(record.requires)
    return frozenset(out)


def _legacy_writer_features(protocol: Mapping[str, Any]) -> set[str]:
    """Writer-side features of a protocol, as a writer-features list must name them: the
    explicit list at writer 7, else every feature the legacy versions imply (the reader
    version's too, since reader features are listed among writer features as well)."""
    reader = protocol["minReaderVersion"]
    writer = protocol["minWriterVersion"]
    if writer >= TABLE_FEATURES_WRITER_VERSION:
        return set(features.writer_features(protocol))
    implied = set(features.implied_features(reader, writer))
    if reader >= TABLE_FEATURES_READER_VERSION:
        implied |= set(features.reader_features(protocol))
    return implied


def protocol_with_features(
    protocol: Mapping[str, Any], names: Iterable[str]
) -> dict[str, Any] | None:
    """The protocol that supports `names` (and what they require) besides what it supports.

    A legacy writer version moves to 7 listing every feature its versions imply; the reader
    version moves to 3 only when a reader-writer feature without a legacy reader version is
    added (deletionVectors, v2Checkpoint, ...), listing the implied reader features too.
    Writer-only features (rowTracking, domainMetadata, inCommitTimestamp) leave the reader
    version alone.

    Args:
        protocol: The current protocol action (as in the log).
        names: Feature names to support.

    Returns:
        The new protocol action, or None when every feature is already supported.

    Raises:
        ValueError: An unknown feature name.
        CorruptLogError: A malformed protocol.
    """
    wanted = feature_closure(names)
    missing = {n for n in wanted if not features.is_feature_supported(protocol, n)}
    if not missing:
        return None
    reader = int(protocol["minReaderVersion"])
    writer_names = _legacy_writer_features(protocol) | wanted
    reader_rw = {n for n in wanted if feature(n).is_reader_feature}  # type: ignore[union-attr]
    needs_reader_features = reader >= TABLE_FEATURES_READER_VERSION or any(
        feature(n).legacy_reader_version is None
        for n in reader_rw  # type: ignore[union-attr]
    )
    out: dict[str, Any] = {
        "minReaderVersion": reader,
        "minWriterVersion": TABLE_FEATURES_WRITER_VERSION,
    }
    if needs_reader_features:
        reader_names = set(features.reader_features(protocol)) | reader_rw
        out["minReaderVersion"] = TABLE_FEATURES_READER_VERSION
        out["readerFeatures"] = sorted(reader_names)
        writer_names |= reader_names
    elif reader_rw:
        # Only legacy-expressible reader-writer features (columnMapping): raise the legacy
        # reader version so readers see them.
        out["minReaderVersion"] = max(
            reader,
            max(feature(n).legacy_reader_version or 1 for n in reader_rw),  # type: ignore[union-attr]
        )
    out["writerFeatures"] = sorted(writer_names)
    return out
