"""The samples a shard writer takes: ``CleanRecord`` (fields of one sample) and ``EncodedSample`` (tar members).

Cleaning makes them (``dataprep.clean``) from raw records; every writer of ``dataprep.formats``
takes one or the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CleanRecord:
    """One sample ready to be written.

    fields: field name -> encoded bytes, e.g. {"jpg": b"...", "cls": b"3", "json": b"{...}"}
    for tar shards; for Parquet shards, column name -> Python value.
    """

    key: str
    source: str
    fields: dict[str, object]


@dataclass(frozen=True, slots=True)
class EncodedSample:
    """One sample serialised as tar members, ready to append (``dataprep.formats.tar.writer.encode_sample``).

    Built where the sample is cleaned (a worker), so the writer only appends bytes.
    blob: header(s), data and padding of every field, in sorted field order.
    fields: field -> (offset of its data within ``blob``, data size in bytes).
    """

    key: str
    source: str
    blob: bytes
    fields: dict[str, tuple[int, int]]
