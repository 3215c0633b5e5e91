"""delta_ops as a library: the built wheel, installed the way a user installs it.

The wheel is built once per session from a copy of the checkout's sources
(`pip wheel --no-deps`) and installed into fresh virtual environments in a temporary
folder (packages come from PyPI, through pip's cache):

- the core alone (pyarrow, fsspec, pyroaring, orjson, numpy): the `delta-ops` CLI reads a
  table; Spark, S3 and the Dagster layer each say in one line which extra they need;
- `delta_ops[dagster]` in a new `dg` project made by `create-dagster`: `dg scaffold defs`
  adds the component, `dg check defs` loads it, `dg launch` maintains a table.

These are the steps docs/dagster.md gives a user starting from an empty machine.
Protocol sections: "Version Checksum File" (the checksum the launched run writes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from importlib.metadata import version
from pathlib import Path

import pytest

from delta_ops_tests.support.corpus import REPO_ROOT, copy_corpus_table

pytestmark = pytest.mark.slow

#: Files of the checkout a wheel is built from.
SOURCES = ("pyproject.toml", "setup.cfg", "README.md", "LICENSE")
COMPONENT = "delta_ops.defs.component.DeltaMaintenanceComponent"
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")


def _run(argv: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env or _env(), text=True,
                          capture_output=True, timeout=timeout)


def _ok(argv: list[str | Path], **kwargs) -> subprocess.CompletedProcess[str]:
    done = _run(argv, **kwargs)
    assert done.returncode == 0, (argv, done.stdout[-3000:], done.stderr[-3000:])
    return done


def _json(stdout: str, opener: str):
    """The first JSON value in `stdout` that starts with `opener` (dg may print a notice
    before or after it)."""
    value, _ = json.JSONDecoder().raw_decode(stdout[stdout.index(opener):])
    return value


def _env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment without this checkout on the import path (an installed wheel is
    what runs), with `bin_dir` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if bin_dir is not None:
        env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
        env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The delta_ops wheel, built from a copy of the checkout's sources."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "delta_ops", src / "delta_ops",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    _ok([sys.executable, *PIP, "wheel", "--no-deps", "-q", "-w", out, src], cwd=src)
    (built,) = out.glob("delta_ops-*.whl")
    return built


def _new_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin"


@pytest.fixture(scope="session")
def core_venv(wheel, tmp_path_factory) -> Path:
    """A virtual environment holding delta_ops with its core dependencies only."""
    bin_dir = _new_venv(tmp_path_factory.mktemp("core") / "venv")
    _ok([bin_dir / "python", *PIP, "install", "-q", wheel], cwd=wheel.parent,
        env=_env(bin_dir))
    return bin_dir


@pytest.fixture(scope="session")
def dagster_venv(wheel, tmp_path_factory) -> Path:
    """A virtual environment with `delta_ops[dagster]` from the wheel, and `create-dagster`
    and `dg` of the Dagster version the test environment runs."""
    bin_dir = _new_venv(tmp_path_factory.mktemp("dg") / "venv")
    dagster = version("dagster")
    _ok([bin_dir / "python", *PIP, "install", "-q", f"delta_ops[dagster] @ {wheel.as_uri()}",
         f"dagster=={dagster}", f"dagster-dg-cli=={dagster}", f"create-dagster=={dagster}"],
        cwd=wheel.parent, env=_env(bin_dir))
    return bin_dir


def test_the_wheel_holds_the_package_its_license_and_the_extras(wheel):
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "delta_ops/cli.py" in names and "delta_ops/location/tables/defs.yaml" in names
    assert not [n for n in names if n.startswith(("delta_ops_tests/", "benchmarks/"))]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in meta
    requires = sorted(line.split(": ", 1)[1] for line in meta.splitlines()
                      if line.startswith("Requires-Dist: ") and "extra ==" not in line)
    assert [r.split(">")[0].split("=")[0] for r in requires] == [
        "fsspec", "numpy", "orjson", "pyarrow", "pyroaring"]
    for extra in ("spark", "dagster", "s3", "all", "test"):
        assert f"Provides-Extra: {extra}" in meta
    assert "[dagster_dg_cli.registry_modules]\ndelta_ops = delta_ops.defs.component" in (
        entry_points)


def test_the_cli_runs_with_the_core_alone(core_venv, tmp_path):
    python = core_venv / "python"
    env = _env(core_venv)
    table = copy_corpus_table("basic_partitioned", tmp_path / "events")
    absent = _ok([python, "-c",
                  "import importlib.util as u, json; print(json.dumps([m for m in "
                  "('pyspark', 'dagster', 'pandas', 's3fs', 'pydantic', 'yaml') "
                  "if u.find_spec(m) is not None]))"], cwd=tmp_path, env=env)
    assert json.loads(absent.stdout) == []
    imported = _ok([python, "-c",
                    "import sys, delta_ops, delta_ops.cli, delta_ops.table, delta_ops.engine; "
                    "print(delta_ops.__file__); "
                    "print(sorted(m for m in ('pyspark', 'dagster') if m in sys.modules))"],
                   cwd=tmp_path, env=env)
    where, loaded = imported.stdout.splitlines()
    assert Path(where).is_relative_to(core_venv.parent)  # the installed wheel, not the checkout
    assert loaded == "[]"

    assert "usage: delta-ops" in _ok([core_venv / "delta-ops", "--help"], cwd=tmp_path,
                                     env=env).stdout
    snap = json.loads(_ok([core_venv / "delta-ops", "snapshot", table, "--json"],
                          cwd=tmp_path, env=env).stdout)
    assert (snap["version"], snap["num_files"]) == (1, 6)
    _ok([core_venv / "delta-ops", "crc", "write", table], cwd=tmp_path, env=env)
    _ok([core_venv / "delta-ops", "crc", "verify", table], cwd=tmp_path, env=env)

    # What needs an extra says which, in one line.
    spark = _run([core_venv / "delta-ops", "vacuum", table, "--dry-run", "--engine", "spark"],
                 cwd=tmp_path, env=env)
    assert spark.returncode == 1
    assert spark.stderr.strip().splitlines() == [
        "delta-ops vacuum: the spark engine (Spark master local[*]) needs pyspark: "
        "pip install 'delta_ops[spark]'"]
    s3 = _run([core_venv / "delta-ops", "snapshot", "s3://bucket/table"], cwd=tmp_path,
              env=env)
    assert s3.returncode == 1
    assert s3.stderr.strip().splitlines() == [
        "delta-ops snapshot: s3fs is needed to reach 's3://bucket/table': "
        "pip install 'delta_ops[s3]'"]
    defs = _run([python, "-c", "import delta_ops.defs"], cwd=tmp_path, env=env)
    assert defs.returncode == 1
    assert defs.stderr.strip().splitlines()[-1] == (
        "ImportError: delta_ops.defs (the Dagster layer) needs dagster: "
        "pip install 'delta_ops[dagster]'")


def test_a_new_dg_project_adds_the_component_from_the_wheel(dagster_venv, wheel, tmp_path):
    """docs/dagster.md's steps: create the project, add delta_ops[dagster], scaffold the
    component, point it at a table, check the definitions and run."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = _env(dagster_venv, DAGSTER_HOME=str(home))
    _ok(["create-dagster", "project", "my-lake", "--no-uv-sync"], cwd=tmp_path, env=env)
    project = tmp_path / "my-lake"
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    deps = text.index("dependencies = [") + len("dependencies = [")
    pyproject.write_text(text[:deps] + '\n    "delta_ops[dagster]",' + text[deps:])
    _ok(["python", *PIP, "install", "-q", "--find-links", wheel.parent, "-e", "."],
        cwd=project, env=env)

    components = _ok(["dg", "list", "components", "--json"], cwd=project, env=env)
    assert COMPONENT in {c["key"] for c in _json(components.stdout, "[")}
    table = copy_corpus_table("basic_partitioned", project / "lake" / "events")
    _ok(["dg", "scaffold", "defs", COMPONENT, "tables",
         "--json-params", json.dumps({"name": "events", "uri": "lake/events"})],
        cwd=project, env=env)
    defs_yaml = project / "src" / "my_lake" / "defs" / "tables" / "defs.yaml"
    assert f"type: {COMPONENT}" in defs_yaml.read_text()
    assert "uri: lake/events" in defs_yaml.read_text()

    check = _ok(["dg", "check", "defs"], cwd=project, env=env)
    assert "All definitions loaded successfully" in check.stdout + check.stderr
    listed = _ok(["dg", "list", "defs", "--json"], cwd=project, env=env)
    keys = {a["asset_key"] for a in _json(listed.stdout, "{")["assets"]}
    assert {"events/delta_log", "events/checkpoint", "events/version_checksum",
            "events/vacuum"} <= keys

    assert not (table / "_delta_log" / "00000000000000000001.crc").exists()
    _ok(["dg", "launch", "--assets", "events/delta_log,events/version_checksum"],
        cwd=project, env=env)
    # The run wrote the latest version's checksum; this checkout's verifier agrees.
    from delta_ops.maintenance.checksum import verify_checksum

    assert (table / "_delta_log" / "00000000000000000001.crc").is_file()
    assert verify_checksum(str(table), version=1).ok
