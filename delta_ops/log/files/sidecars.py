"""Where the sidecar file a V2 checkpoint's `sidecar` action names lives: the one rule.

Spec section: "Sidecar File Information" (the path is relative to `_delta_log/_sidecars`
unless it is absolute). Every reader of checkpoints (the snapshot's replay, VACUUM's
references, the checkpoint-file inspector that cleanup relies on) resolves sidecars here.
"""

from __future__ import annotations

from collections.abc import Iterable

from delta_ops.errors import CorruptLogError, SidecarMissingError
from delta_ops.protocol.actions import is_absolute, relative_key
from delta_ops.protocol.filenames import LOG_DIR, SIDECAR_DIR

#: Where sidecar files live, relative to the table root.
SIDECARS = f"{LOG_DIR}/{SIDECAR_DIR}"


def sidecar_file_path(
    path: str, table: str, *, version: int | None = None, file: str | None = None
) -> str:
    """The table-relative path of the sidecar file a `sidecar` action names.

    Args:
        path: the action's `path` (URI-encoded; relative to `_delta_log/_sidecars`, or
            absolute).
        table: the table root URI.
        version: the checkpoint's version, for the error.
        file: the checkpoint file holding the action, for the error.

    Raises:
        CorruptLogError: the path leads outside the table's `_delta_log/_sidecars`.
    """
    key = relative_key(path if is_absolute(path) else f"{SIDECARS}/{path}", table)
    if key is None or not key.startswith(f"{SIDECARS}/"):
        raise CorruptLogError(
            f"sidecar path {path!r} does not lead inside the table's {SIDECARS} directory "
            "(a relative path is relative to it, an absolute one must point into it)",
            table=table, version=version, file=file,
        )
    return key


def sidecar_files(names: Iterable[str], table: str, version: int, file: str) -> list[str]:
    """`sidecar_file_path` of each `sidecar` action path of the checkpoint at `version`
    (`file`: its first file, named in errors)."""
    return [sidecar_file_path(name, table, version=version, file=file) for name in names]


def require_sidecar(storage, path: str, version: int) -> None:
    """Raise `SidecarMissingError` (the checkpoint at `version` is unusable) unless the
    sidecar file `path` exists."""
    if not storage.exists(path):
        raise SidecarMissingError(
            "V2 checkpoint references a sidecar that does not exist",
            table=storage.root, version=version, file=path,
        )


__all__ = ["SIDECARS", "require_sidecar", "sidecar_file_path", "sidecar_files"]
