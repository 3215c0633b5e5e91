"""Reading a version checksum file (`N.crc`): the one reader of `.crc` files.

Spec section: "Version Checksum File". What the file holds and how it parses are pure and
live in `delta_ops.protocol.crc`; this module does the I/O. Writers name the file through
`delta_ops.protocol.filenames.checksum_name`.
"""

from __future__ import annotations

from delta_ops.errors import InvalidChecksumError, StorageError
from delta_ops.protocol.crc import VersionChecksum, parse_checksum
from delta_ops.protocol.filenames import LOG_DIR, checksum_name
from delta_ops.storage import Storage


def read_checksum(storage: Storage, version: int) -> VersionChecksum | None:
    """The parsed `version.crc`, or None when there is none.

    Raises:
        InvalidChecksumError: the file exists but is not a valid checksum (names the file).
    """
    path = f"{LOG_DIR}/{checksum_name(version)}"
    try:
        data = storage.read(path)
    except StorageError:
        if not storage.exists(path):
            return None
        raise
    try:
        return parse_checksum(data)
    except InvalidChecksumError as exc:
        raise InvalidChecksumError(
            exc.reason, table=storage.root, version=version, file=path
        ) from exc


__all__ = ["read_checksum"]
