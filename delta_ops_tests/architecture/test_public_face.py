"""The public face (`delta_ops/__init__.py`): the README's library example runs as written,
every exported name resolves, `import delta_ops` stays light, each maintenance verb of
`DeltaTable` is its operation (same keyword arguments, defaults and Result), destructive
operations are dry runs unless told otherwise, and a retention has one type and one limit
in the library and on the command line.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import delta_ops
from delta_ops.cli import main as cli_main
from delta_ops_tests.support.corpus import REPO_ROOT

REPO = REPO_ROOT
README = REPO / "README.md"
#: A small table with data files, 14 commits and a checkpoint at 10; it takes every verb.
TABLE = "golden__basic-with-inserts-deletes-checkpoint"
#: Later than every file of the corpus by far: everything unreferenced is old enough.
FAR_FUTURE = 4_000_000_000_000
HOUR_MS = 3_600_000


def _library_example() -> str:
    """The Python blocks of the README's "The library" section, joined."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## The library\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the README's library section has no Python example"
    return "\n".join(blocks)


def test_readme_library_example_imports_only_from_delta_ops():
    tree = ast.parse(_library_example())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in modules if m and m.split(".")[0] == "delta_ops"}
    assert ours == {"delta_ops"}
    assert modules - ours <= {"datetime"}


def test_readme_library_example_runs_on_a_copy_of_a_corpus_table(
    table_copy, tmp_path, monkeypatch, capsys
):
    work = tmp_path / "work"
    shutil.copytree(table_copy(TABLE), work / "path" / "to" / "table")
    monkeypatch.chdir(work)
    namespace: dict = {}
    exec(compile(_library_example(), str(README), "exec"), namespace)
    table = namespace["table"]
    assert isinstance(table, delta_ops.DeltaTable)
    # The verbs did their work: version 13 (the latest when the example began) was
    # checkpointed and got a checksum that verifies, and row tracking was enabled after it.
    log = work / "path" / "to" / "table" / "_delta_log"
    assert (log / "00000000000000000013.checkpoint.parquet").exists()
    verified = table.verify_checksum(all_versions=True)
    assert verified.ok and 13 in verified.versions
    after = table.snapshot()
    assert after.version > 13
    assert after.metadata.configuration.get("delta.enableRowTracking") == "true"
    assert "refusing to VACUUM with a retention of 1 hours" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# The exported names
# --------------------------------------------------------------------------------------


def test_every_name_in_all_resolves_and_is_listed_by_dir():
    assert len(set(delta_ops.__all__)) == len(delta_ops.__all__)
    for name in delta_ops.__all__:
        assert getattr(delta_ops, name) is not None, name
    assert set(delta_ops.__all__) <= set(dir(delta_ops))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        delta_ops.no_such_name  # noqa: B018


def test_no_package_exports_a_name_one_of_its_modules_has():
    """`from package import name` gives the module when a submodule of that name exists (its
    import sets the package attribute), whatever a lazy face would have returned."""
    import importlib
    import pkgutil

    shadowed = []
    for info in pkgutil.walk_packages(delta_ops.__path__, "delta_ops."):
        if info.ispkg and ".spark" not in info.name:
            package = importlib.import_module(info.name)
            modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
            shadowed += [f"{info.name}.{n}" for n in getattr(package, "__all__", ())
                         if n in modules]
    top = {m.name for m in pkgutil.iter_modules(delta_ops.__path__)}
    shadowed += [f"delta_ops.{n}" for n in delta_ops.__all__ if n in top]
    assert shadowed == []
    from delta_ops.layout import OptimizeResult

    assert not inspect.ismodule(OptimizeResult) and callable(delta_ops.optimize)


def test_the_face_exports_the_table_the_operations_results_and_every_error():
    from delta_ops import errors

    names = set(delta_ops.__all__)
    assert {"DeltaTable", "TableLike", "Retention", "MAX_RETENTION"} <= names
    assert {"write_checkpoint", "cleanup_metadata", "vacuum", "write_checksum",
            "verify_checksum", "compact_log", "backfill_row_tracking", "what_is_due"} <= names
    assert {"CheckpointResult", "CleanupResult", "VacuumResult", "ChecksumWriteResult",
            "VerifyResult", "CompactionResult", "BackfillResult", "DueReport"} <= names
    tree = {n for n, v in vars(errors).items()
            if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == errors.__name__}
    assert "DeltaOpsError" in tree and tree <= names
    for name in tree:
        assert issubclass(getattr(delta_ops, name), delta_ops.DeltaOpsError)
    assert delta_ops.vacuum is __import__("delta_ops.maintenance.vacuum", fromlist=["x"]).vacuum


def test_import_delta_ops_loads_no_pyarrow_and_no_operation():
    code = (
        "import sys, json, delta_ops\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "    if m.split('.')[0] in ('delta_ops', 'pyarrow', 'numpy', 'pyspark', 'dagster'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO, env=env).stdout
    assert json.loads(out) == ["delta_ops", "delta_ops.errors"]


# --------------------------------------------------------------------------------------
# The verbs of DeltaTable
# --------------------------------------------------------------------------------------

#: verb -> (module, function) it is a thin method over.
VERBS = {
    "checkpoint": ("delta_ops.maintenance.checkpoint", "write_checkpoint"),
    "cleanup_metadata": ("delta_ops.maintenance.cleanup", "cleanup_metadata"),
    "vacuum": ("delta_ops.maintenance.vacuum", "vacuum"),
    "write_checksum": ("delta_ops.maintenance.checksum", "write_checksum"),
    "verify_checksum": ("delta_ops.maintenance.checksum", "verify_checksum"),
    "compact_log": ("delta_ops.maintenance.compaction", "compact_log"),
    "backfill_row_tracking": ("delta_ops.maintenance.row_tracking", "backfill_row_tracking"),
    "due": ("delta_ops.maintenance.due", "what_is_due"),
    "compute_stats": ("delta_ops.layout.stats", "compute_stats"),
}


def _function(verb: str):
    module, name = VERBS[verb]
    return getattr(__import__(module, fromlist=[name]), name)


def _shape(params) -> list[tuple]:
    return [(p.name, p.kind, p.default, p.annotation) for p in params]


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_each_verb_takes_the_keyword_arguments_of_its_operation(verb):
    """Same names, kinds, defaults and annotations; a DeltaTable brings its own storage, so
    only `storage_options` (for a URI) is not a verb's argument."""
    method = list(inspect.signature(getattr(delta_ops.DeltaTable, verb)).parameters.values())
    function = list(inspect.signature(_function(verb)).parameters.values())
    assert method[0].name == "self"
    assert function[0].annotation == "TableLike"
    assert _shape(method[1:]) == _shape(p for p in function[1:] if p.name != "storage_options")


def _copies(table_copy, tmp_path):
    """The same table twice, as `a/t` and `b/t`."""
    source = table_copy(TABLE)
    return [shutil.copytree(source, tmp_path / side / "t") for side in ("a", "b")]


def _same(verb_result, function_result, verb_root: Path, function_root: Path) -> None:
    got = json.dumps(verb_result.to_dict(), sort_keys=True, default=str)
    want = json.dumps(function_result.to_dict(), sort_keys=True, default=str)
    assert got.replace(verb_root.as_posix(), "<root>") == want.replace(
        function_root.as_posix(), "<root>")
    assert type(verb_result) is type(function_result)


CALLS = [
    ("checkpoint", {"now_ms": FAR_FUTURE}),
    ("write_checksum", {}),
    ("verify_checksum", {"all_versions": True}),
    ("compact_log", {"start": 11, "end": 13}),
    ("backfill_row_tracking", {"clock": lambda: FAR_FUTURE, "confirm_protocol_upgrade": True}),
    ("vacuum", {"now_ms": FAR_FUTURE, "retention_hours": 168}),
    ("vacuum", {"now_ms": FAR_FUTURE, "dry_run": False}),
    ("cleanup_metadata", {"now_ms": FAR_FUTURE}),
    ("cleanup_metadata", {"now_ms": FAR_FUTURE, "dry_run": False}),
    ("compute_stats", {"dry_run": False, "recompute_all": True}),
]


@pytest.mark.parametrize(("verb", "kwargs"), CALLS, ids=[f"{v}-{i}" for i, (v, _) in
                                                        enumerate(CALLS)])
def test_each_verb_gives_the_result_of_its_operation(table_copy, tmp_path, verb, kwargs):
    on_verb, on_function = _copies(table_copy, tmp_path)
    if verb == "verify_checksum":  # something to verify (none is an error)
        for root in (on_verb, on_function):
            delta_ops.write_checksum(str(root))
    got = getattr(delta_ops.DeltaTable(str(on_verb)), verb)(**kwargs)
    want = _function(verb)(str(on_function), **kwargs)
    _same(got, want, on_verb, on_function)
    assert sorted(p.relative_to(on_verb).as_posix() for p in on_verb.rglob("*")) == sorted(
        p.relative_to(on_function).as_posix() for p in on_function.rglob("*"))


def test_due_on_the_table_is_what_is_due(table_copy):
    root = table_copy(TABLE)
    table = delta_ops.DeltaTable(str(root))
    assert table.due() == delta_ops.what_is_due(str(root))
    policy = delta_ops.DuePolicy(checksums=False)
    assert table.due(policy) == delta_ops.what_is_due(table, policy)


# --------------------------------------------------------------------------------------
# Destructive operations are dry runs by default
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vacuum", "cleanup_metadata"])
def test_destructive_operations_default_to_a_dry_run(name):
    assert inspect.signature(getattr(delta_ops, name)).parameters["dry_run"].default is True
    assert inspect.signature(
        getattr(delta_ops.DeltaTable, name)).parameters["dry_run"].default is True


def test_a_default_vacuum_and_cleanup_delete_nothing(table_copy):
    root = table_copy(TABLE)
    before = sorted(p.as_posix() for p in root.rglob("*"))
    (root / "orphan.parquet").write_bytes(b"x")
    os.utime(root / "orphan.parquet", (0, 0))
    vacuumed = delta_ops.vacuum(str(root), now_ms=FAR_FUTURE)
    cleaned = delta_ops.DeltaTable(str(root)).cleanup_metadata(now_ms=FAR_FUTURE)
    assert vacuumed.dry_run and "orphan.parquet" in vacuumed.files
    assert cleaned.dry_run and cleaned.files
    (root / "orphan.parquet").unlink()
    assert sorted(p.as_posix() for p in root.rglob("*")) == before


# --------------------------------------------------------------------------------------
# One retention: a timedelta, one limit, in the library and on the command line
# --------------------------------------------------------------------------------------


def test_one_limit_for_every_retention(table_copy, capsys):
    root = str(table_copy(TABLE))
    too_long = delta_ops.MAX_RETENTION + timedelta(hours=1)
    hours = too_long.total_seconds() / 3600
    for call in (
        lambda: delta_ops.vacuum(root, retention=too_long, force_retention=True),
        lambda: delta_ops.vacuum(root, retention_hours=hours, force_retention=True),
        lambda: delta_ops.cleanup_metadata(root, retention=too_long),
    ):
        with pytest.raises(delta_ops.RetentionError, match="longer than 1,000,000 hours"):
            call()
    for argv in (["vacuum", root, "--retention-hours", f"{hours:.0f}"],
                 ["cleanup", root, "--retention", f"{hours:.0f} hours"]):
        with pytest.raises(SystemExit) as exit_:
            cli_main(argv)
        assert exit_.value.code == 2
        assert "longer than 1,000,000 hours" in capsys.readouterr().err
    # The limit itself is a retention.
    at_limit = delta_ops.vacuum(root, retention=delta_ops.MAX_RETENTION, now_ms=FAR_FUTURE,
                                force_retention=True)
    assert at_limit.retention_hours == 1_000_000


def test_vacuum_retention_as_timedelta_or_hours_is_the_same(table_copy):
    root = str(table_copy(TABLE))
    by_delta = delta_ops.vacuum(root, retention=timedelta(days=8), now_ms=FAR_FUTURE)
    by_hours = delta_ops.vacuum(root, retention_hours=192, now_ms=FAR_FUTURE)
    assert dataclasses.asdict(by_delta) == dataclasses.asdict(by_hours)
    with pytest.raises(ValueError, match="not both"):
        delta_ops.vacuum(root, retention=timedelta(days=8), retention_hours=192)
    with pytest.raises(delta_ops.RetentionError, match="cannot be negative"):
        delta_ops.cleanup_metadata(root, retention=timedelta(hours=-1))
    with pytest.raises(delta_ops.RetentionError, match="must be a datetime.timedelta"):
        delta_ops.cleanup_metadata(root, retention=24)


def test_a_pathlib_path_names_a_table_wherever_a_uri_does(table_copy):
    # DeltaTable(Path(...)) was a StorageError and delta_ops.vacuum(Path(...)) a TypeError.
    root = table_copy("golden__checkpoint")
    assert isinstance(root, Path)
    by_path, by_text = delta_ops.DeltaTable(root), delta_ops.DeltaTable(str(root))
    assert by_path.uri == by_text.uri
    assert by_path.snapshot().version == by_text.snapshot().version
    assert delta_ops.vacuum(root).to_dict() == delta_ops.vacuum(str(root)).to_dict()
    assert delta_ops.history(root).latest_version == by_text.snapshot().version
