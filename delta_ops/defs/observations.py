"""What the watch sensor records of a table's log: the observation of its `delta_log`, from
the cheap log state and the newest `.crc`."""

import json
from typing import TYPE_CHECKING, Any

from dagster import AssetObservation, MetadataValue

from delta_ops.defs.keys import DELTA_LOG, asset_key
from delta_ops.errors import DeltaOpsError
from delta_ops.log import LogState, TableSettings
from delta_ops.protocol.filenames import LOG_DIR

if TYPE_CHECKING:
    from delta_ops.protocol.crc import VersionChecksum

#: The tag Dagster reads an observation's data version from.
DATA_VERSION_TAG = "dagster/data_version"


def read_crc(storage: Any, version: int) -> "VersionChecksum | None":
    """The `.crc` of `version`, None when it is gone or does not parse (the
    `fsck` check is where a bad one is reported)."""
    from delta_ops.protocol.crc import parse_checksum

    try:
        return parse_checksum(storage.read(f"{LOG_DIR}/{version:020d}.crc"))
    except (DeltaOpsError, ValueError):
        return None


def log_observation(
    name: str, uri: str, state: LogState, settings: TableSettings | None = None,
    crc: "VersionChecksum | None" = None,
) -> AssetObservation:
    """What the sensor saw of a table's log, as an observation of `[table, delta_log]` whose
    data version is the table version (the keys the observed asset also reports): version,
    checkpoint, the protocol, and from the `.crc` of the latest version when there is one
    the live files, bytes, schema and deletion-vector counts."""
    metadata: dict[str, Any] = {
        "dagster/uri": MetadataValue.path(uri),
        "dagster/table_name": name,
        "version": state.version,
        "checkpoint_version": (
            state.checkpoint_version if state.checkpoint_version is not None
            else MetadataValue.null()
        ),
        "commits_since_checkpoint": state.commits_since_checkpoint,
        "observed_by": "delta_tables_watch",
    }
    if settings is not None:
        metadata["min_reader_version"] = settings.protocol.get("minReaderVersion")
        metadata["min_writer_version"] = settings.protocol.get("minWriterVersion")
    if crc is not None:
        metadata["num_files"] = crc.num_files
        metadata["size_bytes"] = crc.table_size_bytes
        if crc.num_deleted_records is not None:
            metadata["num_deleted_records"] = crc.num_deleted_records
        schema = (crc.metadata or {}).get("schemaString")
        if isinstance(schema, str):
            from delta_ops.defs.metadata import column_schema

            try:
                metadata["dagster/column_schema"] = column_schema(json.loads(schema))
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
        metadata["size_source"] = f"{state.version}.crc"
    return AssetObservation(
        asset_key=asset_key(name, DELTA_LOG),
        metadata=metadata,
        tags={DATA_VERSION_TAG: str(state.version)},
    )


__all__ = ["DATA_VERSION_TAG", "log_observation", "read_crc"]
