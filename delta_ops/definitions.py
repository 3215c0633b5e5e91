"""The Dagster code location (`dagster dev -w workspace.yaml`): built from the table
registry, `$DELTA_OPS_REGISTRY` or `tables.yaml` beside `workspace.yaml`."""

from dagster import Definitions

from delta_ops.defs import definitions_kwargs

defs = Definitions(**definitions_kwargs())
