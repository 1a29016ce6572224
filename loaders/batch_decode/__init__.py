"""loaders.batch_decode: JPEG decoded a batch at a time on the loader's device (``DataLoader(decode="device")``).

Modules (see README.md):
    choice         ``DecodeMode`` and the rule that resolves ``decode="auto"`` (pure)
    encoded_batch  ``EncodedBatch``: one field's JPEG bytes in one buffer, offsets, crop boxes, flips
    decoders       the batch decoder: nvImageCodec, each JPEG only in its region (hardware, GPU, hybrid, CPU backends)
    geometry       pure host geometry: each sample's window and Pillow's filter taps; chunks under budgets
    resample       batched crop + resize in tensor ops (Pillow's filters, two matrix products per chunk)
    device_decode  ``DeviceDecode``: a batch's encoded fields -> uint8 [B, H, W, 3] on the device; counters
"""

from __future__ import annotations

from loaders.batch_decode.choice import DecodeChoice, DecodeMode, choose_decode
from loaders.batch_decode.decoders import (
    DecodeBackend,
    NvImageCodecDecoder,
    backend_for,
    device_decoder_problem,
    make_decoder,
)
from loaders.batch_decode.device_decode import DecodeCounts, DecodeLimits, DeviceDecode, SampleFailure
from loaders.batch_decode.encoded_batch import EncodedBatch, pack_encoded

__all__ = [
    "DecodeBackend",
    "DecodeChoice",
    "DecodeCounts",
    "DecodeLimits",
    "DecodeMode",
    "DeviceDecode",
    "EncodedBatch",
    "NvImageCodecDecoder",
    "SampleFailure",
    "backend_for",
    "choose_decode",
    "device_decoder_problem",
    "make_decoder",
    "pack_encoded",
]
