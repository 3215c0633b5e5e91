"""Protocol upgrades: adding table features to a protocol action.

Spec sections: "Table Features" ("Table Features for New and Existing Tables": moving a
legacy (reader, writer) version pair to table features lists every feature the old versions
imply, assumed used unless proven otherwise; reader features are listed in both lists;
reader version 3 needs writer version 7), "Protocol Evolution". Pure: no I/O.

An upgrade is not free for the table's other writers: a writer must refuse a table whose
protocol lists a writer feature it does not implement. `plan_protocol_upgrade` says what an
upgrade adds and which known writers (`KNOWN_WRITERS`) could write the table before and
cannot after, so that every caller (the command line's `--confirm-protocol-upgrade`, the
Dagster job's `confirm_protocol_upgrade`) asks the same question with the same facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from delta_ops.protocol import features
from delta_ops.protocol.features import (
    TABLE_FEATURES_READER_VERSION,
    TABLE_FEATURES_WRITER_VERSION,
    feature,
)

__all__ = [
    "KNOWN_WRITERS",
    "KnownWriter",
    "ProtocolUpgrade",
    "feature_closure",
    "plan_protocol_upgrade",
    "protocol_with_features",
]


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


@dataclass(frozen=True)
class KnownWriter:
    """Another writer of Delta tables, and the writer features it implements.

    Attributes:
        name: What operators call it.
        checked: The release the features were checked on (a test writes with the
            installed one to a table listing each feature, and fails when the set is
            out of date).
        writer_features: The writer features (table feature names) it writes tables with.
    """

    name: str
    checked: str
    writer_features: frozenset[str]

    def can_write(self, protocol: Mapping[str, Any]) -> bool:
        """Whether it writes a table of `protocol` (every writer feature implemented)."""
        return _legacy_writer_features(protocol) <= self.writer_features

    def describe(self) -> str:
        return f"{self.name} (checked: {self.checked})"


#: The writers whose loss of write access an upgrade names. delta-rs 1.6.6 appends to a
#: table listing any one of these writer features, and refuses ("Unsupported table features
#: required: [...]") one listing any other (rowTracking, domainMetadata, inCommitTimestamp,
#: identityColumns, typeWidening, clustering, collations, ...; catalogManaged tables it does
#: not even load). `delta_ops_tests/row_tracking/test_protocol_upgrade_confirm.py` checks
#: every feature against the installed deltalake.
KNOWN_WRITERS: tuple[KnownWriter, ...] = (
    KnownWriter(
        name="delta-rs / the deltalake Python package",
        checked="deltalake 1.6.6",
        writer_features=frozenset({
            "appendOnly", "invariants", "checkConstraints", "changeDataFeed",
            "generatedColumns", "columnMapping", "deletionVectors", "timestampNtz",
            "v2Checkpoint", "variantType", "variantType-preview",
        }),
    ),
)


@dataclass(frozen=True)
class ProtocolUpgrade:
    """What supporting some features does to a table's protocol.

    Attributes:
        protocol: The protocol before.
        new_protocol: The protocol after; None when every feature is supported already.
        features_added: The features the new protocol supports that the old one did not
            (the ones asked for and what they require), sorted.
        writers_losing_access: Known writers that write the table now and could not after.
    """

    protocol: Mapping[str, Any]
    new_protocol: dict[str, Any] | None
    features_added: tuple[str, ...]
    writers_losing_access: tuple[KnownWriter, ...]

    @property
    def needed(self) -> bool:
        """Whether the protocol changes at all."""
        return self.new_protocol is not None

    def describe(self) -> str:
        """A predicate for "the backfill ...": the features added, the version change, who
        loses write access."""
        if self.new_protocol is None:
            return "leaves the table's protocol as it is (it supports these features already)"
        kind = "writer" if all(
            not feature(n).is_reader_feature for n in self.features_added  # type: ignore[union-attr]
        ) else "table"
        versions = _versions_change(self.protocol, self.new_protocol)
        if self.writers_losing_access:
            who = "afterwards these writers can no longer write it: " + "; ".join(
                w.describe() for w in self.writers_losing_access
            )
        else:
            who = ("no writer delta_ops knows of loses access, but any writer that does not "
                   "implement them can no longer write it")
        return (
            f"adds the {kind} features {', '.join(self.features_added)} to the table's "
            f"protocol ({versions}); {who}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "needed": self.needed,
            "features_added": list(self.features_added),
            "new_protocol": self.new_protocol,
            "writers_losing_access": [w.describe() for w in self.writers_losing_access],
        }


def _versions_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    parts = []
    for key, name in (("minReaderVersion", "reader"), ("minWriterVersion", "writer")):
        before, after = int(old[key]), int(new[key])
        if before != after:
            parts.append(f"{name} version {before} -> {after}")
    if int(old["minWriterVersion"]) < TABLE_FEATURES_WRITER_VERSION:
        parts.append("with table features")
    return ", ".join(parts) or "versions unchanged"


def plan_protocol_upgrade(
    protocol: Mapping[str, Any],
    names: Iterable[str],
    *,
    writers: Iterable[KnownWriter] = KNOWN_WRITERS,
) -> ProtocolUpgrade:
    """What supporting `names` does to `protocol`, and which known writers lose access.

    A writer loses access when it can write the table now and cannot after; one that could
    not write it before is not named.

    Args:
        protocol: The current protocol action.
        names: Feature names to support.
        writers: The writers to judge (default `KNOWN_WRITERS`).

    Raises:
        ValueError: An unknown feature name.
        CorruptLogError: A malformed protocol.
    """
    new = protocol_with_features(protocol, names)
    if new is None:
        return ProtocolUpgrade(protocol, None, (), ())
    added = tuple(sorted(
        n for n in feature_closure(names) if not features.is_feature_supported(protocol, n)
    ))
    losing = tuple(w for w in writers if w.can_write(protocol) and not w.can_write(new))
    return ProtocolUpgrade(protocol, new, added, losing)
