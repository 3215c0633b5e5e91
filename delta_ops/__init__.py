"""delta_ops: Delta Lake table maintenance implemented on the Delta transaction protocol."""

from __future__ import annotations

__version__ = "0.1.0"
