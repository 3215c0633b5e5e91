"""Fixtures of the history wing: `delta-ops history` and `delta-ops restore` (spec "Commit
Provenance Information", "In-Commit Timestamps", "Add File and Remove File", "Deletion
Vectors", "Row Tracking"). Tables are generated with `support.histories` or copied from the
corpus; nothing here writes into the corpus."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from delta_ops.storage import Storage


@pytest.fixture
def new_storage(tmp_path: Path) -> Callable[[str], Storage]:
    """A storage on a fresh directory under `tmp_path` (one per name)."""

    def make(name: str = "table") -> Storage:
        path = tmp_path / name
        path.mkdir()
        return Storage.for_uri(str(path))

    return make


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """Run `delta-ops` in process: (exit code, stdout, stderr)."""
    import delta_ops.cli as cli_module

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            code = cli_module.main(list(argv))
        except SystemExit as exc:  # argparse refuses a malformed command line
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
