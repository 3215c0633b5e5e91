"""The corpus tables no reader may read, and the error and message each must give."""

from __future__ import annotations

from delta_ops.errors import (
    CorruptLogError,
    UnsupportedFeatureError,
)

# Tables a correct reader must refuse, with the error class and what the message says.
BROKEN = {
    "golden__deltalog-invalid-protocol-version": (UnsupportedFeatureError, "reader version 99"),
    "golden__deltalog-state-reconstruction-without-metadata": (CorruptLogError, "no metaData"),
    "golden__deltalog-state-reconstruction-without-protocol": (CorruptLogError, "no protocol"),
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-metadata": (
        CorruptLogError,
        "no metaData",
    ),
    "golden__deltalog-state-reconstruction-from-checkpoint-missing-protocol": (
        CorruptLogError,
        "no protocol",
    ),
    "golden__versions-not-contiguous": (CorruptLogError, "commit 1 is missing"),
    # Its only commit has a protocol and an add but no metaData, which the spec requires in
    # the first version.
    "golden__data-reader-absolute-paths-escaped-chars": (CorruptLogError, "no metaData"),
}
