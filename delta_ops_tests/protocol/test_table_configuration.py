"""`TableConfiguration`: built from every corpus table it gives the answers the free functions
over raw protocol/metadata dicts gave; bad input fails naming the table and the version; each
part is parsed once; one `CheckpointKind`."""

from __future__ import annotations

import operator
import re
from datetime import timedelta
from functools import cache

import orjson
import pytest

from delta_ops.errors import (
    CorruptLogError,
    DeltaOpsError,
    InvalidTablePropertyError,
    UnsupportedFeatureError,
)
from delta_ops.log.segment.log_segment import build_log_segment
from delta_ops.log.segment.log_state import TableSettings
from delta_ops.log.segment.protocol_metadata import read_protocol_metadata
from delta_ops.log.snapshot.loaded_snapshot import load_snapshot
from delta_ops.protocol import features as F
from delta_ops.protocol.actions import Metadata
from delta_ops.protocol.checkpoint_kind import CheckpointKind
from delta_ops.protocol.filenames import commit_name
from delta_ops.protocol.properties import TableProperties
from delta_ops.protocol.table_configuration import IctEnablement, TableConfiguration
from delta_ops.storage import Storage
from delta_ops_tests.support.corpus import REPO_ROOT, all_corpus_tables, corpus_path

TABLE = "memory://t"
LEGACY = {"minReaderVersion": 1, "minWriterVersion": 2}


# ---- the answers before TableConfiguration, written out as they were ------------------------


def _old_column_mapping_mode(configuration: dict) -> str:
    """`protocol.properties.column_mapping_mode` before it moved."""
    value = configuration.get("delta.columnMapping.mode")
    return "none" if value is None else TableProperties.from_configuration(
        {"delta.columnMapping.mode": value}
    ).column_mapping_mode


def _old_ict(configuration: dict) -> IctEnablement:
    """`log.segment.timestamps.IctEnablement.from_metadata` before it moved."""
    if configuration.get("delta.enableInCommitTimestamps", "false").lower() != "true":
        return IctEnablement(False)
    v = configuration.get("delta.inCommitTimestampEnablementVersion")
    ts = configuration.get("delta.inCommitTimestampEnablementTimestamp")
    return IctEnablement(True, int(v) if v is not None else 0, int(ts) if ts is not None else None)


def _old_default_kind(protocol: dict, configuration: dict) -> CheckpointKind:
    """`maintenance.checkpoint.plan.default_kind` before it asked the configuration."""
    v2 = F.is_feature_supported(protocol, "v2Checkpoint")
    if v2 and TableProperties.from_configuration(configuration).checkpoint_v2:
        return CheckpointKind.V2_UUID
    return CheckpointKind.CLASSIC


def _raised(call, *args) -> tuple[str, str] | None:
    try:
        call(*args)
    except DeltaOpsError as exc:
        return type(exc).__name__, exc.reason
    return None


@cache
def _corpus_configurations() -> tuple[tuple[str, TableConfiguration], ...]:
    """(name, configuration at the latest version) of every corpus table whose log segment
    builds (the light replay: protocol and metaData only)."""
    out = []
    for name in all_corpus_tables():
        storage = Storage.for_uri(str(corpus_path(name)))
        try:
            config = read_protocol_metadata(storage, build_log_segment(storage))
        except DeltaOpsError:
            continue  # a log that does not build a segment (corrupt on purpose)
        out.append((name, config))
    return tuple(out)


def test_every_corpus_table_gives_a_configuration():
    configs = _corpus_configurations()
    assert len(all_corpus_tables()) > 150
    assert len(configs) > 150
    for name, config in configs:
        assert config.validate() is config, name
        assert config.table == Storage.for_uri(str(corpus_path(name))).root
        assert isinstance(config.version, int)


def test_corpus_answers_match_the_free_functions():
    """Features, the gate, properties, column mapping, ICT and the checkpoint kind, as the
    functions over raw dicts answered them, on every corpus table."""
    seen = {"column_mapping": 0, "ict": 0, "refused": 0, "v2": 0}
    for name, config in _corpus_configurations():
        protocol, cfg = dict(config.protocol), config.metadata.configuration
        assert config.reader_features == F.reader_features(protocol), name
        assert config.writer_features == F.writer_features(protocol), name
        assert (config.min_reader_version, config.min_writer_version) == (
            protocol["minReaderVersion"], protocol["minWriterVersion"]
        )
        for feature in F.FEATURES:
            assert config.is_feature_supported(feature.name) == F.is_feature_supported(
                protocol, feature.name
            ), (name, feature.name)
            assert config.is_feature_enabled(feature.name) == F.is_feature_enabled(
                protocol, cfg, feature.name
            ), (name, feature.name)
        for op in F.Operation:
            assert config.unsupported_features(op) == F.unsupported_features(protocol, op)
            ours = _raised(config.ensure_supported, op)
            theirs = _raised(F.ensure_supported, protocol, op)
            assert ours == theirs, (name, op)
        assert config.refused_operations() == F.refused_operations(protocol), name
        assert config.properties == TableProperties.from_configuration(cfg), name
        assert config.column_mapping_mode == _old_column_mapping_mode(cfg), name
        assert config.ict == _old_ict(cfg), name
        assert config.default_checkpoint_kind() == _old_default_kind(protocol, cfg), name
        assert config.is_append_only == F.is_feature_enabled(protocol, cfg, "appendOnly")
        assert config.is_row_tracking_enabled == F.is_feature_enabled(
            protocol, cfg, "rowTracking"
        )
        assert config.schema == config.metadata.schema
        seen["column_mapping"] += config.column_mapping_mode != "none"
        seen["ict"] += config.ict.enabled
        seen["refused"] += bool(config.refused_operations())
        seen["v2"] += config.is_feature_supported("v2Checkpoint")
    # The corpus exercises each answer both ways.
    assert all(count >= 2 for count in seen.values()), seen


def test_snapshots_carry_the_configuration_of_the_light_replay():
    compared = 0
    for name, light in _corpus_configurations():
        storage = Storage.for_uri(str(corpus_path(name)))
        try:
            snap = load_snapshot(storage)
        except DeltaOpsError:
            continue  # a table delta_ops refuses to read (the light replay still answers)
        config = snap.table_configuration
        assert config is snap.table_configuration  # built once per snapshot
        assert config == light, name
        assert (config.table, config.version) == (snap.table, snap.version)
        assert snap.properties is config.properties and snap.ict is config.ict
        assert snap.reader_features == config.reader_features
        compared += 1
    assert compared > 120


def test_table_settings_carry_a_configuration():
    name, light = next((n, c) for n, c in _corpus_configurations() if n == "golden__checkpoint")
    settings = TableSettings(light.version, dict(light.protocol), light.metadata.configuration)
    config = settings.table_configuration
    assert config is settings.table_configuration
    assert config.version == light.version and dict(config.protocol) == dict(light.protocol)
    assert config.properties == light.properties
    assert settings.checkpoint_interval == light.properties.checkpoint_interval
    # The cursor's seed of the light replay is the settings' configuration.
    storage = Storage.for_uri(str(corpus_path(name)))
    again = read_protocol_metadata(storage, build_log_segment(storage), since=config)
    assert again.protocol == light.protocol and again.configuration == light.configuration


def test_each_part_is_parsed_once():
    config = TableConfiguration(
        {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
         "writerFeatures": ["deletionVectors", "inCommitTimestamp"]},
        Metadata({"configuration": {"delta.enableInCommitTimestamps": "true",
                                    "delta.inCommitTimestampEnablementVersion": "4"}}),
        9, TABLE,
    )
    assert config.properties is config.properties
    assert config.reader_features is config.reader_features
    assert config.ict is config.ict and config.ict == IctEnablement(True, 4, None)
    assert config.ict.applies_to(4) and not config.ict.applies_to(3)
    assert config.is_feature_enabled("inCommitTimestamp")
    assert config.deletion_vectors_readable


# ---- bad input: the errors name the table and the version -----------------------------------


@pytest.mark.parametrize(
    "protocol",
    [
        {"minReaderVersion": "1", "minWriterVersion": 2},
        {"minReaderVersion": 0, "minWriterVersion": 2},
        {"minWriterVersion": 2},
        {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": "deletionVectors"},
        {"minReaderVersion": 3, "minWriterVersion": 7, "writerFeatures": [1]},
    ],
)
def test_a_malformed_protocol_names_the_version(protocol):
    config = TableConfiguration(protocol, Metadata({}), 7, TABLE)  # building reads nothing
    for question in (
        lambda: (config.reader_features, config.writer_features),
        lambda: config.is_feature_supported("deletionVectors"),
        lambda: config.ensure_supported("read"),
        config.validate,
    ):
        with pytest.raises(CorruptLogError) as info:
            question()
        assert (info.value.table, info.value.version) == (TABLE, 7)
        assert "(table memory://t, version 7)" in str(info.value)


def test_missing_actions_name_the_version():
    with pytest.raises(CorruptLogError, match="no protocol action") as info:
        TableConfiguration.of(None, Metadata({}), table=TABLE, version=3)
    assert (info.value.table, info.value.version) == (TABLE, 3)
    with pytest.raises(CorruptLogError, match="no metaData action") as info:
        TableConfiguration.of(LEGACY, None, table=TABLE, version=3)
    assert info.value.version == 3
    assert TableConfiguration.of(LEGACY, {"id": "x"}).metadata == Metadata({"id": "x"})


def test_unsupported_versions_and_features_name_the_version():
    newer = TableConfiguration({"minReaderVersion": 4, "minWriterVersion": 7}, Metadata({}),
                               12, TABLE)
    with pytest.raises(UnsupportedFeatureError, match="reader version 4") as info:
        newer.ensure_supported("read")
    assert (info.value.table, info.value.version) == (TABLE, 12)
    unknown = TableConfiguration(
        {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["futureFeature"]},
        Metadata({}), 5, TABLE,
    )
    unknown.ensure_supported("read")  # a writer feature does not stop readers
    with pytest.raises(UnsupportedFeatureError, match="futureFeature") as info:
        unknown.ensure_supported("vacuum")
    assert info.value.features == ["futureFeature"] and info.value.version == 5
    with pytest.raises(ValueError, match="deletionVector"):
        unknown.is_feature_supported("deletionVector")  # misspelt


@pytest.mark.parametrize(
    ("key", "value", "question"),
    [
        ("delta.checkpointInterval", "often", "properties.checkpoint_interval"),
        ("delta.columnMapping.mode", "physical", "column_mapping_mode"),
        ("delta.inCommitTimestampEnablementVersion", "soon", "ict"),
        ("delta.inCommitTimestampEnablementTimestamp", "1.5", "ict"),
    ],
)
def test_an_invalid_property_names_key_value_table_and_version(key, value, question):
    cfg = {"delta.enableInCommitTimestamps": "true", key: value}
    config = TableConfiguration(LEGACY, Metadata({"configuration": cfg}), 8, TABLE)
    config.ensure_supported("read")  # the gate does not need the properties
    with pytest.raises(InvalidTablePropertyError) as info:
        operator.attrgetter(question)(config)
    assert (info.value.key, info.value.value) == (key, value)
    assert (info.value.table, info.value.version) == (TABLE, 8)
    with pytest.raises(InvalidTablePropertyError):
        config.validate()


def test_a_snapshot_with_an_invalid_property_reads_and_its_questions_name_the_version(
    table_copy,
):
    root = table_copy("golden__checkpoint")
    storage = Storage.for_uri(str(root))
    before = load_snapshot(storage)
    metadata = {**before.metadata.raw, "configuration": {"delta.checkpointInterval": "0"}}
    version = before.version + 1
    (root / "_delta_log" / commit_name(version)).write_bytes(
        orjson.dumps({"metaData": metadata}) + b"\n"
    )
    snap = load_snapshot(storage)  # reading does not need the property
    assert snap.version == version
    assert snap.properties.log_retention == timedelta(days=30)  # the others read
    with pytest.raises(InvalidTablePropertyError, match="delta.checkpointInterval") as info:
        snap.properties.checkpoint_interval  # noqa: B018
    assert (info.value.table, info.value.version) == (snap.table, version)
    light = read_protocol_metadata(storage, build_log_segment(storage))
    with pytest.raises(InvalidTablePropertyError) as info:
        light.properties.checkpoint_interval  # noqa: B018
    assert info.value.version == version


# ---- one CheckpointKind -----------------------------------------------------------------------


def test_one_checkpoint_kind():
    import delta_ops.log.files.checkpoint_files as checkpoint_files
    import delta_ops.maintenance.options as options
    from delta_ops.log.files.checkpoint_files import inspect_checkpoint
    from delta_ops.maintenance.checkpoint import CheckpointKind as writer_kind

    assert writer_kind is CheckpointKind
    assert not hasattr(checkpoint_files, "CheckpointShape")
    assert not hasattr(options, "CheckpointKind")
    storage = Storage.for_uri(str(corpus_path("golden__checkpoint")))
    segment = build_log_segment(storage)
    assert segment.checkpoint is not None
    assert inspect_checkpoint(storage, segment.checkpoint).shape is CheckpointKind.CLASSIC


# ---- callers ask the configuration ------------------------------------------------------------

#: The questions that were free functions over raw protocol/metadata dicts.
_FREE_QUESTIONS = re.compile(
    r"(?:\bfeatures\.|(?<![\w.])(?<!def ))"
    r"(?:reader_features|writer_features|unsupported_features|refused_operations|"
    r"is_feature_supported|is_feature_enabled|ensure_supported)\(\s*\w+"
    r"|TableProperties\.from_configuration\(|IctEnablement\.from_metadata\("
    r"|(?<![\w.])column_mapping_mode\("
)


def _free_calls(source: str) -> list[str]:
    """Calls of the free functions in `source`; a method on a configuration or a snapshot
    (`config.ensure_supported("read")`) is the new shape and is not one."""
    return [m.group(0) for m in _FREE_QUESTIONS.finditer(source)]


def test_outside_protocol_only_the_protocol_alone_gates_are_free_calls():
    """Outside `protocol/`, one free function is left, the gate on a protocol without its
    metadata: the Dagster check's cache per distinct protocol. Everything else (log
    compaction included) asks a `TableConfiguration`."""
    root = REPO_ROOT / "delta_ops"
    assert (root / "__init__.py").is_file()
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "protocol" in path.relative_to(root).parts[:1]:
            continue
        calls = _free_calls(path.read_text(encoding="utf-8"))
        if calls:
            found[path.relative_to(root).as_posix()] = calls
    assert sorted(c for calls in found.values() for c in calls) == [
        "features.ensure_supported(protocol"
    ], found


def test_the_free_call_check_sees_the_old_shape():
    old = (
        'features.ensure_supported(settings.protocol, "vacuum")\n'
        "props = TableProperties.from_configuration(metadata.configuration)\n"
        "ict = IctEnablement.from_metadata(metadata)\n"
        'if features.is_feature_supported(protocol, "v2Checkpoint"): pass\n'
    )
    assert len(_free_calls(old)) == 4
    assert _free_calls("ensure_supported(protocol, 'vacuum')\ncolumn_mapping_mode(cfg)\n") == [
        "ensure_supported(protocol", "column_mapping_mode(",
    ]
    new = (
        'config.ensure_supported("vacuum")\nsnap.table_configuration.is_feature_supported("x")\n'
        "mode = config.column_mapping_mode\ndef ensure_supported(self, operation): pass\n"
    )
    assert _free_calls(new) == []
