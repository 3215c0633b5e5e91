"""The typed fields of `DeltaMaintenanceComponent` that `dg` validates and documents.

Each field's model is the *shape* of a registry model (`shape_model`): the same keys, types,
defaults and descriptions, derived from it so they cannot drift, without its checks of the
values (crons, retentions, names, URIs, secrets, bounds). `dg check defs` refuses an unknown
key or a value of the wrong type, pointing at the line of `defs.yaml`; the registry's models
then check the values as they do in a registry file (`RegistrySource`). That split keeps
what a table entry promises: an entry whose values are wrong (a cron that is not one, a
retention without a unit, a name that is not a valid asset key, a name given twice, a
literal secret) fails only that table's assets, naming the problem, while the other tables
load (`delta_ops.defs.sources.assemble_registry`).

- `PolicyOverrideModel` (`defaults:`): `delta_ops.defs.policy.PolicyOverride`;
- `SparkSettingsModel` (`spark:`): `delta_ops.defs.registry.SparkSettings`;
- `TableEntryModel` (`tables:`): `delta_ops.defs.registry.TableEntry`;
- `DiscoverySpecModel` (`discover:`): `delta_ops.defs.sources.DiscoverySpec`.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from dagster import Model
from pydantic import BaseModel, Field, create_model

from delta_ops.defs.policy import PolicyOverride
from delta_ops.defs.registry import SparkSettings, TableEntry
from delta_ops.defs.sources import DiscoverySpec

#: Plain JSON defaults a shape keeps as they are (a model instance becomes null).
_PLAIN = (type(None), bool, int, float, str)


def _shape_annotation(annotation: Any) -> Any:
    """`annotation` with every pydantic model in it replaced by its shape."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return shape_model(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is None or origin is Literal or not args:
        return annotation
    shaped = tuple(_shape_annotation(a) for a in args)
    if origin in (Union, types.UnionType):
        return Union[shaped]  # noqa: UP007 - built from a tuple
    if origin is typing.Annotated:
        return shaped[0]
    return origin[shaped if len(shaped) > 1 else shaped[0]]


@functools.cache
def shape_model(model: type[BaseModel]) -> type[Model]:
    """A `dagster.Model` with `model`'s fields (names, types, defaults, descriptions; nested
    models shaped too) and none of its validators or numeric bounds."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = _shape_annotation(info.annotation)
        if info.is_required():
            fields[name] = (annotation, Field(description=info.description))
        elif info.default_factory is not None:
            fields[name] = (annotation, Field(default_factory=info.default_factory,
                                              description=info.description))
        elif isinstance(info.default, _PLAIN):
            fields[name] = (annotation, Field(default=info.default,
                                              description=info.description))
        else:
            fields[name] = (annotation | None, Field(default=None,
                                                     description=info.description))
    return create_model(
        f"{model.__name__}Model", __base__=Model, __doc__=model.__doc__,
        __module__=__name__, **fields,
    )


#: The component's `defaults:`: policy overrides over the registry file's defaults.
PolicyOverrideModel = shape_model(PolicyOverride)
#: The component's `spark:`: where the spark engine runs.
SparkSettingsModel = shape_model(SparkSettings)
#: A table listed in `defs.yaml` (`tables:`): the keys of a registry file's table entry.
TableEntryModel = shape_model(TableEntry)
#: A prefix tables are discovered under (`discover:`).
DiscoverySpecModel = shape_model(DiscoverySpec)


def given(value: BaseModel | None) -> dict[str, Any] | None:
    """A field's value as written (only the keys given, nested too), for the registry's
    models to validate."""
    return None if value is None else value.model_dump(exclude_unset=True)


__all__ = [
    "DiscoverySpecModel",
    "PolicyOverrideModel",
    "SparkSettingsModel",
    "TableEntryModel",
    "given",
    "shape_model",
]
