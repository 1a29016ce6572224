"""dataprep: offline cleaning and sharding of raw datasets (see dataprep/README.md)."""

from __future__ import annotations

from dataprep.errors import (
    DataprepError,
    FormatError,
    OutputExistsError,
    RejectBudgetError,
    UsageError,
    VerifyError,
)
from dataprep.formats.tar.index import ShardIndex, index_path_for, index_tar, read_index, write_index
from dataprep.formats.manifest import Manifest, ShardInfo, Totals, read_manifest, write_manifest
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import RawRecord, Reject, RejectReason

__all__ = [
    "CleanRecord",
    "DataprepError",
    "FormatError",
    "Manifest",
    "OutputExistsError",
    "RawRecord",
    "Reject",
    "RejectBudgetError",
    "RejectReason",
    "ShardIndex",
    "ShardInfo",
    "Totals",
    "UsageError",
    "VerifyError",
    "index_path_for",
    "index_tar",
    "read_index",
    "read_manifest",
    "write_index",
    "write_manifest",
]
