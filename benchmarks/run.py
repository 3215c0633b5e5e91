"""`make bench`: every benchmarks/bench_*.py module's `main()`, one table each.

`python -m benchmarks.run [NAME ...]` runs only the named modules (e.g. `snapshot`).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = argv or sorted(p.stem[len("bench_") :] for p in here.glob("bench_*.py"))
    results = {}
    for name in names:
        print(f"\n== {name} ==", flush=True)
        results[name] = importlib.import_module(f"benchmarks.bench_{name}").main()
    out = here / "data" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nresults written to {out.relative_to(here.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
