"""The `dg` defs folder of the delta_ops code location (`[tool.dg.project] defs_module`).

`tables/defs.yaml` configures the `DeltaMaintenanceComponent` (`delta_ops.defs.component`):
the registry file (`$DELTA_OPS_REGISTRY`, else `tables.yaml` at the project root), tables
listed in the YAML, and prefixes to discover tables under. `delta_ops.definitions` loads this
folder with `dagster.load_from_defs_folder`; `dg check defs` and `dg list defs` read it too.
"""
