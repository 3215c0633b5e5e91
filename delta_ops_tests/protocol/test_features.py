"""Tests of delta_ops.protocol.features: the feature table, legacy versions and the gate."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from delta_ops.errors import CorruptLogError, UnsupportedFeatureError
from delta_ops.protocol import features as F
from delta_ops_tests.support.corpus import CORPUS, SPEC_DIR, all_corpus_tables, corpus_path

SPEC = SPEC_DIR / "PROTOCOL.txt"
SPEC_CURRENT = SPEC_DIR / "PROTOCOL-current.md"
COMMIT_RE = re.compile(r"^\d{20}\.json$")

# Feature names found in corpus protocols that PROTOCOL.txt (the spec the project started
# from) does not define: the current protocol defines catalogManaged, variantType and
# typeWidening (the `-preview` names are Spark's spellings before they were final); Spark
# writes collations, which no protocol text defines.
NOT_IN_SPEC = {
    "catalogManaged",
    "collations",
    "collations-preview",
    "typeWidening-preview",
    "variantShredding-preview",
    "variantType",
    "variantType-preview",
}
OPERATIONS = [op.value for op in F.Operation]
WRITING_OPERATIONS = [op for op in OPERATIONS if op != "read"]
COMMITS = {"commit", "row_tracking_backfill"}
# What each operation may do, written from the spec, independently of the feature table:
# "Maintenance Operations on Catalog-managed Tables" allows checkpoints, log compaction and
# version checksums, prohibits cleanup and VACUUM unless the catalog permits them, and
# writers commit through the catalog; Spark-only features (issue 13) keep refusing the
# writes that could break them. Every other known feature allows every operation.
REFUSED = {
    "catalogManaged": {"cleanup", "vacuum"} | COMMITS,
    "checkpointProtection": {"cleanup"} | COMMITS,
    "collations": set(WRITING_OPERATIONS),
    "collations-preview": set(WRITING_OPERATIONS),
}


@cache
def _protocols() -> tuple[tuple[str, str, dict], ...]:
    """(table, file, protocol) of every protocol action in every JSON file of every log."""
    out = []
    for table in all_corpus_tables():
        for path in sorted((corpus_path(table) / "_delta_log").rglob("*.json")):
            for line in path.read_bytes().splitlines():
                if line.strip():
                    action = orjson.loads(line)
                    if "protocol" in action:
                        out.append((table, path.relative_to(CORPUS).as_posix(), action["protocol"]))
    return tuple(out)


@cache
def _latest_protocol(table: str) -> dict | None:
    protocol = None
    log = corpus_path(table) / "_delta_log"
    for path in sorted(p for p in log.iterdir() if COMMIT_RE.match(p.name)):
        for line in Path(path).read_bytes().splitlines():
            if line.strip():
                protocol = orjson.loads(line).get("protocol", protocol)
    if protocol is None:
        # A truncated log (e.g. DAT no_replay) keeps its protocol only in a checkpoint.
        for cp in sorted(log.glob("*.checkpoint.parquet"), reverse=True):
            rows = pq.read_table(cp, columns=["protocol"]).column("protocol").to_pylist()
            found = [r for r in rows if r is not None]
            if found:
                return {k: v for k, v in found[0].items() if v is not None}
    return protocol


PROTOCOLS = _protocols()


def test_corpus_has_protocols():
    assert len(PROTOCOLS) > 150


@pytest.mark.parametrize("protocol", [p for *_, p in PROTOCOLS], ids=[f for _, f, _ in PROTOCOLS])
def test_every_corpus_protocol_parses(protocol):
    readers = F.reader_features(protocol)
    writers = F.writer_features(protocol)
    if protocol["minReaderVersion"] >= 3:
        assert readers == set(protocol.get("readerFeatures") or [])
    else:
        assert readers <= {"columnMapping"}
    if protocol["minWriterVersion"] >= 7:
        assert writers == set(protocol.get("writerFeatures") or [])
    else:
        assert writers == F.implied_features(1, protocol["minWriterVersion"])
    for op in OPERATIONS:
        missing = F.unsupported_features(protocol, op)
        assert set(missing) == {"read", "write"}
        assert set(missing["read"]) == {n for n in readers if op in REFUSED.get(n, ())}
        assert set(missing["write"]) == {n for n in writers if op in REFUSED.get(n, ())}
        assert missing["read"] == sorted(missing["read"])


def test_every_feature_name_in_the_corpus_is_classified():
    names = set()
    for *_, p in PROTOCOLS:
        names |= set(p.get("readerFeatures") or []) | set(p.get("writerFeatures") or [])
    assert names <= set(F.FEATURES_BY_NAME)
    assert NOT_IN_SPEC <= names  # the corpus still exercises every newer name
    assert set(REFUSED) <= set(F.FEATURES_BY_NAME)
    for name in F.FEATURES_BY_NAME:
        assert F.FeatureName(name) == name
        assert getattr(F.FeatureName, F._constant_name(name)).value == name


def _expected_refusal(protocol: dict, operation: str) -> set[str] | None:
    names = set(F.reader_features(protocol))
    if operation != "read":
        names |= F.writer_features(protocol)
    return {n for n in names if operation in REFUSED.get(n, ())}


@pytest.mark.parametrize("table", all_corpus_tables())
def test_gate_on_every_corpus_table(table):
    protocol = _latest_protocol(table)
    if protocol is None:
        assert "missing-protocol" in table or "without-protocol" in table, table
        for op in OPERATIONS:
            with pytest.raises(CorruptLogError, match="no protocol"):
                F.ensure_supported(protocol, op, table=table)
        return
    for op in OPERATIONS:
        if protocol["minReaderVersion"] > 3:
            with pytest.raises(UnsupportedFeatureError, match="reader version"):
                F.ensure_supported(protocol, op, table=table)
            continue
        refused = _expected_refusal(protocol, op)
        if refused:
            with pytest.raises(UnsupportedFeatureError) as info:
                F.ensure_supported(protocol, op, table=table, version=3)
            assert set(info.value.features) == refused
            assert info.value.table == table
            for name in refused:
                assert name in str(info.value)
        else:
            F.ensure_supported(protocol, op, table=table)


@pytest.mark.parametrize(
    ("table", "name"),
    [
        ("kernel-benchmarks__basic_catalog_managed/delta", "catalogManaged"),
        ("kernel-defaults__catalog-owned-preview", "catalogManaged"),
        ("golden__spark-variant-checkpoint", "variantType-preview"),
        ("kernel-defaults__spark-variant-stable-feature-checkpoint", "variantType"),
        ("kernel-defaults__spark-shredded-variant-preview-delta", "variantShredding-preview"),
        ("golden__type-widening", "typeWidening-preview"),
        ("golden__type-widening-nested", "typeWidening-preview"),
        ("golden__collations-table", "collations"),
        ("golden__collations-preview-table", "collations-preview"),
    ],
)
def test_newer_features_per_operation(table, name):
    protocol = _latest_protocol(table)
    assert name in F.reader_features(protocol) | F.writer_features(protocol)
    for op in OPERATIONS:
        if op in REFUSED.get(name, ()):
            with pytest.raises(UnsupportedFeatureError, match=re.escape(name)) as info:
                F.ensure_supported(protocol, op, table=table, version=2)
            assert name in info.value.features
            assert f"table {table}" in str(info.value)
            assert "version 2" in str(info.value)
            # The message says why, not only that the feature is unknown.
            assert "does not support" not in str(info.value)
        else:
            F.ensure_supported(protocol, op, table=table, version=2)


def test_catalog_managed_maintenance_opt_in():
    protocol = _latest_protocol("kernel-defaults__catalog-owned-preview")
    for op in ("cleanup", "vacuum"):
        with pytest.raises(UnsupportedFeatureError, match="managing catalog permits"):
            F.ensure_supported(protocol, op)
        F.ensure_supported(protocol, op, permitted=frozenset({"catalogManaged"}))
    # The opt-in covers maintenance only: a commit still goes through the catalog.
    with pytest.raises(UnsupportedFeatureError, match="commit through the catalog"):
        F.ensure_supported(protocol, "commit")


def test_checkpoint_protection_allows_adding_log_files_only():
    protocol = {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["checkpointProtection", "appendOnly", "invariants"],
    }
    for op in ("read", "checkpoint", "checksum", "compaction", "vacuum"):
        F.ensure_supported(protocol, op)
    for op in ("cleanup", "commit", "row_tracking_backfill"):
        with pytest.raises(UnsupportedFeatureError, match="checkpointProtection") as info:
            F.ensure_supported(protocol, op)
        assert info.value.features == ["checkpointProtection"]


def test_misspelt_feature_names_are_errors():
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    for ask in (F.is_feature_supported, lambda p, n: F.is_feature_enabled(p, {}, n)):
        with pytest.raises(ValueError, match="unknown table feature name 'rowtracking'"):
            ask(protocol, "rowtracking")
    assert F.is_feature_supported(protocol, F.FeatureName.APPEND_ONLY)
    assert F.FeatureName.ROW_TRACKING == "rowTracking"


def test_writer_only_unknown_feature_blocks_writes_not_reads():
    protocol = _latest_protocol("golden__collations-table")
    assert protocol["minReaderVersion"] == 1
    F.ensure_supported(protocol, "read")
    for op in WRITING_OPERATIONS:
        with pytest.raises(UnsupportedFeatureError, match="collations"):
            F.ensure_supported(protocol, op)


def test_invalid_protocol_version_refused():
    protocol = _latest_protocol("golden__deltalog-invalid-protocol-version")
    assert protocol["minReaderVersion"] == 99
    for op in OPERATIONS:
        with pytest.raises(UnsupportedFeatureError, match="reader version 99") as info:
            F.ensure_supported(protocol, op, table="t", version=0)
        assert info.value.features == ["minReaderVersion=99"]


def test_writer_version_above_seven_refused_for_writes_only():
    protocol = {"minReaderVersion": 1, "minWriterVersion": 8}
    F.ensure_supported(protocol, "read")
    for op in WRITING_OPERATIONS:
        with pytest.raises(UnsupportedFeatureError, match="writer version 8"):
            F.ensure_supported(protocol, op)


def test_missing_protocol_is_corrupt_log():
    with pytest.raises(CorruptLogError, match="no protocol") as info:
        F.ensure_supported(None, "vacuum", table="tbl", version=4)
    assert info.value.table == "tbl"
    assert info.value.version == 4


@pytest.mark.parametrize(
    "protocol",
    [
        {},
        {"minReaderVersion": 1},
        {"minReaderVersion": "1", "minWriterVersion": 2},
        {"minReaderVersion": 0, "minWriterVersion": 2},
        {"minReaderVersion": True, "minWriterVersion": 2},
        {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": "deletionVectors"},
        {"minReaderVersion": 3, "minWriterVersion": 7, "writerFeatures": [1]},
    ],
)
def test_malformed_protocols_are_corrupt_log(protocol):
    with pytest.raises(CorruptLogError):
        F.ensure_supported(protocol, "read")


def test_unknown_operation():
    with pytest.raises(ValueError, match="unknown operation 'optimize'"):
        F.ensure_supported({"minReaderVersion": 1, "minWriterVersion": 2}, "optimize")


def test_operation_enum_accepts_strings():
    assert F.Operation("vacuum") is F.Operation.VACUUM
    assert F.Operation.VACUUM == "vacuum"
    assert str(F.Operation.ROW_TRACKING_BACKFILL) == "row_tracking_backfill"
    assert not F.Operation.READ.writes and F.Operation.COMMIT.writes
    F.ensure_supported({"minReaderVersion": 1, "minWriterVersion": 2}, F.Operation.CHECKSUM)


# --- legacy versions --------------------------------------------------------------------------


def test_legacy_implications():
    assert F.implied_features(1, 1) == frozenset()
    assert F.implied_features(1, 2) == {"appendOnly", "invariants"}
    assert F.implied_features(1, 3) == {"appendOnly", "invariants", "checkConstraints"}
    assert F.implied_features(1, 4) == {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
    }
    assert F.implied_features(2, 5) == F.implied_features(1, 4) | {"columnMapping"}
    assert F.implied_features(2, 6) == F.implied_features(2, 5) | {"identityColumns"}
    assert F.implied_features(1, 7) == frozenset()
    assert F.implied_features(2, 7) == {"columnMapping"}
    assert F.implied_features(3, 7) == frozenset()


def test_legacy_protocols():
    r1w2 = {"minReaderVersion": 1, "minWriterVersion": 2}
    assert F.reader_features(r1w2) == frozenset()
    assert F.writer_features(r1w2) == {"appendOnly", "invariants"}
    r2w5 = {"minReaderVersion": 2, "minWriterVersion": 5}
    assert F.reader_features(r2w5) == {"columnMapping"}
    assert "columnMapping" in F.writer_features(r2w5)
    assert F.is_feature_supported(r2w5, "columnMapping")
    assert not F.is_feature_supported(
        {"minReaderVersion": 1, "minWriterVersion": 5}, "columnMapping"
    )
    assert not F.is_feature_supported(r2w5, "identityColumns")
    assert F.is_feature_supported({"minReaderVersion": 2, "minWriterVersion": 6}, "identityColumns")
    # The spec's example: reader version 2 with writer features.
    spec_example = {
        "minReaderVersion": 2,
        "minWriterVersion": 7,
        "writerFeatures": ["columnMapping", "identityColumns"],
    }
    assert F.reader_features(spec_example) == {"columnMapping"}
    assert F.writer_features(spec_example) == {"columnMapping", "identityColumns"}
    assert F.is_feature_supported(spec_example, "columnMapping")
    assert not F.is_feature_supported(spec_example, "appendOnly")


def test_legacy_versions_in_feature_records():
    assert F.feature("appendOnly").min_writer_version == 2
    assert F.feature("invariants").min_writer_version == 2
    assert F.feature("checkConstraints").min_writer_version == 3
    assert F.feature("changeDataFeed").min_writer_version == 4
    assert F.feature("generatedColumns").min_writer_version == 4
    cm = F.feature("columnMapping")
    assert (cm.min_reader_version, cm.min_writer_version) == (2, 5)
    assert F.feature("identityColumns").min_writer_version == 6
    for name in ("deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"):
        record = F.feature(name)
        assert (record.kind, record.min_reader_version, record.min_writer_version) == (
            F.FeatureKind.READER_WRITER,
            3,
            7,
        )
    for name in ("rowTracking", "domainMetadata", "clustering", "inCommitTimestamp"):
        assert F.feature(name).min_writer_version == 7
        assert F.feature(name).kind is F.FeatureKind.WRITER
    assert F.feature("rowTracking").requires == {"domainMetadata"}
    assert F.feature("clustering").requires == {"domainMetadata"}
    assert F.feature("inCommitTimestamps") is F.feature("inCommitTimestamp")
    assert F.feature("zOrder") is None
    catalog = F.feature("catalogManaged")
    assert catalog.kind is F.FeatureKind.READER_WRITER
    assert catalog.requires == {"inCommitTimestamp"}
    for name in ("variantType", "variantShredding", "typeWidening"):
        assert F.feature(name).kind is F.FeatureKind.READER_WRITER, name
        assert F.feature(name).min_reader_version == 3 and F.feature(name).min_writer_version == 7
    assert F.feature("variantShredding").requires == {"variantType"}


def _spec_feature_table(spec: Path = SPEC) -> dict[str, str]:
    """{name: "Readers and writers" | "Writers only"} from the spec's feature-name table."""
    text = spec.read_text(encoding="utf-8")
    start = text.index("Feature | Name | Readers or Writers?")
    end = text.index("Deletion Vectors are basically", start)
    rows = re.findall(
        r"\|\s*`?([A-Za-z0-9]+)`?\s*\|\s*(Readers and writers|Writers only)", text[start:end], re.I
    )
    return {name: kind.lower() for name, kind in rows}


@pytest.mark.parametrize("spec", [SPEC, SPEC_CURRENT], ids=["PROTOCOL.txt", "current"])
def test_feature_table_covers_the_spec(spec):
    table = _spec_feature_table(spec)
    assert len(table) >= 16
    for name, kind in table.items():
        record = F.feature(name)
        assert record is not None, name
        expected = (
            F.FeatureKind.READER_WRITER if kind.startswith("readers") else F.FeatureKind.WRITER
        )
        assert record.kind is expected, name
    if spec is SPEC_CURRENT:
        assert "catalogManaged" in table
    text = spec.read_text(encoding="utf-8")
    # In-Commit Timestamps: PROTOCOL.txt defines it in its own section only, spelt
    # `inCommitTimestamps` there; the current text lists `inCommitTimestamp` in the table.
    if spec is SPEC:
        assert "inCommitTimestamps" in text and "delta.enableInCommitTimestamps" in text
    else:
        assert table["inCommitTimestamp"] == "writers only"


def test_every_other_known_feature_supports_every_operation():
    for record in F.FEATURES:
        expected = F.ALL_OPERATIONS - {F.Operation(op) for op in REFUSED.get(record.name, ())}
        assert record.operations == expected, record.name
        assert record.why or record.operations == F.ALL_OPERATIONS, record.name
    every = sorted(n for n in F.FEATURES_BY_NAME if n not in REFUSED)
    readers = sorted(
        f.name for f in F.FEATURES if f.kind is F.FeatureKind.READER_WRITER and f.name in every
    )
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": readers,
        "writerFeatures": every + ["inCommitTimestamps"],
    }
    for op in OPERATIONS:
        F.ensure_supported(protocol, op)
        assert F.unsupported_features(protocol, op) == {"read": [], "write": []}


def test_unsupported_features_lists_both_sides_for_inspection():
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["futureReaderFeature", "deletionVectors", "catalogManaged"],
        "writerFeatures": ["futureReaderFeature", "deletionVectors", "zOrder", "catalogManaged"],
    }
    assert F.unsupported_features(protocol) == {
        "read": ["futureReaderFeature"],
        "write": ["futureReaderFeature", "zOrder"],
    }
    with pytest.raises(UnsupportedFeatureError) as info:
        F.ensure_supported(protocol, "read")
    assert info.value.features == ["futureReaderFeature"]
    with pytest.raises(UnsupportedFeatureError) as info:
        F.ensure_supported(protocol, "commit")
    assert info.value.features == ["catalogManaged", "futureReaderFeature", "zOrder"]
    assert "does not support: futureReaderFeature, zOrder" in str(info.value)
    assert "commit through the catalog" in str(info.value)


# --- supported vs. enabled --------------------------------------------------------------------


def test_supported_is_not_enabled():
    protocol = _latest_protocol("golden__basic-with-vacuum-protocol-check-feature")
    assert F.is_feature_supported(protocol, "appendOnly")
    assert not F.is_feature_enabled(protocol, {}, "appendOnly")
    assert F.is_feature_enabled(protocol, {"delta.appendOnly": "TRUE"}, "appendOnly")
    assert F.is_feature_enabled(protocol, None, "vacuumProtocolCheck")
    assert F.is_feature_enabled(protocol, {}, "invariants")
    assert not F.is_feature_enabled(
        protocol, {"delta.enableDeletionVectors": "true"}, "deletionVectors"
    )


def test_enabled_on_corpus_tables():
    dv = _latest_protocol("deletion_vectors")
    assert F.is_feature_enabled(dv, {"delta.enableDeletionVectors": "true"}, "deletionVectors")
    cm = _latest_protocol("column_mapping")
    assert F.is_feature_enabled(cm, {"delta.columnMapping.mode": "name"}, "columnMapping")
    assert not F.is_feature_enabled(cm, {"delta.columnMapping.mode": "none"}, "columnMapping")
    ict = _latest_protocol("kernel-benchmarks__basic_catalog_managed/delta")
    assert F.is_feature_supported(ict, "inCommitTimestamp")
    assert F.is_feature_enabled(
        ict, {"delta.enableInCommitTimestamps": "true"}, "inCommitTimestamp"
    )
    # Spec "Catalog-managed Table Enablement": supported and active when listed on both sides.
    assert F.is_feature_supported(ict, "catalogManaged")
    assert F.is_feature_enabled(ict, {}, "catalogManaged")
