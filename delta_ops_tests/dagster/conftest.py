"""Fixtures of the Dagster wing's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _dagster_home(tmp_path_factory, monkeypatch):
    """Dagster must never touch a real DAGSTER_HOME from the tests: every test gets an empty
    one of its own (outside `tmp_path`, which some tests fill with an instance of their own)."""
    home = tmp_path_factory.mktemp("dagster_home")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
