"""Table URIs to storage backends: which backend serves a URI, and at what root.

A plain path (a one-letter scheme is a Windows drive) or a `file:` URI is local; `s3://`,
`s3a://` and `s3n://` are S3; `memory://name` is the in-process store; any other scheme
goes to fsspec. `file://host/...` with a host other than `localhost` is refused. Protocol
sections: none (the protocol names tables by URI; resolving one is the storage layer's).
"""

from __future__ import annotations

from typing import Any

from delta_ops.errors import StorageError
from delta_ops.storage.backend import _Backend
from delta_ops.storage.generic import _open_fsspec
from delta_ops.storage.local import _open_local
from delta_ops.storage.memory import _open_memory
from delta_ops.storage.paths import _SCHEME_RE
from delta_ops.storage.s3 import _S3_SCHEMES, _open_s3

__all__ = ["open_uri"]


def open_uri(uri: str, options: dict[str, Any]) -> tuple[str, str, _Backend, str]:
    """The backend serving `uri`: (normalized root URI, scheme, backend, native base path).

    Args:
        uri: A non-empty URI or path (see `Storage.for_uri`).
        options: Backend options (credentials included), kept by the backend as given.

    Raises:
        StorageError: A malformed `file:` URI, or one naming a remote host.
    """
    match = _SCHEME_RE.match(uri)
    scheme = match.group(1).lower() if match else ""
    if not match or len(scheme) == 1:  # a plain path (a one-letter scheme is a drive)
        return _with_scheme("file", _open_local(uri))
    rest = uri[match.end() :]
    if scheme == "file":
        if rest.startswith("//"):
            authority, slash, path = rest[2:].partition("/")
            if authority not in ("", "localhost"):
                raise StorageError(
                    f"file URI {uri!r} names a remote host {authority!r}; only local "
                    "files are supported"
                )
            rest = slash + path
        if not rest.startswith("/"):
            raise StorageError(f"file URI {uri!r} must hold an absolute path")
        return _with_scheme("file", _open_local(rest))
    if scheme in _S3_SCHEMES:
        return _with_scheme("s3", _open_s3(uri, rest, options))
    if scheme == "memory":
        name = rest.lstrip("/").rstrip("/")
        return _with_scheme("memory", _open_memory(name, options))
    return _with_scheme(scheme, _open_fsspec(uri, scheme, options))


def _with_scheme(
    scheme: str, opened: tuple[str, _Backend, str]
) -> tuple[str, str, _Backend, str]:
    root, backend, base = opened
    return root, scheme, backend, base
