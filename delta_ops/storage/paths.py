"""Paths under a storage root: what a caller may pass, and how URIs are joined.

A relative path is validated before any backend sees it: no ``..`` segment (percent-encoded
or not), no absolute path, no URI with an authority (``s3://``, ``file:///``), no drive
path on Windows, no backslash, no NUL; other names with a colon
(``time=1971-07-22T03:06:40Z``, ``C:d.parquet``) are plain names. So nothing a caller
passes can reach outside the root. (Which file a path in a Delta action names is the path
identity of `delta_ops.protocol.actions`, `file_key`, not this module's business.)
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

from delta_ops.errors import StorageError

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
# A relative path that needs no normalizing and cannot escape: non-empty segments that do
# not start with '.', and no '%', ':', backslash or NUL anywhere.
_PLAIN_RELATIVE = re.compile(r"[^/\\\x00%:.][^/\\\x00%:]*(?:/[^/\\\x00%:.][^/\\\x00%:]*)*")


def _looks_like_uri(path: str) -> bool:
    """A URI with an authority (`s3://b/x`, `file:///x`) or, on Windows, a drive path.

    Other names with a colon are plain names below the root: a listing holds them
    (`time=1971-07-22T03:06:40Z`, `C:d.parquet`, `file:` as deltalake reads
    `file:/t/a.parquet` as a relative path), and they cannot leave it.
    """
    match = _SCHEME_RE.match(path)
    if match is None:
        return False
    rest = path[match.end() :]
    # A drive (`C:/x`, `C:x`) leaves the root only where drives exist.
    return rest.startswith("//") or (len(match.group(1)) == 1 and os.name == "nt")


def _join_uri(root: str, rel: str) -> str:
    if not rel:
        return root
    return f"{root}{rel}" if root.endswith("/") else f"{root}/{rel}"


def _clean_relative(path: str, root: str, *, directory: bool) -> str:
    """Validate a relative path under `root` and return it normalized ('a//./b/' -> 'a/b').

    `Storage._clean` answers the common case (a path already clean) before calling this.

    Raises:
        StorageError: The path is not a string, or not a safe relative path (a file path
            may not be empty either; a directory path may: the root itself).
    """
    if not isinstance(path, str):
        raise StorageError(
            f"path must be a string, got {type(path).__name__} (root {root})",
            file=repr(path),
        )
    problem = None
    if "\\" in path:
        problem = "backslashes are not allowed"
    elif "\x00" in path:
        problem = "NUL characters are not allowed"
    elif path.startswith("/"):
        problem = "absolute paths are not allowed"
    elif _looks_like_uri(path):
        problem = "URIs and drive letters are not allowed"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if problem is None and any(unquote(p) in ("..", ".") for p in parts):
        problem = "'..' segments are not allowed"
    if problem is None and not parts and not directory:
        problem = "a file path cannot be empty"
    if problem is not None:
        raise StorageError(
            f"unsafe relative path {path!r} under root {root}: {problem}",
            file=path,
        )
    return "/".join(parts)
