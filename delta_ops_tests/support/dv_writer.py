"""Deletion-vector writers for building test tables: `benchmarks.dv_writer`, which the
layout benchmark shares (a benchmark may not import test modules, so the writer lives there).
"""

from __future__ import annotations

from benchmarks.dv_writer import encode_uuid_path, inline_descriptor, write_dv_file

__all__ = ["encode_uuid_path", "inline_descriptor", "write_dv_file"]
