"""The extension points and typed fields of `DeltaMaintenanceComponent`: a translator users
subclass (`DeltaOpsTranslator.get_asset_spec`), `asset_post_processors` in `defs.yaml`, and
fields whose models `dg` validates and documents (an unknown key fails the load, naming
it; an invalid value still fails only its own table)."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    DagsterInstance,
    Definitions,
    load_from_defs_folder,
    materialize,
)

from delta_ops.defs import definitions_kwargs
from delta_ops.defs.component import DeltaMaintenanceComponent
from delta_ops.defs.translator import DeltaOpsTranslator
from delta_ops_tests.support.corpus import copy_corpus_table
from delta_ops_tests.support.dg_project import new_project, write_component


@pytest.fixture(autouse=True)
def _dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))


class Curated(DeltaOpsTranslator):
    """Every asset in the group `curated`, with a team tag."""

    def get_asset_spec(self, table, component):
        spec = super().get_asset_spec(table, component)
        return spec.replace_attributes(group_name="curated").merge_attributes(
            tags={"team": "lake"})


class Renamed(DeltaOpsTranslator):
    def get_asset_spec(self, table, component):
        spec = super().get_asset_spec(table, component)
        return spec.replace_attributes(key=spec.key.with_prefix("lake"))


def _specs(defs: Definitions) -> dict[AssetKey, object]:
    return {s.key: s for a in defs.assets if isinstance(a, AssetsDefinition) for s in a.specs}


def test_a_translator_describes_the_assets_and_the_step_still_runs(tmp_path):
    root = copy_corpus_table("basic_append", tmp_path / "t")
    registry = tmp_path / "tables.yaml"
    registry.write_text(yaml.safe_dump({"defaults": {"engine": "local"},
                                        "tables": [{"name": "t", "uri": str(root)}]}))
    defs = Definitions(**definitions_kwargs(registry, translator=Curated()))
    specs = _specs(defs)
    assert len(specs) == 9
    assert {s.group_name for s in specs.values()} == {"curated"}
    assert all(s.tags["team"] == "lake" and s.tags["delta_ops/component"] == k.path[1]
               for k, s in specs.items())
    Definitions.validate_loadable(defs)
    assets = [a for a in defs.assets if isinstance(a, AssetsDefinition)]
    result = materialize(
        assets, selection=AssetSelection.assets(AssetKey(["t", "version_checksum"]))
        .without_checks(), resources=defs.resources, instance=DagsterInstance.ephemeral())
    assert result.success
    assert (root / "_delta_log" / "00000000000000000001.crc").exists()


def test_a_translator_keeps_keys_and_lineage(tmp_path):
    registry = tmp_path / "tables.yaml"
    registry.write_text(yaml.safe_dump({"tables": [{"name": "t", "uri": str(tmp_path)}]}))
    with pytest.raises(ValueError, match=r"changed the key or the dependencies of t/delta_log"):
        definitions_kwargs(registry, translator=Renamed())


def test_a_component_subclass_brings_its_translator(tmp_path, monkeypatch):
    project = new_project(tmp_path / "proj", "ext_proj")
    monkeypatch.syspath_prepend(str(project))
    (project / "ext_proj" / "curated.py").write_text(textwrap.dedent("""
        from delta_ops.defs.component import DeltaMaintenanceComponent
        from delta_ops.defs.translator import DeltaOpsTranslator


        class Curated(DeltaOpsTranslator):
            def get_asset_spec(self, table, component):
                spec = super().get_asset_spec(table, component)
                return spec.replace_attributes(group_name="curated")


        class CuratedComponent(DeltaMaintenanceComponent):
            @property
            def translator(self):
                return Curated()
    """))
    root = copy_corpus_table("basic_append", tmp_path / "t")
    path = write_component(project, "ext_proj", {"tables": [{"name": "t", "uri": str(root)}]})
    data = yaml.safe_load(path.read_text())
    data["type"] = "ext_proj.curated.CuratedComponent"
    path.write_text(yaml.safe_dump(data))
    defs = load_from_defs_folder(path_within_project=project)
    specs = _specs(defs)
    assert {s.group_name for k, s in specs.items() if k.path[0] == "t"} == {"curated"}


def test_asset_post_processors_change_the_specs(tmp_path, monkeypatch):
    project = new_project(tmp_path / "proj", "post_proj")
    monkeypatch.syspath_prepend(str(project))
    root = copy_corpus_table("basic_append", tmp_path / "t")
    write_component(project, "post_proj", {
        "tables": [{"name": "t", "uri": str(root)}, {"name": "u", "uri": str(root)}],
        "asset_post_processors": [
            {"target": "*", "attributes": {"tags": {"team": "lake"}}},
            {"target": "key:u/*", "operation": "merge",
             "attributes": {"metadata": {"tier": "gold"}}},
        ],
    })
    defs = load_from_defs_folder(path_within_project=project)
    Definitions.validate_loadable(defs)
    specs = {k: s for k, s in _specs(defs).items() if k.path[0] in ("t", "u")}
    assert len(specs) == 18
    assert all(s.tags["team"] == "lake" for s in specs.values())
    assert {k.path[0] for k, s in specs.items() if s.metadata.get("tier") == "gold"} == {"u"}
    # The table's own metadata is kept (merge): on its delta_log, the asset that is the table.
    assert all(s.metadata["dagster/table_name"] == k.path[0]
               for k, s in specs.items() if k.path[1] == "delta_log")


def test_the_fields_are_typed_and_documented():
    schema = DeltaMaintenanceComponent.model().model_json_schema()
    defs = schema["$defs"]
    entry = defs["TableEntryModel"]["properties"]
    assert {"name", "uri", "group", "storage_options", "vacuum", "checkpoint"} <= set(entry)
    vacuum = defs["VacuumPolicyModel"]["properties"]
    assert "Materialize all" in vacuum["in_materialize_all"]["description"]
    assert vacuum["cron"]["default"] == "0 3 * * 0"
    assert defs["DiscoverySpecModel"]["properties"]["max_depth"]["default"] == 3
    assert "additionalProperties" in defs["TableEntryModel"]
    props = schema["properties"]
    assert {"defaults", "spark", "tables", "discover", "asset_post_processors"} <= set(props)


def test_an_unknown_key_fails_the_load_naming_it(tmp_path, monkeypatch):
    project = new_project(tmp_path / "proj", "typo_proj")
    monkeypatch.syspath_prepend(str(project))
    write_component(project, "typo_proj", {
        "tables": [{"name": "t", "uri": str(tmp_path / "t"), "vacum": {"cron": "0 3 * * 0"}}],
    })
    with pytest.raises(Exception, match="Error while loading component") as failed:
        load_from_defs_folder(path_within_project=project)
    causes, exc = [], failed.value
    while exc is not None:
        causes.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    assert any("vacum" in c and "not permitted" in c for c in causes), causes
