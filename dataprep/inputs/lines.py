"""The lines of a RAW file, plain or compressed, with bounded memory: a line over the record limit is skipped
in pieces, never held whole, and a damaged compressed stream ends the file with its ``StreamDamage``.

``read_lines`` yields, in file order, each line's bytes (its ``\\n`` kept, so that callers count offsets), a
``LongLine`` for a line whose bytes before its ``\\n`` exceed ``max_record_bytes``, and, when a compressed
file is damaged, a last ``StreamDamage``. The partial line the damage cuts is not yielded: it is not a
complete record. Lines decoded before the damage are all yielded: when a decoder fails, the file is read
again (``compressed.ExactRead``), up to what was already handed on and then byte by byte, so the decoder
hands on everything it can decode before the damage and the damage's offset is its byte (a damaged file is
rare; it costs one more reading).

``read_whole`` is the same for a file read as one record (``--text-unit file``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dataprep.inputs.compressed import DECODER_ERRORS, ExactRead, StreamDamage, open_input

# --max-record-bytes' default: a record (a line, a row, a text file) longer than this is a record_too_long reject.
DEFAULT_MAX_RECORD_BYTES = 64 * 2**20
_SKIP_BYTES = 1 * 2**20  # a long line is skipped this many bytes at a time
_NEWLINE = ord("\n")


@dataclass(frozen=True, slots=True)
class LongLine:
    """A line longer than the record limit, skipped without being held: ``nbytes`` it takes in the stream,
    its ``\\n`` included when ``terminated``; ``odd_quotes``: it holds an odd number of ``"`` (it opens or
    closes a quoted CSV field: a CSV reader is then told so, and stays in step)."""

    nbytes: int
    terminated: bool
    odd_quotes: bool = False

    @property
    def record_bytes(self) -> int:
        """The line's bytes before its ``\\n``."""
        return self.nbytes - self.terminated


Line = bytes | LongLine | StreamDamage


@dataclass(slots=True)
class _Progress:
    """Decompressed bytes of the lines handed on so far (what a second reading skips)."""

    consumed: int = 0
    stop_at: int | None = None  # decompressed bytes in: no line starting there or later is read
    damage: StreamDamage | None = None


def read_lines(path: Path, max_record_bytes: int, *, start: int = 0, end: int | None = None) -> Iterator[Line]:
    """The lines of ``path`` that start in bytes [``start``, ``end``) (``end`` None: to the end of the file).

    start: a line start of a plain file (0 for a compressed one, read whole). Yields bytes (a line, ``\\n``
    included when present), ``LongLine`` (a line whose bytes before ``\\n`` exceed ``max_record_bytes``), and
    a final ``StreamDamage`` for a damaged compressed file. OSError: the file cannot be read (not damage).
    """
    progress = _Progress(stop_at=None if end is None else end - start)
    with open_input(path, start=start) as src:
        try:
            yield from _line_items(src.stream, max_record_bytes, progress)
        except DECODER_ERRORS as err:
            progress.damage = src.damage(err)
            if progress.damage is None:
                raise
            exact = ExactRead(src.piece_start, progress.consumed)
        else:
            if (damage := src.end_damage()) is not None:
                yield damage
            return
    yield from _lines_before_damage(path, max_record_bytes, progress, exact)


def _lines_before_damage(path: Path, max_record_bytes: int, progress: _Progress, exact: ExactRead) -> Iterator[Line]:
    """A damaged file read again: what was handed on skipped, then byte by byte up to the damage, and its damage."""
    first = progress.damage
    with open_input(path, exact=exact) as src:
        try:
            _skip(src.stream, progress.consumed)
            yield from _line_items(src.stream, max_record_bytes, progress)
        except DECODER_ERRORS as err:
            if (damage := src.damage(err)) is None:
                raise
            yield damage
            return
    if first is not None:  # the second reading did not fail where the first did: report the first
        yield first


def _skip(stream: BinaryIO, nbytes: int) -> None:
    while nbytes > 0:
        chunk = stream.read(min(nbytes, _SKIP_BYTES))
        if not chunk:
            return
        nbytes -= len(chunk)


def _line_items(stream: BinaryIO, max_record_bytes: int, progress: _Progress) -> Iterator[bytes | LongLine]:
    readline, limit = stream.readline, max_record_bytes + 1
    stop_at = progress.stop_at if progress.stop_at is not None else sys.maxsize
    consumed = progress.consumed  # a local in the loop (per-line cost), told to ``progress`` however it ends
    try:
        while consumed < stop_at and (line := readline(limit)):
            if len(line) == limit and line[-1] != _NEWLINE:
                long = _skip_line(readline, line)
                consumed += long.nbytes
                yield long
                continue
            consumed += len(line)
            yield line
    finally:
        progress.consumed = consumed


def _skip_line(readline: Callable[[int], bytes], head: bytes) -> LongLine:
    """A long line read and dropped ``_SKIP_BYTES`` at a time; ``head``: its start, already read."""
    read, quotes = len(head), head.count(b'"')
    while chunk := readline(_SKIP_BYTES):
        read, quotes = read + len(chunk), quotes + chunk.count(b'"')
        if chunk.endswith(b"\n"):
            return LongLine(read, True, quotes % 2 == 1)
    return LongLine(read, False, quotes % 2 == 1)


def read_whole(path: Path, max_record_bytes: int) -> bytes | LongLine | StreamDamage:
    """A whole file as one record: its bytes, or ``LongLine`` when over ``max_record_bytes`` (not read past the
    limit), or the ``StreamDamage`` of a damaged compressed file. OSError: the file cannot be read."""
    with open_input(path) as src:
        try:
            data = src.stream.read(max_record_bytes + 1)
        except DECODER_ERRORS as err:
            if (damage := src.damage(err)) is None:
                raise
            exact = ExactRead(src.piece_start, max_record_bytes + 1)  # the decoded bytes do not matter here
        else:
            if len(data) > max_record_bytes:
                return LongLine(len(data), False)
            return src.end_damage() or data
    return _exact_damage(path, exact) or damage


def _exact_damage(path: Path, exact: ExactRead) -> StreamDamage | None:
    """The damage of a compressed file read again, one compressed byte at a time over the failing piece: its byte."""
    with open_input(path, exact=exact) as src:
        try:
            while src.stream.read(_SKIP_BYTES):
                pass
        except DECODER_ERRORS as err:
            if (damage := src.damage(err)) is None:
                raise
            return damage
    return None


def describe_long(long: LongLine, max_record_bytes: int, *, whole_file: bool = False) -> str:
    """The detail of a ``record_too_long`` reject."""
    if whole_file:
        return (f"the file holds more than {max_record_bytes} bytes (--max-record-bytes); read up to the limit, "
                "not further")
    return f"{long.record_bytes} bytes, over --max-record-bytes {max_record_bytes}; skipped without being held"

