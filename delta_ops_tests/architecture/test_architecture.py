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
    ("delta_ops/log/commits.py", "_StepAside"),
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

    from delta_ops.maintenance.checkpoint import write_checkpoint
    from delta_ops.maintenance.checksum import (
        compute_checksum,
        verify_checksum,
        write_checksum,
        write_checksums,
    )
    from delta_ops.maintenance.cleanup import cleanup_metadata
    from delta_ops.maintenance.compaction import compact_log
    from delta_ops.maintenance.row_tracking import backfill_row_tracking
    from delta_ops.maintenance.vacuum import vacuum

    timed = [vacuum, cleanup_metadata, write_checkpoint, backfill_row_tracking]
    for op in [*timed, compute_checksum, verify_checksum, write_checksum, write_checksums,
               compact_log]:
        params = inspect.signature(op).parameters
        assert params["storage_options"].kind is inspect.Parameter.KEYWORD_ONLY, op.__name__
        assert params["storage_options"].default is None, op.__name__
    for op in timed:
        clock = inspect.signature(op).parameters["clock"]
        assert clock.kind is inspect.Parameter.KEYWORD_ONLY and clock.default is None, op
