"""The device decode as a stage of the chain (``decode="device"``): ``Item``s with encoded images -> decoded ones.

Runs inside the device prefetcher's transform, on its side stream, before the user's device
transform: ``loaders.batch_decode.DeviceDecode`` turns each ``EncodedBatch`` of the item's
batch into uint8 [B, H, W, 3] on the device. A sample that no decoder can decode (rare: the
worker already decoded what the device decoder cannot take, and the CPU path retries what it
failed on) follows the loader's error policy as the CPU path would: with ``on_error="raise"``
the batch becomes ``Failed`` (raised in its turn, the pass goes on); with ``"skip"`` its rows
leave the batch and it is counted in the item's ``Delivery``, so the skip budget and the
resume state count it exactly as they count a skip in a worker.

``loader.stats().decode`` (``DecodeStats``) reports where samples were decoded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from loaders.batch_decode.choice import DecodeMode
from loaders.batch_decode.decoders import make_decoder
from loaders.batch_decode.device_decode import DecodeCounts, DeviceDecode, SampleFailure
from loaders.batch_decode.resample import host_to_device
from loaders.loader.failures import NO_BATCH, Failed, Item, is_batch
from loaders.loader.fetch import Skip
from loaders.loader.messages import describe_error
from loaders.loader.settings import LoaderSettings

__all__ = ["DecodeStage", "DecodeStats", "decode_stage", "decode_stats", "select_rows"]


@dataclass(frozen=True)
class DecodeStats:
    """Where a loader decodes its JPEGs and how many samples went where.

    mode: "cpu" (in the workers) or "device"; reason: why (the ``decode="auto"`` rule's words);
    decoder: the batch decoder, library and backend ("nvImageCodec 0.9, hardware", "nvImageCodec 0.9, CPU"),
    None for "cpu". counts: samples decoded since the loader was made (``DecodeCounts``: on the
    device, in the worker by reason, retried on the host, failed); counted as batches are
    decoded, up to ``device_prefetch`` batches ahead of the training loop.
    """

    mode: str
    reason: str
    decoder: str | None = None
    counts: DecodeCounts = field(default_factory=DecodeCounts)


class DecodeStage:
    """``Item`` -> ``Item`` with its encoded images decoded on the device (see the module docstring)."""

    def __init__(self, decode: DeviceDecode, *, skip_errors: bool) -> None:
        self.decode = decode
        self.skip_errors = skip_errors

    def __call__(self, item: Item) -> Item:
        if not is_batch(item):
            return item
        batch, failures = self.decode.decode(item.batch)
        if not failures:
            return item._replace(batch=batch)
        if not self.skip_errors:
            error = failures[0].error
            error.add_note(f"while decoding batch {item.position} on {self.decode.device} "
                           f"({self.decode.decoder.name}); the CPU path failed on it too")
            return item._replace(batch=Failed(error))
        return self._without(item, batch, failures)

    def _without(self, item: Item, batch: Any, failures: Sequence[SampleFailure]) -> Item:
        """The item with the failed samples' rows left out and counted as skips."""
        size = item.delivery.num_samples
        failed = {f.row for f in failures}
        keep = [row for row in range(size) if row not in failed]
        skips = tuple(Skip(f.index, describe_error(f.error)) for f in failures)
        delivery = replace(item.delivery, num_samples=len(keep), skips=item.delivery.skips + skips)
        return Item(item.position, select_rows(batch, keep, size) if keep else NO_BATCH, delivery)

    def close(self, *, wait: bool = True) -> None:
        """Stop the decoder's threads (``wait``: join them)."""
        self.decode.close(wait=wait)


def decode_stage(settings: LoaderSettings) -> DecodeStage | None:
    """The device decode stage with ``decode="device"`` (its decoder starts no thread until used)."""
    if settings.decode is not DecodeMode.DEVICE or settings.device is None:
        return None
    return DecodeStage(DeviceDecode(settings.device, make_decoder(settings.device)), skip_errors=settings.skip_errors)


def decode_stats(settings: LoaderSettings, stage: DecodeStage | None) -> DecodeStats:
    """``stats().decode`` for a loader of ``settings`` with the decode ``stage`` (``loaders.loader.loader_stats``)."""
    mode, reason = settings.decode.value, settings.decode_reason
    if stage is None:
        return DecodeStats(mode=mode, reason=reason)
    decode = stage.decode
    return DecodeStats(mode=mode, reason=reason, decoder=decode.decoder.name, counts=decode.counts())


def select_rows(batch: Any, keep: Sequence[int], size: int) -> Any:
    """``batch`` (a collated batch of ``size`` samples) with only the samples at ``keep``: every tensor
    whose first dimension is ``size`` and every list or tuple of ``size`` leaves, in dicts, lists,
    tuples and namedtuples."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() and batch.shape[0] == size:
            return batch.index_select(0, host_to_device(np.array(keep, dtype=np.int64), batch.device))
        return batch
    if isinstance(batch, Mapping):
        mapping_type: Any = type(batch)  # a dict or a subclass of it, as collate made it
        return mapping_type({key: select_rows(value, keep, size) for key, value in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(select_rows(value, keep, size) for value in batch))
    if isinstance(batch, (list, tuple)):
        if len(batch) == size and not any(isinstance(v, (torch.Tensor, Mapping, list, tuple)) for v in batch):
            return type(batch)(batch[row] for row in keep)
        return type(batch)(select_rows(value, keep, size) for value in batch)
    return batch
