"""A JPEG's frame header, read from its markers alone: coding, precision, size, components, sampling, EOI.

Pure and cheap (a walk over the marker segments up to the first scan, then one ``rfind``):
what the worker needs to tell, without decoding, whether a device decoder can take the
JPEG (``loaders.read.decode_plan``). Inside entropy-coded data every 0xFF byte is stuffed
(followed by 0x00), so an ``FF D9`` after the first scan's header can only be the EOI
marker: a file truncated in its scans has none.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HUFFMAN_FRAMES", "JpegFrame", "read_frame"]

SOI, SOS, EOI_BYTES = 0xD8, 0xDA, b"\xff\xd9"
# Start-of-frame markers: C0-CF less DHT (C4), JPG (C8) and DAC (CC).
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
HUFFMAN_FRAMES = frozenset({0xC0, 0xC1, 0xC2})  # baseline, extended sequential, progressive (Huffman coded)
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})  # TEM, RSTn, SOI: no length field


@dataclass(frozen=True, slots=True)
class JpegFrame:
    """What the frame header says. sof: the start-of-frame marker (0xC0 baseline ... 0xCF);
    precision: bits per sample; height, width: pixels; sampling: (horizontal, vertical) factors
    per component, in order; has_eoi: an EOI marker follows the first scan header."""

    sof: int
    precision: int
    height: int
    width: int
    sampling: tuple[tuple[int, int], ...]
    has_eoi: bool

    @property
    def components(self) -> int:
        return len(self.sampling)


def read_frame(data: bytes) -> JpegFrame | None:
    """The frame of the JPEG ``data``, or None where its markers do not lead to a frame and a scan."""
    if data[:2] != b"\xff\xd8":
        return None
    at, size, frame = 2, len(data), None
    while at + 4 <= size:
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker in _STANDALONE:
            at += 2
            continue
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if length < 2 or at + 2 + length > size:
            return None
        if marker in _SOF_MARKERS:
            frame = _frame(marker, data[at + 4:at + 2 + length])
            if frame is None:
                return None
        elif marker == SOS:
            if frame is None:
                return None
            return JpegFrame(*frame, has_eoi=data.rfind(EOI_BYTES) > at)
        at += 2 + length
    return None


def _frame(marker: int, body: bytes) -> tuple[int, int, int, int, tuple[tuple[int, int], ...]] | None:
    """(sof, precision, height, width, sampling) of a start-of-frame segment's body."""
    if len(body) < 6:
        return None
    count = body[5]
    if len(body) < 6 + 3 * count:
        return None
    sampling = tuple((body[7 + 3 * c] >> 4, body[7 + 3 * c] & 0x0F) for c in range(count))
    return marker, body[0], int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big"), sampling
