"""`make demo` from a checkout: its third table comes from the checkout's test corpus, and
without one the demo says so in one line before anything starts (no Spark, no Dagster run).
The whole demo runs in `make demo` (Spark and Dagster; minutes), not here."""

from __future__ import annotations

import os
import subprocess
import sys

from delta_ops_tests.corpus import IN_REPO_CORPUS, REPO_ROOT


def test_the_demo_copies_its_deletion_vector_table_from_the_in_repo_corpus(monkeypatch):
    from delta_ops import demo

    monkeypatch.delenv("DELTA_OPS_CORPUS", raising=False)
    assert demo.corpus_root() == IN_REPO_CORPUS
    assert (demo.corpus_root() / demo.DV_SOURCE / "_delta_log").is_dir()


def test_the_demo_without_a_corpus_says_so_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT),
           "DELTA_OPS_CORPUS": str(tmp_path / "no_corpus")}
    done = subprocess.run(
        [sys.executable, "-m", "delta_ops.demo", "--tables-dir", str(tmp_path / "tables"),
         "--registry", str(tmp_path / "tables.yaml")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"delta_ops demo: demo table orders_dv: no corpus table at "
        f"{tmp_path / 'no_corpus' / 'delta/golden__dv-partitioned-with-checkpoint'}: run the "
        "demo from a checkout (its delta_ops_tests/data/corpus) or set DELTA_OPS_CORPUS"]
    assert not (tmp_path / "tables").exists()
