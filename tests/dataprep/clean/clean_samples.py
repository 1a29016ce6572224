"""Tiny photo-like images and hand-made broken files for the cleaning tests (imported by them)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

from tests.samples import encode

__all__ = ["decoded", "encode", "jpeg_bytes", "photo", "png_header_only"]


def photo(width: int = 96, height: int = 64, seed: int = 0) -> np.ndarray:
    """uint8 [H, W, 3]: smooth colour gradients plus grain, so JPEG scans hold real entropy-coded data."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([xx / width * 220 + 20, yy / height * 200 + 30, (xx + yy) / (width + height) * 160 + 60], axis=-1)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def jpeg_bytes(width: int = 96, height: int = 64, seed: int = 0, **params: object) -> bytes:
    return encode(Image.fromarray(photo(width, height, seed)), "JPEG", quality=90, **params)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` RGB pixels but holds no pixel data."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image
