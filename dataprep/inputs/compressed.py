"""Compressed RAW files read as streams (gzip, zstandard, bzip2, xz): never to disk, never whole in memory.

``open_input(path)`` opens a file of RAW for reading; when its name ends in a compression extension
(``names.COMPRESSION_EXTENSIONS``: ``.gz``, ``.zst``, ``.bz2``, ``.xz``) its bytes are decompressed on the fly.
The ``InputStream`` it yields has a binary ``stream`` (``readline(limit)`` bounds what one call holds) and
tells a decoder's error on damaged data from an I/O error (``damage``). Every codec reads concatenated
members, frames or streams to the end (``cat a.gz b.gz``, ``pigz``, ``zstd -T``), as its command-line tool does.

Libraries (declared in pyproject.toml; speeds in tools/RESULTS.md §19):

- gzip: ``isal.igzip`` (ISA-L: 3.5x zlib's rate on the 2-core VM), else the standard library's ``gzip``;
- zstd: the standard library's ``compression.zstd`` (Python 3.14; ``backports.zstd``, the same code, before).
  Not ``zstandard``: its bounded readers (``stream_reader``, ``read_to_iter``; 0.25) end a truncated frame
  as if it were complete, and its ``decompressobj`` cannot bound its output (a run of one byte expands
  32,768-fold), so with it damage would go unnoticed or a long record would be held whole;
- bzip2, xz: the standard library's ``bz2`` and ``lzma``.

Damage: a decoder that finds its data truncated (the file ends before the end-of-stream marker) or corrupt
raises; ``InputStream.damage`` turns that error into a ``StreamDamage`` (codec, compressed byte offset, the
decoder's words) and an I/O error of the file itself into None (the caller's ``unreadable``). A decoder's
failing call loses what it decoded in that call, so a damaged file is read a second time (``ExactRead``):
the same bytes up to what the first reading handed on, then one decoded byte asked at a time and, over the
compressed piece where the first reading failed, one compressed byte given at a time. The second reading
hands on all the decoder can decode before the damage and finds it at its byte: a truncated file's size,
or the byte where the decoder failed. A codec that checks a checksum only at the end of a member or block
(gzip's CRC-32 per member, bzip2's and xz's per block, zstd's per frame) finds there a corrupt stretch that
still decodes, after handing on what it decoded from it.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from dataprep.inputs.names import codec_of

try:  # Python 3.14 has it in the standard library
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]  # 3.14 and later only
except ImportError:
    from backports import zstd  # type: ignore[no-redef,unused-ignore]  # the same module before 3.14

_ISAL_ERRORS: tuple[type[BaseException], ...] = ()
try:
    from isal import igzip, isal_zlib

    _ISAL_ERRORS = (cast("type[BaseException]", isal_zlib.IsalError),)  # its stub calls the class an instance
except ImportError:  # isal has wheels for the common platforms; elsewhere zlib reads gzip, ~3.5x slower
    igzip = None  # type: ignore[assignment]  # a module or None: _gzip asks which

# Compressed bytes the decoder reads at a time, and decompressed bytes asked of it at a time: a first reading
# loses at most one such step before damage, which the second reading (``ExactRead``) goes over byte by byte.
PIECE_BYTES = 64 * 2**10
DECODE_STEP_BYTES = 256 * 2**10
_STREAM_BUFFER_BYTES = 1 * 2**20
_PLAIN_BUFFER_BYTES = 256 * 2**10

GZIP_BACKEND = "isal" if igzip is not None else "zlib"

# What the decoders raise on truncated or corrupt data (and OSError: the file's own I/O errors, told apart).
DECODER_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, lzma.LZMAError, zstd.ZstdError,
                                                   *_ISAL_ERRORS)


@dataclass(frozen=True, slots=True)
class StreamDamage:
    """Where a compressed file could not be decoded.

    codec: 'gzip', 'zstd', 'bzip2' or 'xz'; offset: compressed bytes the decoder had read when it found the
    damage (module doc); size: the compressed file's bytes; error: the decoder's words; truncated: the data
    ends before its end-of-stream marker (else it is corrupt).
    """

    codec: str
    offset: int
    size: int
    error: str
    truncated: bool

    def describe(self, records: int) -> str:
        """The detail of a ``corrupt_compressed`` reject: what, where, and how many ``records`` were read before it."""
        what = "ends early (truncated)" if self.truncated else "is corrupt"
        return (f"{self.codec} data {what}: found at compressed byte {self.offset} of {self.size} ({self.error}); "
                f"{records} records read before it, each kept or rejected on its own; nothing after it is read")


@dataclass(frozen=True, slots=True)
class ExactRead:
    """Where a second reading of a damaged file goes one byte at a time (module doc).

    compressed_from: compressed bytes in, where the decoder is then given one byte at a time (the start of
    the piece where the first reading failed); decoded_from: decompressed bytes in (what the first reading
    handed on), from which one byte at a time is asked of the decoder.
    """

    compressed_from: int
    decoded_from: int


class _CountingSource(io.RawIOBase):
    """A compressed file as its decoder reads it, the bytes read counted: ``PIECE_BYTES`` at a time, one at a
    time from ``exact_from`` on."""

    def __init__(self, raw: io.RawIOBase, exact_from: int | None) -> None:
        super().__init__()
        self._raw = raw
        self._exact_from = exact_from
        self.offset = 0  # compressed bytes handed to the decoder
        self.piece_start = 0  # where the last piece read started
        self.io_error: OSError | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # any writable buffer, as io's
        exact = self._exact_from is not None and self.offset >= self._exact_from
        view = memoryview(buffer).cast("B")[:1 if exact else PIECE_BYTES]
        try:
            n = self._raw.readinto(view) or 0
        except OSError as err:
            self.io_error = err  # the file's own failure, not damage: told apart by ``InputStream.damage``
            raise
        self.piece_start = self.offset
        self.offset += n
        return n


class _Decoded(io.RawIOBase):
    """A decoder's output as a raw stream: a read returns what one step of the decoder gives (at most
    ``DECODE_STEP_BYTES``; one byte from ``exact_from`` on), so that what it decodes before damage is handed
    on, not lost with a half-filled buffer."""

    def __init__(self, decoder: io.BufferedIOBase, exact_from: int | None) -> None:
        super().__init__()
        self._decoder = decoder
        self._exact_from = exact_from
        self._position = 0  # decompressed bytes handed on

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # any writable buffer, as io's
        step = DECODE_STEP_BYTES
        if self._exact_from is not None:  # up to the exact stretch in steps, never across its start
            step = min(step, self._exact_from - self._position) if self._position < self._exact_from else 1
        n = self._decoder.readinto1(memoryview(buffer).cast("B")[:step])
        self._position += n
        return n


def _gzip(source: IO[bytes]) -> BinaryIO:
    if igzip is not None:
        return cast(BinaryIO, igzip.IGzipFile(fileobj=source, mode="rb"))
    return cast(BinaryIO, gzip.GzipFile(fileobj=source, mode="rb"))


_DECODERS: dict[str, Callable[[IO[bytes]], BinaryIO]] = {
    "gzip": _gzip,
    "zstd": lambda source: cast(BinaryIO, zstd.ZstdFile(source, mode="rb")),
    "bzip2": lambda source: cast(BinaryIO, bz2.BZ2File(source, mode="rb")),
    "xz": lambda source: cast(BinaryIO, lzma.LZMAFile(source, mode="rb")),
}


@dataclass(frozen=True)
class InputStream:
    """A RAW file open for reading (``open_input``): ``stream`` gives its bytes, decompressed when it is compressed.

    path: the file; codec: its codec from its name, or None; size: its bytes on disk.
    """

    path: Path
    codec: str | None
    size: int
    stream: BinaryIO
    _source: _CountingSource | None = None

    def damage(self, error: BaseException) -> StreamDamage | None:
        """The damage a decoder's ``error`` reports; None when the error is not damage (an I/O error, a plain file)."""
        source = self._source
        if source is None or self.codec is None or error is source.io_error:
            return None
        if not isinstance(error, DECODER_ERRORS):
            return None
        truncated = isinstance(error, EOFError)
        return StreamDamage(self.codec, source.offset, self.size, str(error) or type(error).__name__, truncated)

    @property
    def piece_start(self) -> int:
        """Where the last piece of compressed bytes the decoder read starts (0 for a plain file)."""
        return self._source.piece_start if self._source is not None else 0

    def end_damage(self) -> StreamDamage | None:
        """At the end of the stream: damage when a compressed file held no data at all (0 bytes), else None."""
        if self.codec is None or self.size > 0:
            return None
        return StreamDamage(self.codec, 0, 0, f"the file is empty: it holds no {self.codec} stream", True)


@contextmanager
def open_input(path: Path, *, start: int = 0, exact: ExactRead | None = None) -> Iterator[InputStream]:
    """``path`` open for reading from byte ``start`` (a plain file only: a compressed one is read from its start).

    The codec comes from the name (``names.codec_of``). ``exact``: a second reading of a damaged compressed
    file (module doc). Raises OSError when the file cannot be opened, ValueError for a ``start`` inside a
    compressed file (it cannot be entered but at its start).
    """
    codec = codec_of(os.fspath(path))
    if codec is not None and start:
        raise ValueError(f"{path}: a {codec} file is read from its start (got start={start})")
    with open(path, "rb", buffering=0 if codec else _PLAIN_BUFFER_BYTES) as raw:
        size = os.fstat(raw.fileno()).st_size
        if codec is None:
            if start:
                raw.seek(start)
            yield InputStream(path, None, size, raw)
            return
        source = _CountingSource(cast(io.RawIOBase, raw), exact.compressed_from if exact else None)
        with _DECODERS[codec](cast(IO[bytes], source)) as decoder:
            # A buffer of its own: the decoders' readline fills an 8 KiB buffer at a time (many small calls).
            decoded = _Decoded(cast(io.BufferedIOBase, decoder), exact.decoded_from if exact else None)
            stream = io.BufferedReader(decoded, buffer_size=_STREAM_BUFFER_BYTES)
            yield InputStream(path, codec, size, stream, source)
