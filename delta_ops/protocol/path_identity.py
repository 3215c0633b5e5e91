"""One path identity: the key a file action reconciles by, and the files a path names.

Spec sections: "Add File and Remove File" (paths are URIs, relative to the table root or
absolute), "Deletion Vectors" (Derived Fields: the DV unique id), "Action Reconciliation"
(a file action's key is its path and DV unique id).

Pure Python and the standard library: the action-by-action reconciliation of a small log
uses these without loading Arrow. `delta_ops.protocol.file_actions` has the vectorized
forms for Arrow arrays, built on the same decisions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote


def dv_unique_id(dv: Mapping[str, Any] | None) -> str | None:
    """The deletion vector's unique id (spec "Derived Fields"), None without a DV."""
    if not dv:
        return None
    uid = f"{dv['storageType']}{dv['pathOrInlineDv']}"
    offset = dv.get("offset")
    return uid if offset is None else f"{uid}@{offset}"


# --------------------------------------------------------------------------------------
# Path identity. One decision (`_classify`) says whether a path written in an action is
# relative or absolute; `canonical_path` (the reconciliation key), `reader_keys` (every
# file a reader may open for it, in the listing's form) and their vectorized forms all
# build on it.
# --------------------------------------------------------------------------------------

# RFC 3986: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then ":". A one-letter
# scheme is read as a relative path, as deltalake (and Storage.for_uri, a drive letter)
# does: `C:d.parquet` is the file `C:d.parquet` in the table root.
_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):")
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
#: Paths matching this may have a canonical form other than themselves.
CANONICAL_PATTERN = r"[%:]|^/"
#: Paths matching this may be read as another file than themselves (percent escapes,
#: URIs, absolute paths, empty or dot segments, an unencoded query or fragment).
READER_PATTERN = r"[%:?#]|^/|//|(^|/)\.\.?(/|$)|/$"


def _classify(path: str) -> tuple[str | None, str]:
    """(scheme, rest) of an absolute path or URI; (None, path) for a relative one.

    A path starting with `/` is an absolute path of the `file` scheme. A URI needs a scheme
    of at least two characters per RFC 3986: `time=1971-07-22T03:06:40Z/x.parquet`,
    `ts=2024-01-01 10:00:00/a.parquet` and `C:d.parquet` are relative.
    """
    if path.startswith("/"):
        return "file", path
    match = _URI_SCHEME.match(path)
    if match is None:
        return None, path
    scheme = match.group(1).lower()
    return _SCHEME_ALIASES.get(scheme, scheme), path[match.end() :]


def is_absolute(path: str) -> bool:
    """Whether a path from the log is absolute: `/a/b`, or a URI with a scheme (RFC 3986,
    as `_classify` decides); otherwise it is relative to the directory the spec names."""
    return _classify(path)[0] is not None


def normalize_relative(path: str) -> str | None:
    """A decoded relative path in the listing's form: empty and `.` segments dropped, `..`
    resolved; None when it is empty or climbs above the root."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(part)
    return "/".join(parts) or None


def _normalize_absolute(path: str) -> str:
    """An absolute, decoded path with empty and dot segments resolved (`..` stops at /)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _location(scheme: str, rest: str, *, decode: bool) -> tuple[str, str] | None:
    """(scheme or `scheme://authority`, normalized absolute path) of an absolute path or
    URI; None for a local URI naming another host, or one without an absolute path."""
    text = unquote(rest) if decode else rest
    if scheme == "file":
        if rest.startswith("//"):
            authority, slash, tail = rest[2:].partition("/")
            if unquote(authority).lower() not in ("", "localhost"):
                return None
            text = unquote(slash + tail) if decode else slash + tail
        if not text.startswith("/"):
            return None
        return "file", _normalize_absolute(text)
    if rest.startswith("//"):
        authority, _, tail = rest[2:].partition("/")
        tail = unquote(tail) if decode else tail
        return f"{scheme}://{authority.lower()}", _normalize_absolute("/" + tail)
    return None  # an opaque URI (`ab:c`): no path, nothing inside a table root


def _root_location(root: str) -> tuple[str, str] | None:
    """The table root as `_location` gives it; the root is taken literally (a Storage root
    is never percent-encoded: its directory names are the listing's)."""
    scheme, rest = _classify(root)
    if scheme is None:
        return None
    return _location(scheme, rest, decode=False)


def _inside(loc: tuple[str, str] | None, root: str) -> str | None:
    """The listing key of an absolute location inside `root`, None when outside."""
    root_loc = _root_location(root)
    if loc is None or root_loc is None or loc[0] != root_loc[0]:
        return None
    base = root_loc[1].rstrip("/") + "/"
    if not loc[1].startswith(base):
        return None
    return normalize_relative(loc[1][len(base) :])


def _absolute_key(loc: tuple[str, str] | None, scheme: str, rest: str) -> str:
    if loc is None:
        return f"{scheme}:{unquote(rest)}"
    kind, path = loc
    return f"file:{path}" if kind == "file" else f"{kind}{path}"


def canonical_path(path: str, root: str) -> str:
    """Canonical identity of a file path from the log (spec: paths are RFC 2396 URIs).

    Relative paths are percent-decoded once. Absolute ones (`/a/b`, `file:/a/b`,
    `file:///a/b`, `file://localhost/a/b`, `s3://bucket/a/b`, `s3a://...`) are decoded
    once, their empty and dot segments resolved, and, when they point inside the table
    root, made relative to it, so that the same file written both ways has one key. The
    root is taken literally (a Storage root is the listing's form, never encoded).
    Whether a path is a URI follows RFC 3986 (see `_classify`).

    Args:
        path: the path as written in the action.
        root: the table root URI (`file:///abs/dir`, `s3://bucket/prefix`).
    """
    return _canonical(path, root)[0]


def _canonical(path: str, root: str) -> tuple[str, bool]:
    """(`canonical_path`, whether it is relative to the root)."""
    scheme, rest = _classify(path)
    if scheme is None:
        return (unquote(path) if "%" in path else path), True
    loc = _location(scheme, rest, decode=True)
    inside = _inside(loc, root)
    if inside is not None:
        return inside, True
    return _absolute_key(loc, scheme, rest), False


def reader_keys(path: str, root: str) -> tuple[str, ...]:
    """Every file inside `root` a reader may open for `path`, as listing keys (relative,
    decoded, no empty or dot segments); the (normalized) canonical key first when it is
    inside the root. Empty when no reading points inside the root.

    Readers disagree on some shapes, so all their readings are returned:

    * the spec's (and Spark's): a relative path decoded once; an absolute path or URI
      pointing inside the root, made relative;
    * deltalake's (1.x): every path joined to the root as a relative one, `file:///t/a`
      and `/t/a` included (it opens `<root>/file:/t/a`, `<root>/t/a`), decoded once,
      empty segments dropped;
    * a writer that did not encode: the path taken literally (an absolute one too,
      when it then points inside the root);
    * a URI reader's (Spark, the Delta kernels: `new Path(new URI(path))`): an unencoded
      `?` starts a query and `#` a fragment, and the file opened is the path before them.
    """
    literal = None
    scheme, rest = _classify(path)
    if scheme is not None and "%" in rest:
        literal = _inside(_location(scheme, rest, decode=False), root)
    uri_path = re.split(r"[?#]", path, maxsplit=1)[0]
    out: list[str] = []
    for candidate in (
        relative_key(path, root),
        literal,
        normalize_relative(unquote(path)),
        normalize_relative(path),
        *((relative_key(uri_path, root),) if uri_path != path else ()),
    ):
        if candidate is not None and candidate not in out:
            out.append(candidate)
    return tuple(out)


def relative_key(path: str, root: str) -> str | None:
    """The listing key of the file the spec's reading of `path` names (`canonical_path`
    with empty and dot segments resolved), None when that file is not inside `root`."""
    key, relative = _canonical(path, root)
    return normalize_relative(key) if relative else None


def local_readings(path: str, root: str) -> tuple[str, ...]:
    """Every local absolute path a reader may open for `path` under a `file` root, as
    written: no dot segment resolved and no link followed (`..` after a link is the
    file system's to resolve, and only it can say which file a spelling reaches). Empty
    when the root is not local.

    The readings of `reader_keys`, before any text is normalized: the path joined to the
    root's path (decoded once, and literally: the spec's reading of a relative path, and
    deltalake's of every path), and an absolute path or `file` URI of this host (decoded
    once, and literally) as it stands.
    """
    root_loc = _root_location(root)
    if root_loc is None or root_loc[0] != "file":
        return ()
    base = root_loc[1].rstrip("/")
    scheme, rest = _classify(path)
    forms = [path] if "%" not in path else [unquote(path), path]
    out = [f"{base}/{form}" for form in forms]
    if scheme == "file":
        text = rest
        if rest.startswith("//"):
            authority, slash, tail = rest[2:].partition("/")
            text = slash + tail if unquote(authority).lower() in ("", "localhost") else ""
        if text.startswith("/"):
            out += [unquote(text), text] if "%" in text else [text]
    return tuple(dict.fromkeys(out))


def file_key(path: str, dv: Mapping[str, Any] | None, root: str) -> str:
    """Reconciliation key of a file action: canonical path plus DV unique id."""
    uid = dv_unique_id(dv)
    cp = canonical_path(path, root)
    return cp if uid is None else f"{cp}\x00{uid}"
