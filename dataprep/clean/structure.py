"""Container checks that decoders skip: JPEG marker structure and PNG chunk CRCs.

Pillow decodes a JPEG cut in half and padded with an EOI marker without complaint, and
checks neither the CRC of a PNG's pixel data nor that its IEND chunk comes. These walks
read no pixels: they cost one pass over the bytes (a regex search through each JPEG
scan, ``zlib.crc32`` over each PNG chunk).
"""

from __future__ import annotations

import re
import zlib

from dataprep.inputs.records import RejectReason

Problem = tuple[RejectReason, str]  # (TRUNCATED | CORRUPT, what and where, with byte offsets)

_EOI = b"\xff\xd9"
# Entropy-coded data ends at the first 0xFF not followed by a stuffed 0x00 or an RSTn marker.
_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7]")
_STANDALONE_MARKERS = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RST0..RST7: no length field


def jpeg_structure_problem(data: bytes) -> Problem | None:
    """Walk a JPEG's markers: (TRUNCATED | CORRUPT, detail) if they are broken, else None.

    Every segment must fit in the data, every scan's entropy-coded data must end in a
    marker, and an EOI marker must follow the last scan. Bytes after EOI are allowed
    (cameras append data there; MPO files hold further frames). A walk that runs off the
    end of data which does end in EOI was misled by a damaged marker: CORRUPT, not TRUNCATED.
    """
    problem = _walk_jpeg(data)
    if problem is not None and problem[0] is RejectReason.TRUNCATED and data.rstrip(b"\0").endswith(_EOI):
        return RejectReason.CORRUPT, f"damaged marker: {problem[1]}, yet the data ends with an EOI marker"
    return problem


def _walk_jpeg(data: bytes) -> Problem | None:
    size, pos, scans = len(data), 2, 0
    while True:
        if pos + 2 > size:
            where = f"in scan {scans}" if scans else "in the header"
            return RejectReason.TRUNCATED, f"JPEG data ends at byte {size} {where}, before the EOI marker"
        if data[pos] != 0xFF:
            return RejectReason.CORRUPT, f"expected a JPEG marker at byte {pos}, found 0x{data[pos]:02x}"
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
        elif marker == 0xD9:
            return None if scans else (RejectReason.CORRUPT, f"EOI marker at byte {pos} before any scan")
        elif marker in _STANDALONE_MARKERS:
            pos += 2
        elif marker == 0x00:
            return RejectReason.CORRUPT, f"stuffed byte 0xff00 at byte {pos} outside a scan"
        elif pos + 4 > size:
            return RejectReason.TRUNCATED, f"JPEG data ends at byte {size} inside a marker segment"
        else:
            pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
            if marker == 0xDA:  # SOS: skip the entropy-coded data that follows its header
                scans += 1
                match = _SCAN_END.search(data, pos) if pos <= size else None
                pos = match.start() if match is not None else size


def png_structure_problem(data: bytes) -> Problem | None:
    """Walk a PNG's chunks: (TRUNCATED | CORRUPT, detail) if one fails its CRC or IEND is missing, else None."""
    view, size, pos, has_idat = memoryview(data), len(data), 8, False
    while pos + 12 <= size:
        kind = bytes(view[pos + 4 : pos + 8])
        end = pos + 12 + int.from_bytes(view[pos : pos + 4], "big")
        if end > size:
            return (RejectReason.TRUNCATED,
                    f"PNG chunk {kind!r} at byte {pos} ends at byte {end}, past the end of the data")
        if zlib.crc32(view[pos + 4 : end - 4]) != int.from_bytes(view[end - 4 : end], "big"):
            return RejectReason.CORRUPT, f"PNG chunk {kind!r} at byte {pos} fails its CRC check"
        has_idat = has_idat or kind == b"IDAT"
        if kind == b"IEND":
            return None if has_idat else (RejectReason.CORRUPT, "PNG has no IDAT (pixel data) chunk")
        pos = end
    return RejectReason.TRUNCATED, f"PNG data ends at byte {size} before the IEND chunk"
