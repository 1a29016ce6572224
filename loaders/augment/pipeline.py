"""``Augment``: the batched pipeline from collated uint8 images to model-ready tensors.

uint8 [B, H, W, C] (as collated, any device) -> float [B, C, H, W] in 0..1 -> each op
-> MixUp/CutMix (optional) -> Normalize (optional) -> ``out_dtype`` [B, C, H', W'] in
channels_last (or contiguous) memory format, on the input's device.

The work is memory-bound, so passes over the batch are what it costs: the uint8 -> float
conversion is one kernel, a ``RandomHorizontalFlip`` right after a ``RandomResizedCrop`` is
folded into the crop's resampling, and ``Normalize`` writes the output dtype and layout
directly. On CUDA with a half ``out_dtype`` the ops after the first resampling run in
float16 (half the bytes of float32; for values in 0..1 its spacing is at most 2^-11, an
eighth of an 8-bit level); resampling stays in float32, whose grid coordinates need it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from loaders.augment.base import BatchOp, TensorSpec, batch_generator, describe
from loaders.augment.color import Normalize
from loaders.augment.geometry import RandomHorizontalFlip, RandomResizedCrop
from loaders.augment.mix import CutMix, MixUp
from loaders.errors import ConfigError
from loaders.validate import check_int

__all__ = ["IMAGE_KEY", "LABEL_KEYS", "OUT_DTYPES", "Augment"]

IMAGE_KEY = "image"
# Keys tried in order for the labels of a dict batch ("cls" is the WebDataset field name).
LABEL_KEYS = ("label", "cls")
OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_HALF_DTYPES = (torch.float16, torch.bfloat16)

_Rebuild = Callable[[torch.Tensor, Any], Any]


class Augment:
    """Augments the images of a batch on their device with per-sample random parameters.

    ops: batch ops applied in order to float [B, C, H, W] in 0..1.
    seed: with the epoch and the batch position, the only source of randomness:
        the same (seed, epoch, batch_index) gives the same output however the batches
        were produced (see ``batch_generator``).
    out_dtype: float32, float16 or bfloat16. channels_last: output memory format.
    mean, std: if given, a final ``Normalize(mean, std)`` in 0..1 units.
    mixup: a ``MixUp`` or ``CutMix``, applied after the ops; needs labels in the batch.

    A batch is a uint8 [B, H, W, C] tensor, a dict with ``"image"`` (and labels under
    ``"label"`` or ``"cls"``), or a tuple/list (images, labels, ...). The same structure
    comes back with the images replaced and, with ``mixup``, the labels replaced by soft
    labels float32 [B, num_classes]; other entries are passed through.
    """

    def __init__(
        self,
        ops: Sequence[BatchOp],
        *,
        seed: int = 0,
        out_dtype: torch.dtype = torch.float32,
        channels_last: bool = True,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        mixup: MixUp | CutMix | None = None,
    ) -> None:
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
            raise ConfigError(f"'ops' must be a sequence of batch ops (got {describe(ops)})")
        for position, op in enumerate(ops):
            if not isinstance(op, BatchOp):
                raise ConfigError(
                    f"'ops[{position}]' must have __call__(images, gen) and output_spec(spec) (got {describe(op)})"
                )
        check_int("seed", seed, 0)
        if out_dtype not in OUT_DTYPES:
            raise ConfigError(
                f"'out_dtype' must be one of torch.float32, float16, bfloat16 (got {describe(out_dtype)})"
            )
        if not isinstance(channels_last, bool):
            raise ConfigError(f"'channels_last' must be a bool (got {describe(channels_last)})")
        if (mean is None) != (std is None):
            raise ConfigError("'mean' and 'std' must be given together (got only one of them)")
        if mixup is not None and not isinstance(mixup, (MixUp, CutMix)):
            raise ConfigError(f"'mixup' must be a MixUp, a CutMix or None (got {describe(mixup)})")
        self.ops: tuple[BatchOp, ...] = tuple(ops)
        self.seed = seed
        self.out_dtype = out_dtype
        self.channels_last = channels_last
        self.normalize = Normalize(mean, std) if mean is not None and std is not None else None
        self.mixup = mixup
        self._epoch = 0
        self._next_index = 0

    def set_epoch(self, epoch: int, start_index: int = 0) -> None:
        """Use ``epoch`` for the following batches, numbering them from ``start_index``.

        A loader resuming mid-epoch passes the number of batches already consumed, so the
        resumed batches get the parameters they would have had.
        """
        self._epoch = check_int("epoch", epoch, 0)
        self._next_index = check_int("start_index", start_index, 0)

    def __call__(self, batch: Any, *, epoch: int | None = None, batch_index: int | None = None,
                 rank: int = 0) -> Any:
        """Augment one batch (structure as in the class doc); returns the same structure.

        ``epoch`` defaults to the one set by ``set_epoch``; ``batch_index`` defaults to the
        number of calls without an explicit index since ``set_epoch``; ``rank`` is the
        distributed rank that reads the batch (the DataLoader passes all three).
        """
        images, labels, rebuild = _unpack(batch)
        if batch_index is None:
            batch_index = self._next_index
            self._next_index += 1
        gen = batch_generator(self.seed, self._epoch if epoch is None else epoch, batch_index, images.device, rank)
        out_images, out_labels = self.augment(images, labels, gen)
        return rebuild(out_images, out_labels)

    def augment(
        self, images: torch.Tensor, labels: torch.Tensor | None, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """uint8 [B, H, W, C] (+ labels) -> (out_dtype [B, C, H', W'], labels or soft labels)."""
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ConfigError(f"Augment expects uint8 images [B, H, W, C] (got {images.dtype} {tuple(images.shape)})")
        compute = torch.float16 if images.device.type == "cuda" and self.out_dtype in _HALF_DTYPES else torch.float32
        steps = _fuse_flips(self.ops)
        resamples_first = bool(steps) and isinstance(steps[0][0], RandomResizedCrop)
        floats = _unit_floats(images, torch.float32 if resamples_first else compute)
        for op, flip in steps:
            floats = op(floats, gen) if flip is None else _crop_and_flip(op, flip, floats, gen)
            floats = floats.to(compute)
        if self.mixup is not None:
            if labels is None:
                raise ConfigError(
                    f"mixup needs labels: pass (images, labels) or a dict with one of {LABEL_KEYS} (got images only)"
                )
            floats, labels = self.mixup(floats, labels, gen)
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        if self.normalize is None:
            return floats.to(dtype=self.out_dtype, memory_format=layout), labels
        out = torch.empty(floats.shape, dtype=self.out_dtype, device=floats.device, memory_format=layout)
        return self.normalize.apply(floats, out=out), labels

    def output_spec(self, input_spec: TensorSpec) -> TensorSpec:
        """The images' output spec for input uint8 [B, H, W, C] (B may be -1)."""
        if input_spec.dtype != torch.uint8 or len(input_spec.shape) != 4:
            raise ConfigError(f"Augment expects a uint8 [B, H, W, C] spec (got {input_spec})")
        batch, height, width, channels = input_spec.shape
        spec = TensorSpec((batch, channels, height, width), torch.float32)
        for op in self.ops:
            spec = op.output_spec(spec)
        return TensorSpec(spec.shape, self.out_dtype)


def _fuse_flips(ops: tuple[BatchOp, ...]) -> tuple[tuple[BatchOp, RandomHorizontalFlip | None], ...]:
    """The ops as steps: a RandomHorizontalFlip right after a RandomResizedCrop joins it."""
    steps: list[tuple[BatchOp, RandomHorizontalFlip | None]] = []
    for op in ops:
        if isinstance(op, RandomHorizontalFlip) and steps and isinstance(steps[-1][0], RandomResizedCrop) \
                and steps[-1][1] is None:
            steps[-1] = (steps[-1][0], op)
        else:
            steps.append((op, None))
    return tuple(steps)


def _crop_and_flip(crop: BatchOp, flip: RandomHorizontalFlip, images: torch.Tensor,
                   gen: torch.Generator) -> torch.Tensor:
    """Both ops in one resampling, their parameters drawn in the order the two calls draw them."""
    assert isinstance(crop, RandomResizedCrop)  # _fuse_flips pairs nothing else
    batch, _, height, width = images.shape
    params = crop.sample_params(batch, gen, height, width)
    return crop.apply(images, params, flip=flip.sample_params(batch, gen))


def _unit_floats(images: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """uint8 [B, H, W, C] -> ``dtype`` [B, C, H, W] / 255 in channels_last memory, in one kernel."""
    # The permuted view is NCHW in channels_last strides: read and written in memory order.
    nchw = images.permute(0, 3, 1, 2)
    out = torch.empty(nchw.shape, dtype=dtype, device=images.device, memory_format=torch.channels_last)
    return torch.div(nchw, 255.0, out=out)


def _unpack(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None, _Rebuild]:
    """Split a batch into (images, labels or None, a function putting new ones back)."""
    if isinstance(batch, torch.Tensor):
        return batch, None, lambda images, labels: images
    if isinstance(batch, Mapping):
        if IMAGE_KEY not in batch:
            raise ConfigError(f"Augment needs the images under {IMAGE_KEY!r} (got keys {sorted(map(str, batch))})")
        label_key = next((key for key in LABEL_KEYS if key in batch), None)

        def rebuild_mapping(images: torch.Tensor, labels: torch.Tensor | None) -> Any:
            out = dict(batch)
            out[IMAGE_KEY] = images
            if label_key is not None:
                out[label_key] = labels
            mapping_type: Any = type(batch)  # a dict subclass, an OrderedDict, or a Mapping of the user's
            try:
                return mapping_type(out)
            except TypeError:
                return out

        return batch[IMAGE_KEY], batch[label_key] if label_key is not None else None, rebuild_mapping
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        has_labels = len(batch) > 1 and isinstance(batch[1], torch.Tensor)

        def rebuild_sequence(images: torch.Tensor, labels: torch.Tensor | None) -> Any:
            items = [images, labels, *batch[2:]] if has_labels else [images, *batch[1:]]
            return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)

        return batch[0], batch[1] if has_labels else None, rebuild_sequence
    raise ConfigError(
        f"Augment takes a uint8 [B, H, W, C] tensor, a dict with {IMAGE_KEY!r} or a tuple (images, labels, ...) "
        f"(got {type(batch).__name__})"
    )
