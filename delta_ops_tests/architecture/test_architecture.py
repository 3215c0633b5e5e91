"""The shape ARCHITECTURE.md asks for, checked: no import cycles, every module imports on its
own, the engine layer knows nothing of argparse, modules stay under 600 lines, exceptions
live in `delta_ops/errors.py`, and the test corpus is complete inside the repository."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from delta_ops_tests.support.corpus import CORPUS_ENV, IN_REPO_CORPUS, REPO_ROOT, corpus_root

PACKAGE = REPO_ROOT / "delta_ops"
MAX_LINES = 600
#: Import cycles through imports deferred into functions: none may be added.
KNOWN_DEFERRED_CYCLES: list[set[str]] = []
#: Exception classes that are private signals inside one module, never raised to a caller.
EXCEPTIONS_OUTSIDE_ERRORS = {
    ("delta_ops/engine/spark/tasks.py", "_TaskError"),  # a task's error in transit
    ("delta_ops/log/replay/columnar_commits.py", "_StepAside"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, name: str, modules: dict[str, Path], *, deferred: bool) -> set[str]:
    """delta_ops modules `path` imports: at module level (not under TYPE_CHECKING), and with
    `deferred` also inside functions and classes."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(module: str) -> str | None:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        return module or None

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.Import):
                found.update(filter(None, (resolve(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    target = resolve(f"{base}.{alias.name}") if base else None
                    if target != f"{base}.{alias.name}":
                        target = resolve(base)
                    if target:
                        found.add(target)
            elif deferred and isinstance(
                node,
                ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.With | ast.For,
            ):
                visit(node.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def _graph(*, deferred: bool) -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        # A module's own packages load before it: not an edge of a cycle.
        graph[name] = {
            m for m in _imports(path, name, modules, deferred=deferred)
            if not name.startswith(m + ".")
        }
    return graph


def test_no_import_cycles_at_module_level():
    assert _cycles(_graph(deferred=False)) == []


def test_no_import_cycles_through_deferred_imports_but_the_known_ones():
    cycles = _cycles(_graph(deferred=True))
    assert [c for c in cycles if c not in KNOWN_DEFERRED_CYCLES] == []


def test_the_import_graph_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_imports_first_on_its_own_without_pyspark():
    """Each module imported first in a process (the others unloaded): an import cycle that
    only bites in some order fails here. pyspark stays unimported throughout."""
    code = (
        "import importlib, sys\n"
        f"names = {sorted(_modules())!r}\n"
        "failed = []\n"
        "for name in ['delta_ops', *names]:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'delta_ops']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as exc:\n"
        "        failed.append((name, repr(exc)))\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "print(repr((failed, heavy)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=REPO_ROOT, env=env,
    )
    failed, heavy = eval(out.stdout.strip().splitlines()[-1])
    assert failed == []
    assert heavy == []


def test_the_engine_layer_does_not_import_argparse():
    modules = _modules()
    for name, path in modules.items():
        if not name.startswith("delta_ops.engine"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert "argparse" not in imported, name


def test_no_module_is_over_600_lines():
    over = {
        path.relative_to(REPO_ROOT).as_posix(): n
        for path in _modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert over == {}


def test_exception_classes_live_in_errors():
    outside = set()
    for path in _modules().values():
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel == "delta_ops/errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(b).split(".")[-1].endswith(("Error", "Exception"))
                for b in node.bases
            ):
                outside.add((rel, node.name))
    assert outside - EXCEPTIONS_OUTSIDE_ERRORS == set()


def test_moved_exceptions_keep_their_old_import_paths():
    from delta_ops import errors
    from delta_ops.maintenance.checkpoint import plan
    from delta_ops.maintenance.checksum import IncrementalChecksumUnavailableError
    from delta_ops.protocol.crc import InvalidChecksumError
    from delta_ops.protocol.properties import InvalidTablePropertyError
    from delta_ops.protocol.schema import UnsupportedTypeError
    from delta_ops.protocol.variant import InvalidVariantError

    assert IncrementalChecksumUnavailableError is errors.IncrementalChecksumUnavailableError
    assert InvalidChecksumError is errors.InvalidChecksumError
    assert InvalidTablePropertyError is errors.InvalidTablePropertyError
    assert UnsupportedTypeError is errors.UnsupportedTypeError
    assert InvalidVariantError is errors.InvalidVariantError
    assert plan.CheckpointError is errors.CheckpointError
    assert plan.InvalidCheckpointRequestError is errors.InvalidCheckpointRequestError
    assert plan.CheckpointVerificationError is errors.CheckpointVerificationError


# ---- the corpus resolver ---------------------------------------------------------------------


def test_the_tests_find_the_corpus_without_importing_the_demo():
    code = (
        "import sys\n"
        "import delta_ops_tests.conftest as c\n"
        "print(repr(('delta_ops.demo' in sys.modules, str(c.CORPUS))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=REPO_ROOT, env=env,
    )
    demo_loaded, corpus = eval(out.stdout.strip().splitlines()[-1])
    assert demo_loaded is False
    assert (Path(corpus) / "delta").is_dir()


def _corpus_index(readme: Path) -> list[str]:
    """The table roots `corpus/README.md` lists (its table's first column)."""
    rows = [line for line in readme.read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")]
    return [row.split("`")[1] for row in rows]


def test_the_in_repo_corpus_is_complete():
    """The corpus is test data inside the repository: every table its README indexes is
    there, every table there is indexed, and every file matches `corpus.sha256` (nothing
    dropped by .gitignore or changed by a checkout's line-ending conversion)."""
    import hashlib

    assert IN_REPO_CORPUS == REPO_ROOT / "delta_ops_tests" / "data" / "corpus"
    index = _corpus_index(IN_REPO_CORPUS / "README.md")
    assert len(index) == 160
    # `golden__x`, `kernel-benchmarks__x/delta` live under delta/; DAT's `x/delta` under dat/.
    roots = [IN_REPO_CORPUS / ("delta" if (IN_REPO_CORPUS / "delta" / name).is_dir() else "dat")
             / name for name in index]
    missing = [str(r) for r in roots if not (r / "_delta_log").is_dir()]
    assert missing == []
    on_disk = {p.parent.relative_to(IN_REPO_CORPUS) for p in IN_REPO_CORPUS.rglob("_delta_log")}
    assert on_disk == {r.relative_to(IN_REPO_CORPUS) for r in roots}
    expected = {}
    for line in (IN_REPO_CORPUS.parent / "corpus.sha256").read_text().splitlines():
        digest, name = line.split("  ", 1)
        expected[name] = digest
    actual = {p.relative_to(IN_REPO_CORPUS).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
              for p in IN_REPO_CORPUS.rglob("*") if p.is_file()}
    assert len(expected) == 2361
    assert actual == expected
    assert not [p for p in IN_REPO_CORPUS.rglob("*") if p.is_symlink()]


def test_the_tests_default_to_the_in_repo_corpus_and_the_environment_wins(tmp_path,
                                                                          monkeypatch):
    monkeypatch.delenv(CORPUS_ENV, raising=False)
    assert corpus_root() == IN_REPO_CORPUS
    monkeypatch.setenv(CORPUS_ENV, str(tmp_path / "held-out"))
    assert corpus_root() == tmp_path / "held-out"


def test_the_product_does_not_look_for_test_data():
    """No module of delta_ops imports the tests' package or names `../shared` (the demo reads
    the checkout's test data by path)."""
    offenders = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import)
                        else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m.split(".")[0] == "delta_ops_tests" for m in imported):
                offenders.append(name)
            if isinstance(node, ast.Constant) and "shared" in str(node.value).split("/"):
                offenders.append(name)
    assert offenders == []



# ---- the tests' own shape -------------------------------------------------------------------

TESTS = REPO_ROOT / "delta_ops_tests"
#: No file of the tests is longer: split a longer one by topic.
MAX_TEST_FILE_LINES = 800


def _test_module_imports(root: Path) -> list[str]:
    """`file -> module` for every import, in any module of the tests package at `root`, of a
    test module (`test_*`): shared helpers belong in `support/` or in a conftest fixture."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        package = list(rel.parent.parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package[: len(package) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                if parts[0] == root.name and any(p.startswith("test_") for p in parts[1:]):
                    found.append(f"{rel.as_posix()} -> {target}")
                    break
    return found


def _long_test_files(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root.parent).as_posix()}: {n} lines"
        for path in sorted(root.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_TEST_FILE_LINES
    ]


def _planted_tests_package(tmp_path: Path) -> Path:
    """A copy of the tests' package shape with one of each violation planted."""
    root = tmp_path / "delta_ops_tests"
    for folder in ("", "vacuum", "log", "support"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_text("")
    (root / "log" / "test_replay.py").write_text("HELPER = 1\n")
    (root / "vacuum" / "test_plain.py").write_text("import os\n")
    (root / "vacuum" / "test_from.py").write_text("from delta_ops_tests.log.test_replay import X\n")
    (root / "vacuum" / "test_package.py").write_text(
        "from delta_ops_tests.log import test_replay\n")
    (root / "vacuum" / "test_dotted.py").write_text("import delta_ops_tests.log.test_replay\n")
    (root / "vacuum" / "test_relative.py").write_text("from ..log import test_replay\n")
    (root / "support" / "helpers.py").write_text("from ..log.test_replay import HELPER\n")
    (root / "vacuum" / "test_long.py").write_text("x = 1\n" * (MAX_TEST_FILE_LINES + 1))
    (root / "vacuum" / "test_at_limit.py").write_text("x = 1\n" * MAX_TEST_FILE_LINES)
    return root


def test_no_test_module_imports_another(tmp_path):
    planted = _test_module_imports(_planted_tests_package(tmp_path))
    assert planted == [
        "delta_ops_tests/support/helpers.py -> delta_ops_tests.log.test_replay",
        "delta_ops_tests/vacuum/test_dotted.py -> delta_ops_tests.log.test_replay",
        "delta_ops_tests/vacuum/test_from.py -> delta_ops_tests.log.test_replay",
        "delta_ops_tests/vacuum/test_package.py -> delta_ops_tests.log.test_replay",
        "delta_ops_tests/vacuum/test_relative.py -> delta_ops_tests.log.test_replay",
    ]
    assert _test_module_imports(TESTS) == []


def test_no_test_file_is_over_800_lines(tmp_path):
    planted = _long_test_files(_planted_tests_package(tmp_path))
    assert planted == [f"delta_ops_tests/vacuum/test_long.py: {MAX_TEST_FILE_LINES + 1} lines"]
    assert _long_test_files(TESTS) == []

def test_operations_take_storage_options_and_a_clock_the_same_way():
    import inspect

    from delta_ops.layout.optimize import optimize
    from delta_ops.layout.purge import purge
    from delta_ops.layout.stats import compute_stats
    from delta_ops.maintenance.checkpoint import write_checkpoint
    from delta_ops.maintenance.checksum import (
        compute_checksum,
        verify_checksum,
        write_checksum,
        write_checksums,
    )
    from delta_ops.maintenance.cleanup import cleanup_metadata
    from delta_ops.maintenance.compaction import compact_log
    from delta_ops.maintenance.fsck import fsck
    from delta_ops.maintenance.history import table_history
    from delta_ops.maintenance.restore import restore
    from delta_ops.maintenance.row_tracking import backfill_row_tracking
    from delta_ops.maintenance.vacuum import vacuum

    rewriting = [optimize, purge, compute_stats, restore]
    timed = [vacuum, cleanup_metadata, write_checkpoint, backfill_row_tracking, fsck,
             *rewriting]
    for op in [*timed, compute_checksum, verify_checksum, write_checksum, write_checksums,
               compact_log, table_history]:
        params = inspect.signature(op).parameters
        assert params["storage_options"].kind is inspect.Parameter.KEYWORD_ONLY, op.__name__
        assert params["storage_options"].default is None, op.__name__
    for op in timed:
        clock = inspect.signature(op).parameters["clock"]
        assert clock.kind is inspect.Parameter.KEYWORD_ONLY and clock.default is None, op
    # What rewrites or deletes is a dry run unless the caller says otherwise; fsck repairs
    # only with repair=True and confirm=True.
    for op in [vacuum, cleanup_metadata, *rewriting]:
        assert inspect.signature(op).parameters["dry_run"].default is True, op.__name__
    fsck_params = inspect.signature(fsck).parameters
    assert fsck_params["repair"].default is False and fsck_params["confirm"].default is False


# ---- the log's face and the import directions of ARCHITECTURE.md ---------------------------

#: A room may import only the rooms before it. The one exception: the protocol/metadata light
#: replay reads deltas in the order the replay's line rule gives (`delta_lines_oldest_first`,
#: kept beside the replay's switch for compaction order until that switch leaves the product).
LOG_ROOMS = ("files", "segment", "replay", "snapshot")
KNOWN_ROOM_IMPORTS_UPWARD = {
    ("delta_ops.log.segment.protocol_metadata", "delta_ops.log.replay.full_replay"),
}
#: Where dagster may be imported (the Dagster wing); the demo drives a Dagster instance.
DAGSTER_ALLOWED = ("delta_ops/defs/", "delta_ops/location/", "delta_ops/definitions.py",
                   "delta_ops/demo.py")
PYSPARK_ALLOWED = ("delta_ops/engine/spark/",)
#: Standard modules that do file I/O: `protocol/` imports none of them.
IO_MODULES = {"os", "pathlib", "shutil", "tempfile", "glob", "io", "fsspec", "boto3",
              "botocore", "s3fs", "pyarrow.fs", "pyarrow.parquet", "pyarrow.dataset"}


def _face_names() -> set[str]:
    """The names `delta_ops/log/__init__.py` exports (its `_FACE`), read without importing."""
    tree = ast.parse((PACKAGE / "log" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "_FACE":
            return set(ast.literal_eval(node.value))
    raise AssertionError("delta_ops/log/__init__.py has no _FACE")


def _all_imports(tree: ast.AST) -> list[tuple[str, str | None, int]]:
    """Every import of a module (deferred and TYPE_CHECKING ones included), as
    (module, imported name or None for `import m`, line)."""
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [(node.module, alias.name, node.lineno) for alias in node.names]
    return out


def _face_violations(rel: str, source: str, face: set[str]) -> list[str]:
    """Imports of `log/` from a module outside it that go past the face."""
    if rel.startswith("delta_ops/log/"):
        return []
    out = []
    for module, name, line in _all_imports(ast.parse(source)):
        if module.startswith("delta_ops.log."):
            out.append(f"{rel}:{line} imports {module}")
        elif module == "delta_ops.log" and name is not None and name not in face:
            out.append(f"{rel}:{line} imports {name} from delta_ops.log, not a face name")
    return out


def _docstring_nodes(tree: ast.AST) -> set[int]:
    owners = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, owners) and node.body and isinstance(node.body[0], ast.Expr)
    }


def _log_dir_violations(rel: str, source: str) -> list[str]:
    """A module outside log/ that names `_delta_log` as a path (a string literal that is not
    a docstring and holds no whitespace: prose in messages may say `_delta_log`) or lists the
    log directory (a `list*` call whose arguments name `LOG_DIR` or `_delta_log`).
    `protocol/filenames.py` defines the constant."""
    if rel.startswith("delta_ops/log/") or rel == "delta_ops/protocol/filenames.py":
        return []
    tree = ast.parse(source)
    docs = _docstring_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docs and "_delta_log" in node.value
                and len(node.value.strip().split()) <= 1):
            out.append(f"{rel}:{node.lineno} names {node.value!r}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr.startswith("list")):
            args = " ".join(ast.unparse(a) for a in [*node.args, *node.keywords])
            if "LOG_DIR" in args or "_delta_log" in args:
                out.append(f"{rel}:{node.lineno} lists the log: {ast.unparse(node)}")
    return out


def _direction_violations(rel: str, source: str) -> list[str]:
    """The import directions ARCHITECTURE.md states: no I/O in `protocol/` (no I/O module,
    no storage or engine import, no `open(...)`), dagster only in the Dagster wing, pyspark
    only in `engine/spark/`."""
    tree = ast.parse(source)
    out = []
    for module, name, line in _all_imports(tree):
        top = module.split(".")[0]
        full = {module, f"{module}.{name}" if name else module}
        if (top == "dagster" or top.startswith("dagster_")) and not rel.startswith(
                DAGSTER_ALLOWED):
            out.append(f"{rel}:{line} imports {module}")
        if top in ("pyspark", "py4j") and not rel.startswith(PYSPARK_ALLOWED):
            out.append(f"{rel}:{line} imports {module}")
        if rel.startswith("delta_ops/protocol/") and (
            top in IO_MODULES or full & IO_MODULES
            or module.startswith(("delta_ops.storage", "delta_ops.engine"))
        ):
            out.append(f"{rel}:{line} does I/O: imports {module}")
    if rel.startswith("delta_ops/protocol/"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "open"):
                out.append(f"{rel}:{node.lineno} opens a file")
    return out


def _package_of(module: str) -> str:
    """`delta_ops.maintenance.vacuum.plan` -> `delta_ops.maintenance`; a top-level module is
    its own package."""
    return ".".join(module.split(".")[:2])


def _private_violations(name: str, rel: str, source: str) -> list[str]:
    """Private names (`_x`, not dunders) imported from another package of delta_ops."""
    out = []
    for module, imported, line in _all_imports(ast.parse(source)):
        if not module.startswith("delta_ops.") or imported is None:
            continue
        private = imported.startswith("_") and not imported.startswith("__")
        if private and _package_of(module) != _package_of(name):
            out.append(f"{rel}:{line} imports {imported} from {module}")
    return out


def _room_violations(name: str, rel: str, source: str) -> list[str]:
    """A log room importing a later room (files < segment < replay < snapshot)."""
    parts = name.split(".")
    if len(parts) < 4 or parts[:2] != ["delta_ops", "log"] or parts[2] not in LOG_ROOMS:
        return []
    out = []
    for module, _, line in _all_imports(ast.parse(source)):
        other = module.split(".")
        if (module.startswith("delta_ops.log.") and other[2] in LOG_ROOMS
                and LOG_ROOMS.index(other[2]) > LOG_ROOMS.index(parts[2])
                and (name, module) not in KNOWN_ROOM_IMPORTS_UPWARD):
            out.append(f"{rel}:{line} imports {module}")
    return out


def _environment_violations(rel: str, source: str) -> list[str]:
    """A module of log/ reading the environment: only `ReadOptions.from_env` (in
    `log/read_options.py`) may, and no module of log/ calls it (the edge does)."""
    if not rel.startswith("delta_ops/log/"):
        return []
    out = []
    for node in ast.walk(ast.parse(source)):
        text = ast.unparse(node) if isinstance(node, ast.Attribute | ast.Call) else ""
        if rel != "delta_ops/log/read_options.py" and isinstance(node, ast.Attribute) and (
            text in ("os.environ", "os.getenv", "os.environb")
        ):
            out.append(f"{rel}:{node.lineno} reads the environment: {text}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "from_env"):
            out.append(f"{rel}:{node.lineno} calls {text}")
    return out


def _sources() -> list[tuple[str, str, str]]:
    return [(name, path.relative_to(REPO_ROOT).as_posix(), path.read_text(encoding="utf-8"))
            for name, path in _modules().items()]


def test_code_outside_log_imports_only_its_face():
    face = _face_names()
    assert [v for _, rel, src in _sources() for v in _face_violations(rel, src, face)] == []


def test_the_face_exports_its_names_lazily():
    """`__all__` and `_FACE` agree, every face name resolves, and `import delta_ops.log`
    imports no room (nor pyarrow)."""
    import delta_ops.log as face

    assert sorted(face.__all__) == sorted(_face_names())
    for name in face.__all__:
        assert getattr(face, name) is not None, name
    code = ("import sys, delta_ops.log\n"
            "print(repr(sorted(m for m in sys.modules if m.startswith('delta_ops.log.')"
            " or m.split('.')[0] in ('pyarrow', 'numpy'))))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO_ROOT, env=env)
    assert eval(out.stdout.strip().splitlines()[-1]) == []


def test_nothing_outside_log_names_or_lists_the_log_directory():
    assert [v for _, rel, src in _sources() for v in _log_dir_violations(rel, src)] == []


def test_the_import_directions_hold():
    assert [v for _, rel, src in _sources() for v in _direction_violations(rel, src)] == []


def test_no_private_name_is_imported_across_packages():
    assert [v for name, rel, src in _sources() for v in _private_violations(name, rel, src)] == []


def test_log_reads_no_environment_variable():
    assert [v for _, rel, src in _sources() for v in _environment_violations(rel, src)] == []


def test_log_rooms_import_only_earlier_rooms():
    assert [v for name, rel, src in _sources() for v in _room_violations(name, rel, src)] == []


def test_the_architecture_checks_find_planted_violations():
    face = {"load_snapshot"}
    outside = "delta_ops/maintenance/x.py"
    assert _face_violations(outside, "from delta_ops.log.snapshot.loaded_snapshot import S", face)
    assert _face_violations(outside, "def f():\n    import delta_ops.log.replay.full_replay", face)
    assert _face_violations(outside, "from delta_ops.log import replay", face)
    assert not _face_violations(outside, "from delta_ops.log import load_snapshot", face)
    assert not _face_violations("delta_ops/log/x.py", "from delta_ops.log.files import y", face)

    assert _log_dir_violations(outside, "p = root + '/_delta_log/'")
    assert _log_dir_violations(outside, "x = storage.list_dir(LOG_DIR)")
    assert _log_dir_violations(outside, "x = s.list_from(f'{filenames.LOG_DIR}/0')")
    assert not _log_dir_violations(outside, '"""A docstring about _delta_log/."""')
    assert not _log_dir_violations(outside, "raise E('the _delta_log is missing')")
    assert not _log_dir_violations("delta_ops/log/files/x.py", "x = s.list_dir(LOG_DIR)")

    proto = "delta_ops/protocol/x.py"
    assert _direction_violations(proto, "import os")
    assert _direction_violations(proto, "from pathlib import Path")
    assert _direction_violations(proto, "from delta_ops.storage import Storage")
    assert _direction_violations(proto, "def f(p):\n    return open(p).read()")
    assert _direction_violations(outside, "def f():\n    import dagster as dg")
    assert _direction_violations("delta_ops/engine/local.py", "import pyspark.sql")
    assert not _direction_violations("delta_ops/defs/x.py", "import dagster as dg")
    assert not _direction_violations("delta_ops/engine/spark/x.py", "import pyspark.sql")
    assert not _direction_violations(proto, "import orjson")

    assert _private_violations("delta_ops.maintenance.x", outside,
                               "from delta_ops.log.files.y import _hidden")
    assert not _private_violations("delta_ops.maintenance.x", outside,
                                   "from delta_ops.maintenance.y import _hidden")
    assert not _private_violations("delta_ops.maintenance.x", outside,
                                   "from delta_ops.log import __doc__")

    log_file = "delta_ops/log/replay/streamed_actions.py"
    assert _environment_violations(log_file, "import os\nx = os.environ.get('X')")
    assert _environment_violations(log_file, "import os\nx = os.getenv('X')")
    assert _environment_violations(log_file, "def f(o):\n    return o.ReadOptions.from_env()")
    assert not _environment_violations("delta_ops/maintenance/x.py", "x = os.environ['X']")
    assert not _environment_violations("delta_ops/log/read_options.py", "x = os.environ")

    assert _room_violations("delta_ops.log.files.x", "delta_ops/log/files/x.py",
                            "from delta_ops.log.snapshot.loaded_snapshot import Snapshot")
    assert not _room_violations("delta_ops.log.snapshot.small_snapshot",
                                "delta_ops/log/snapshot/small_snapshot.py",
                                "from delta_ops.log.files.log_listing import list_log")
