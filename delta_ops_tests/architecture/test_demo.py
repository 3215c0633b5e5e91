"""`make demo` from a checkout: its third table comes from the checkout's test corpus, and
without one the demo says so in one line before anything starts (no Spark, no Dagster run).
The whole demo runs in `make demo` (Spark and Dagster; minutes), not here."""

from __future__ import annotations

import os
import subprocess
import sys

from delta_ops_tests.support.corpus import IN_REPO_CORPUS, REPO_ROOT


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


def _java(tmp_path, version_line: str | None):
    """`make java` with JAVA_HOME naming a fake runtime printing `version_line` (None: no
    runtime there)."""
    import textwrap

    home = tmp_path / "jre"
    if version_line is not None:
        (home / "bin").mkdir(parents=True)
        java = home / "bin" / "java"
        java.write_text(textwrap.dedent(f"""\
            #!/bin/sh
            echo '{version_line}' >&2
        """))
        java.chmod(0o755)
    env = {**os.environ, "JAVA_HOME": str(home)}
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), "java"],
                          env=env, capture_output=True, text=True, timeout=60)


def test_make_demo_and_test_need_java_17_or_newer_and_say_so_in_one_line(tmp_path):
    message = ("Spark needs Java 17 or 21 (found: {}): install one, e.g. 'sudo apt-get "
               "install openjdk-17-jre-headless' or 'brew install openjdk@17', or set JAVA_HOME")
    for line, found in ((None, "no java"), ('openjdk version "11.0.2" 2019-01-15', "11"),
                        ('java version "1.8.0_292"', "8")):
        done = _java(tmp_path / found.replace(" ", "_"), line)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[0] == message.format(found)
    for line in ('openjdk version "17.0.15" 2025-04-15', 'openjdk version "21.0.8" 2025-07-15'):
        done = _java(tmp_path / line.split('"')[1], line)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""


def test_the_demos_run_config_is_valid_and_confirms_deletes():
    """The demo maintains every table in full: its run of the implicit asset job carries
    `confirm_deletes` for each table's step (without it VACUUM and metadata cleanup are left
    out of the run), and Dagster accepts that config for the demo's registry."""
    from dagster import validate_run_config

    from delta_ops.defs import build_definitions
    from delta_ops.defs.registry import load_registry
    from delta_ops.demo import demo_run_config

    registry = load_registry(REPO_ROOT / "tables.yaml")
    config = demo_run_config(registry.names)
    job = build_definitions(registry).resolve_implicit_global_asset_job_def()
    validated = validate_run_config(job, config)
    maintenance = {f"{n}__maintenance" for n in registry.names}
    assert maintenance <= set(validated["ops"])
    assert all(validated["ops"][s]["config"]["confirm_deletes"] is True for s in maintenance)
