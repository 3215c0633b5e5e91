"""Empty `dg` projects for the tests that load a `DeltaMaintenanceComponent` the way a user's
project does (`test_dagster_component`, `test_dagster_e2e`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

COMPONENT_TYPE = "delta_ops.defs.component.DeltaMaintenanceComponent"


def new_project(root: Path, name: str, location: str | None = None) -> Path:
    """An empty dg project `name` at `root` (pyproject, package, defs folder, definitions);
    `location`: its code location name (default: dg's, the name of `root`)."""
    (root / name / "defs").mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "defs" / "__init__.py").write_text("")
    (root / name / "definitions.py").write_text(textwrap.dedent("""
        from pathlib import Path

        from dagster import load_from_defs_folder

        defs = load_from_defs_folder(path_within_project=Path(__file__).parent)
    """))
    (root / "pyproject.toml").write_text(textwrap.dedent(f"""
        [project]
        name = "{name}"
        version = "0.0.1"

        [tool.dg]
        directory_type = "project"

        [tool.dg.project]
        root_module = "{name}"
        registry_modules = ["delta_ops.defs.component"]
    """))
    if location is not None:
        with open(root / "pyproject.toml", "a") as fh:
            fh.write(f'code_location_name = "{location}"\n')
    return root


def write_component(project: Path, name: str, attributes: dict) -> Path:
    """The project's `defs/tables/defs.yaml`: one DeltaMaintenanceComponent."""
    folder = project / name / "defs" / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "defs.yaml"
    path.write_text(yaml.safe_dump({"type": COMPONENT_TYPE, "attributes": attributes},
                                   sort_keys=False))
    return path


__all__ = ["COMPONENT_TYPE", "new_project", "write_component"]
