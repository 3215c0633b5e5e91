"""The Dagster code location (`dagster dev -w workspace.yaml`, `dg dev`): the `dg` defs folder
`delta_ops/location`, whose `DeltaMaintenanceComponent` reads the table registry
(`$DELTA_OPS_REGISTRY` or `tables.yaml` at the project root), listed and discovered tables."""

from pathlib import Path

from dagster import load_from_defs_folder

defs = load_from_defs_folder(path_within_project=Path(__file__).resolve().parent)
