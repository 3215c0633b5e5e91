"""Secrets in the registry (issue 22, item 6): a key that may hold a credential takes only an
environment variable reference, whatever its spelling; only the keys known to be harmless
show their values; `repr`, `str`, errors and tracebacks show no other value.
"""

from __future__ import annotations

import json
import traceback

import pytest

from delta_ops.defs.policy import Policy
from delta_ops.defs.registry import (
    RegisteredTable,
    Registry,
    RegistryError,
    SparkSettings,
    load_registry,
    parse_registry,
)

SECRET = "Sup3rS3cretValue-4a8f"
#: Names that say "credential" in spellings a list of whole words misses.
SECRET_KEYS = ["secretkey", "SECRET_KEY", "token", "password2", "x-api-key"]


def _everything_shown(exc: BaseException) -> str:
    """What a traceback, the message and the exception's repr show (the whole chain)."""
    return "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.args)


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_literal_under_a_credential_name_is_refused_without_its_value(tmp_path, key):
    path = tmp_path / "tables.yaml"
    path.write_text(
        f"tables:\n  - name: t\n    uri: x\n    storage_options:\n      {key}: {SECRET}\n"
    )
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    message = str(info.value)
    assert f"storage option {key!r} holds a secret" in message
    assert f"{key}: {{env: VARIABLE_NAME}}" in message
    assert SECRET not in _everything_shown(info.value)


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_literal_spark_conf_under_a_credential_name_is_refused(key):
    with pytest.raises(RegistryError) as info:
        parse_registry({"spark": {"conf": {f"spark.hadoop.fs.s3a.{key}": SECRET}}})
    assert "holds a secret" in str(info.value)
    assert SECRET not in _everything_shown(info.value)


def test_harmless_and_identifier_keys_still_take_literals():
    registry = parse_registry({"tables": [{"name": "t", "uri": "x", "storage_options": {
        "region": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000", "key_prefix": "p/",
        "sse_kms_key_id": "arn:kms", "profile": SECRET, "anon": False,
        **{k: {"env": "SOME_VAR"} for k in SECRET_KEYS},
    }}]})
    shown = registry.tables[0].redacted_storage_options()
    assert shown["region"] == "eu-west-1" and shown["endpoint_url"] == "http://127.0.0.1:9000"
    assert shown["profile"] == shown["key_prefix"] == shown["sse_kms_key_id"] == "<redacted>"
    assert shown["anon"] == "False"  # on the harmless list
    assert all(shown[k] == "$SOME_VAR" for k in SECRET_KEYS)


def test_repr_of_a_registry_shows_no_value_but_the_harmless_ones():
    """However its entries were made (a component builds `RegisteredTable`s itself), the
    repr and str of the registry and its parts show only public values."""
    options = {k: SECRET for k in SECRET_KEYS} | {"profile": SECRET, "region": "eu-west-1"}
    table = RegisteredTable(
        name="t", uri="s3://b/t", group="t", policy=Policy(), storage_options=options
    )
    spark = SparkSettings(conf={"spark.executor.memory": "4g", "spark.app.owner": SECRET})
    registry = Registry(path="r.yaml", defaults=Policy(), tables=(table,), spark=spark)
    for shown in (repr(registry), str(registry), repr(table), str(table.storage_options),
                  repr(spark), str(spark), f"{table!r}", f"{table.storage_options}"):
        assert SECRET not in shown, shown
    assert "'region': 'eu-west-1'" in repr(registry)
    assert "'spark.executor.memory': '4g'" in repr(registry)
    assert repr(table).count("<redacted>") == len(SECRET_KEYS) + 1
    # The values themselves are intact for the storage that needs them.
    assert dict(table.storage_options) == options
    assert json.loads(json.dumps(table.storage_options)) == options


def test_a_traceback_while_resolving_options_shows_no_value(monkeypatch):
    """A missing variable while literal and resolved values are in hand: neither the
    message nor a traceback with every frame's locals shows them."""
    from delta_ops.defs.secrets import MissingSecretError

    monkeypatch.setenv("REG_TEST_TOKEN", SECRET)
    registry = parse_registry({"tables": [{"name": "t", "uri": "x", "storage_options": {
        "profile": SECRET, "token": {"env": "REG_TEST_TOKEN"},
        "secretkey": {"env": "REG_TEST_UNSET"}}}]})
    table = registry.tables[0]
    assert SECRET not in repr(table)
    with pytest.raises(MissingSecretError) as info:
        table.resolved_storage_options()
    shown = "".join(traceback.TracebackException.from_exception(
        info.value, capture_locals=True).format())
    assert "REG_TEST_UNSET" in shown
    assert SECRET not in shown
    monkeypatch.setenv("REG_TEST_UNSET", SECRET)
    resolved = table.resolved_storage_options()
    assert resolved["token"] == resolved["secretkey"] == resolved["profile"] == SECRET
    assert SECRET not in repr(resolved) and SECRET not in str(resolved)


@pytest.mark.parametrize(
    "data",
    [
        {"tables": {"name": "t", "uri": "x", "storage_options": {"profile": SECRET}}},
        {"tables": [{"name": "t", "uri": "x", "storage_options": {"profile": SECRET},
                     "vacuum": [SECRET]}]},
        {"spark": [{"conf": {"spark.app.owner": SECRET}}]},
    ],
    ids=["tables-a-mapping", "section-a-list", "spark-a-list"],
)
def test_a_malformed_registry_never_quotes_a_container_with_options(data):
    with pytest.raises(RegistryError) as info:
        parse_registry(data)
    assert "(got a " in str(info.value)
    assert SECRET not in _everything_shown(info.value)


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_discovery_spec_follows_the_same_rules(key):
    """The component's `discover` prefixes: a credential only from the environment, and
    no option value in the repr of what the component read."""
    from pydantic import ValidationError

    from delta_ops.defs.sources import DiscoverySpec, RegistrySource

    with pytest.raises(ValidationError, match="holds a secret"):
        DiscoverySpec(prefix="s3://b/p", storage_options={key: SECRET})
    source = RegistrySource(
        base_dir=".",
        tables=[{"name": "t", "uri": "x", "storage_options": {"profile": SECRET}}],
        discover=[{"prefix": "s3://b/p", "storage_options": {"profile": SECRET,
                                                             key: {"env": "X"}}}],
    )
    assert SECRET not in repr(source) and SECRET not in str(source)
    assert source.tables[0]["storage_options"]["profile"] == SECRET
