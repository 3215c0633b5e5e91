"""VACUUM: delete data files the table no longer references, once they are old enough.

Spec sections: "VACUUM Protocol Check" (check the reader and writer protocol before
anything is listed), "Add File and Remove File" (tombstones expire `deletedFileRetention`
after their `deletionTimestamp`), "Deletion Vectors" (a DV file lives as long as an add or
an unexpired remove references it; `u` descriptors resolve to
`<table>/<random prefix>/deletion_vector_<uuid>.bin`), "Change Data Files" (`_change_data`
files are not referenced by the state; they go purely by age), "Delta Table Specification"
(data lives in non-hidden directories), and the table properties
`delta.deletedFileRetentionDuration` (default 1 week) and `delta.logRetentionDuration`.

What is kept (everything else old enough below the table root is deleted):

* live `add` files and unexpired tombstones (`deletionTimestamp >= now - retention`): for
  each path, every file a reader may open for it (`reader_keys`: the spec's reading, a URI
  or absolute path inside the root made relative, and deltalake's and the literal ones);
* every DV file referenced by either (`u`: resolved against the root; `p`: as any path);
* every path (and DV file) an add or a remove of any staged commit names
  (`_delta_log/_staged_commits/<v>.<uuid>.json`, spec "Catalog-managed tables": only the
  catalog knows which it ratified and will publish; `log.replay.staged_commits`), whatever its
  version; a staged commit that cannot be read refuses the run. Commits a catalog holds
  inline are invisible here and protected only by the retention;
* on local storage, a listed file a referenced path reaches through another spelling of
  its directory (a symbolic link, `..` after one, the root given through a link: resolved
  by the file system, `aliases`); a path whose target cannot be established refuses;
* files modified less than `retention` ago (in-flight writes), from the listing's mtimes;
* everything under `_delta_log`, and every hidden file or directory (name starting with
  `_` or `.`), except `_change_data` and partition directories (`<partition column>=...`),
  as Spark decides it. `metadata` (Iceberg UniForm) and `_delta_index` are hidden too.
  A Hadoop side checksum `.<name>.crc` goes with `<name>` when `<name>` goes.

Nothing outside the table root is ever touched: candidates come from listing the root
without following symbolic links (a linked directory is not entered, a linked file never
deleted: links are left in place), and paths in the log only ever protect files. Before
anything is deleted (dry run and real run share the plan) each candidate is proven: a
regular file whose real path is the root's real path joined with its own (no link on the
way), and unreferenced by a second, independent normalisation (paths decoded until they no
longer change, schemes dropped, slashes collapsed) of its path and of every referenced
path, the staged commits read again on their own, and (local storage) not the file any
spelling of a referenced path reaches by device and inode; any doubt refuses the whole
run (`UnsafeDeletionError`, naming table and file). A file whose name is not valid UTF-8
(no log can name it) is left and reported in the messages. Retention is checked first:
shorter than
`delta.deletedFileRetentionDuration` is refused unless forced, and so is a
`delta.logRetentionDuration` shorter than the retention.

No full snapshot is built: VACUUM only needs, per logical file, whether its newest action is
an add or a still-unexpired remove, and which DV file it names. That is the log's
references-only replay (`delta_ops.log.replay.references`): the same reconciler as the snapshot's
(`log.replay.columnar_commits` columnar, `log.replay.full_replay` action by action and for
checkpoints), reading only
`path`, `deletionVector` and `deletionTimestamp`. A checkpoint that cannot be read is left
out as `load_snapshot` leaves it out (`log.replay.checkpoint_fallback`).

A large table's references and listing never sit in memory whole (issue 15): from
`log.replay.reference_buckets.partition_threshold()` estimated file actions on, the references
are spilled by the bucket of their listing key (the one path identity, `reader_keys`) and
the engine spills the listing by the same function and anti-joins bucket by bucket
(`engine.local.find_unreferenced_in_buckets`); the proof reads every spilled reference
again, bucket by bucket but trusting no bucket. The plan is the in-memory path's.

Where the files come from (every source goes through the same `_select` and proof):

* a listing of the table's data directories (the default);
* an inventory (`inventory`: an S3 Inventory report, or delta-spark's `USING INVENTORY`
  schema): only which files existed; never what is referenced; stale, incomplete or
  outside-the-root inventories are refused;
* lite mode, no listing at all: the files named by expired tombstones still in the log
  state and by the removes of every commit since the last VACUUM
  (`log.replay.vacuum_info.lite_window`, `_delta_log/_last_vacuum_info` as delta-spark keeps it),
  with their DV files, each checked for existence and age. When the log no longer holds
  those commits, lite refuses (`LiteVacuumUnavailableError`) or, asked to, lists the table.

A real run records `_last_vacuum_info`, and on request (`record_history`) `VACUUM START` /
`VACUUM END` commits (`history`). Progress goes to an `engine.progress.Progress`.

The package: `listing` (hidden names, candidates, emptied directories), `aliases` (what
referenced paths reach through links), `proof` (the independent check), `plan` (retention,
the plan), `inventory` and `inventory_s3` (files from an inventory), `history` (the
START/END commits), `apply` (deleting; `vacuum`, `describe`).
"""

from __future__ import annotations

from delta_ops.log import FileReferences, file_references
from delta_ops.maintenance.vacuum.apply import VacuumResult, describe, vacuum
from delta_ops.maintenance.vacuum.inventory import InventorySource
from delta_ops.maintenance.vacuum.listing import CHANGE_DATA_DIR, is_hidden, partition_prefixes
from delta_ops.maintenance.vacuum.plan import (
    HOUR_MS,
    VacuumPlan,
    plan_vacuum,
    retention_for,
)

__all__ = [
    "CHANGE_DATA_DIR",
    "HOUR_MS",
    "FileReferences",
    "InventorySource",
    "VacuumPlan",
    "VacuumResult",
    "describe",
    "file_references",
    "is_hidden",
    "partition_prefixes",
    "plan_vacuum",
    "retention_for",
    "vacuum",
]
