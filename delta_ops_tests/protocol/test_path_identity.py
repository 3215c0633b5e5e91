"""One path identity: which paths in actions are relative, and which listing key each names.

Expectations are written from RFC 3986 (a scheme is ALPHA *( ALPHA / DIGIT / "+" / "-" /
"." ) then ":"), the protocol ("paths are URIs"; relative ones resolve against the table
root) and what deltalake 1.x opens (see test_vacuum_paths). The vectorized forms must agree
with the scalar ones on every input.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_ops.log.replay.references import _relative_key_array
from delta_ops.protocol.actions import (
    canonical_path,
    canonical_paths,
    file_key,
    file_keys,
    reader_key_array,
    reader_keys,
    relative_key,
)

ROOT = "file:///data/my table%41"  # a Storage root: literal, never percent-encoded
ENC_ROOT = "/data/my%20table%2541"  # the same directory inside a URI, encoded once


@pytest.mark.parametrize(
    ("path", "canonical"),
    [
        # No scheme per RFC 3986 (`=`, space): relative, decoded once.
        ("time=1971-07-22T03:06:40.000000Z/part-0.parquet",
         "time=1971-07-22T03:06:40.000000Z/part-0.parquet"),
        ("ts=2024-01-01 10:00:00/a.parquet", "ts=2024-01-01 10:00:00/a.parquet"),
        ("time=1971-07-22T03%3A06%3A40Z/p.parquet", "time=1971-07-22T03:06:40Z/p.parquet"),
        # A one-letter scheme is a drive letter: relative, as deltalake reads it.
        ("C:d.parquet", "C:d.parquet"),
        ("a%2541.parquet", "a%41.parquet"),
        ("a%20b.parquet", "a b.parquet"),
        # Absolute forms of files inside the root, the root encoded once in each.
        (f"file://{ENC_ROOT}/a.parquet", "a.parquet"),
        (f"file://{ENC_ROOT}//x/a.parquet", "x/a.parquet"),
        (f"file://localhost{ENC_ROOT}/a.parquet", "a.parquet"),
        (f"FILE://LOCALHOST{ENC_ROOT}/a.parquet", "a.parquet"),
        (f"file:{ENC_ROOT}/a.parquet", "a.parquet"),
        (f"{ENC_ROOT}/p=1/a%20b.parquet", "p=1/a b.parquet"),
        (f"file://{ENC_ROOT}/x/../a.parquet", "a.parquet"),
        # Outside the root: an absolute key that never matches a listing.
        ("file:///data/other/a.parquet", "file:/data/other/a.parquet"),
        ("file://host/data/a.parquet", "file://host/data/a.parquet"),
        (f"file://{ENC_ROOT}/../a.parquet", "file:/data/a.parquet"),
        ("s3a://bucket/t/a.parquet", "s3://bucket/t/a.parquet"),
        ("ab:d.parquet", "ab:d.parquet"),
    ],
)
def test_canonical_path(path, canonical):
    assert canonical_path(path, ROOT) == canonical


def test_s3_roots():
    root = "s3://bucket/pre fix"
    for path in ("s3://bucket/pre%20fix/a.parquet", "s3a://bucket/pre%20fix//a.parquet",
                 "S3N://bucket/pre%20fix/a.parquet"):
        assert canonical_path(path, root) == "a.parquet"
    assert canonical_path("s3://other/pre%20fix/a.parquet", root) == (
        "s3://other/pre fix/a.parquet"
    )


@pytest.mark.parametrize(
    ("path", "keys"),
    [
        ("a.parquet", ("a.parquet",)),
        ("a//b.parquet", ("a/b.parquet",)),
        ("a%2541.parquet", ("a%41.parquet", "a%2541.parquet")),
        # deltalake joins a URI to the root: it opens `<root>/file:/<root>/a.parquet`.
        (f"file://{ENC_ROOT}/a.parquet",
         ("a.parquet", "file:/data/my table%41/a.parquet",
          f"file:{ENC_ROOT}/a.parquet")),
        # A writer that did not encode the root: the literal reading protects it too.
        ("file:///data/my table%41/a.parquet",
         ("a.parquet", "file:/data/my tableA/a.parquet", "file:/data/my table%41/a.parquet")),
        ("../x.parquet", ()),
        ("a/../../x.parquet", ()),
    ],
)
def test_reader_keys(path, keys):
    assert reader_keys(path, ROOT) == keys


@pytest.mark.parametrize("path", ["../x", "a/../../x", "file:///elsewhere/a", "s3://b/k"])
def test_relative_key_outside(path):
    assert relative_key(path, ROOT) is None


PIECES = ["a", "B", ":", "%", "%25", "%41", "%3A", " ", "=", "é", "//", "/", "./", "../",
          "file:", "file:/", "file://", "file:///", "file://localhost/", "s3://", "C:",
          "k=v", ENC_ROOT, "/data/my table%41"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=6).map("".join), min_size=1,
                max_size=20))
def test_vectorized_forms_agree_with_the_scalar_ones(paths):
    arr = pa.array(paths, pa.string())
    assert canonical_paths(arr, ROOT).to_pylist() == [canonical_path(p, ROOT) for p in paths]
    structs = pa.StructArray.from_arrays(
        [arr, pa.nulls(len(paths), pa.struct([("storageType", pa.string()),
                                               ("pathOrInlineDv", pa.string()),
                                               ("offset", pa.int32())]))],
        names=["path", "deletionVector"],
    )
    assert file_keys(structs, ROOT).to_pylist() == [file_key(p, None, ROOT) for p in paths]
    expected = {k for p in paths for k in reader_keys(p, ROOT)}
    got = set(reader_key_array(arr, ROOT).to_pylist())
    # Plain paths pass through as they are (their reader key is themselves); a path that
    # names no file (the empty one) gives no key, as `reader_keys` has it.
    assert got == expected
    assert set(_relative_key_array(arr, ROOT).to_pylist()) == {
        k for p in paths if (k := relative_key(p, ROOT)) is not None
    }
    for p in paths:
        keys = reader_keys(p, ROOT)
        rel = relative_key(p, ROOT)
        assert rel is None or keys[0] == rel
        assert all(k and not k.startswith("/") and "//" not in k for k in keys)
        assert all(".." not in k.split("/") and "." not in k.split("/") for k in keys)
