"""Compressed files as the tools that ship corpora write them, and what a decoder reads of a damaged one.

Independent of dataprep: the standard library's codecs (and ``backports.zstd`` before Python 3.14),
so that the tests compare dataprep's reading with another reading of the same bytes.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib

try:
    from compression import zstd
except ImportError:
    from backports import zstd

CODECS = ("gzip", "zstd", "bzip2", "xz")
EXTENSIONS = {"gzip": "gz", "zstd": "zst", "bzip2": "bz2", "xz": "xz"}


def compress(data: bytes, codec: str) -> bytes:
    """``data`` as ``gzip -6``, ``zstd -3`` (with its frame checksum, as the zstd tool writes), ``bzip2 -9``
    or ``xz -6`` write it (gzip with mtime 0, so that the bytes do not depend on the clock)."""
    if codec == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == "zstd":
        return zstd.compress(data, options={zstd.CompressionParameter.compression_level: 3,
                                            zstd.CompressionParameter.checksum_flag: 1})
    if codec == "bzip2":
        return bz2.compress(data, 9)
    if codec == "xz":
        return lzma.compress(data, preset=6)
    raise ValueError(f"unknown codec {codec!r}")


def decoded_prefix(data: bytes, codec: str) -> bytes:
    """What a streaming decoder gives from ``data``, the start of a compressed file (one member or frame),
    before the data ends or stops decoding."""
    decoders = {"gzip": lambda: zlib.decompressobj(wbits=31), "zstd": zstd.ZstdDecompressor,
                "bzip2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor}
    decoder = decoders[codec]()
    out = []
    step = 256
    for i in range(0, len(data), step):
        try:
            out.append(decoder.decompress(data[i:i + step]))
        except (OSError, EOFError, zlib.error, lzma.LZMAError, zstd.ZstdError):
            break
    return b"".join(out)


def complete_lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` that end in ``\\n`` (without it): a line the end cuts is not complete."""
    return data.split(b"\n")[:-1]
