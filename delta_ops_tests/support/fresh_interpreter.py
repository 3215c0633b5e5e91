"""Run code in a fresh interpreter and report what it printed (the startup tests look at
sys.modules afterwards)."""

from __future__ import annotations

import os
import subprocess
import sys

from delta_ops_tests.support.corpus import REPO_ROOT

_REPORT = """
import sys
def loaded(names):
    return sorted(m for m in sys.modules if m in names or m.split('.')[0] in names
                  or any(m.startswith(n + '.') for n in names))
"""


def _run(code: str, *args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _REPORT + code, *args],
        capture_output=True, text=True, check=True, cwd=REPO_ROOT, env=env,
    )
    return proc.stdout.strip().splitlines()
