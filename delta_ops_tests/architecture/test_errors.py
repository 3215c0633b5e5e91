"""Every error delta_ops raises survives pickling with what it names: an error raised in
another process (a Spark executor's Python worker, a process pool) comes back whole. The
default pickling of an exception calls its class with the message alone, which failed for
the errors whose constructors take other arguments (`InvalidTablePropertyError`,
`RegistryError`) and dropped the table, version and file of the others."""

from __future__ import annotations

import inspect
import pickle

import delta_ops.errors as errors

#: Constructors that do not take (message, *, table, version, file).
SPECIAL = {
    errors.InvalidTablePropertyError: lambda cls: cls(
        "delta.checkpointInterval", "-3", "must be positive", table="t", version=4),
    errors.RegistryError: lambda cls: cls(["tables[0]: no uri"], file="tables.yaml"),
}


def _every_error() -> list[type]:
    return [c for _n, c in inspect.getmembers(errors, inspect.isclass)
            if issubclass(c, errors.DeltaOpsError)]


def _instance(cls: type) -> errors.DeltaOpsError:
    for special, make in SPECIAL.items():
        if issubclass(cls, special):
            return make(cls)
    return cls("it broke", table="s3://lake/t", version=7, file="_delta_log/7.json")


def test_every_error_survives_pickling_with_what_it_names():
    classes = _every_error()
    assert len(classes) > 20
    for cls in classes:
        error = _instance(cls)
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is cls
        assert str(back) == str(error)
        assert back.__dict__ == error.__dict__, cls
        assert (back.table, back.version, back.file) == (error.table, error.version, error.file)


def test_the_invalid_property_error_keeps_its_key_and_value():
    error = errors.InvalidTablePropertyError("delta.logRetentionDuration", "forever",
                                             "not an interval", table="t")
    back = pickle.loads(pickle.dumps(error))
    assert (back.key, back.value, back.table) == ("delta.logRetentionDuration", "forever", "t")
    assert "delta.logRetentionDuration='forever' is invalid: not an interval" in str(back)
