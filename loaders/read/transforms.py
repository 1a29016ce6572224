"""Per-sample CPU transforms: encoded fields -> uint8 arrays and ints, randomness from a given rng.

A transform maps a sample dict (``{"__key__": str, "__index__": int, "jpg": bytes,
"cls": b"3", ...}``) to a new dict; the input is never modified. Image transforms
replace the encoded field with ``out_field``: uint8 [H, W, 3] RGB, C-contiguous, CPU.
Every random decision draws from the ``rng`` the dataset passes in (keyed by seed,
epoch and sample index), so a sample's augmentation is reproducible and resumable.

Crop-and-resize transforms fuse decode, crop and resize (``loaders.read.decode``): the crop
is drawn from the header's size alone, then the JPEG decodes at the smallest DCT scale
that still covers the output resolution. Inside ``loaders.read.decode_plan.planning()``
(``DataLoader(decode="device")``) the image transforms draw the same crop and flip and
return an ``EncodedImage`` (the bytes and that plan) for the loader's device decoder.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np

from loaders.errors import ConfigError, SampleError
from loaders.read.decode import (
    Backend,
    Interpolation,
    decode_crop_resize,
    decode_rgb,
    image_size,
    pil_filter,
    resolve_backend,
)
from loaders.read.decode_plan import is_planning, plan_crop, plan_full
from loaders.validate import invalid

IMAGE_FIELDS = ("jpg", "jpeg", "png", "webp")  # searched in this order when `field` is None
CROP_ATTEMPTS = 10  # torchvision's RandomResizedCrop.get_params
_DECIMAL = re.compile(r"-?[0-9]+")
Box = tuple[float, float, float, float]  # left, top, width, height in full-resolution pixels


@runtime_checkable
class SampleTransform(Protocol):
    """A per-sample CPU transform whose every random decision draws from `rng`
    (keyed by (seed, epoch, sample index) by the dataset)."""

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]: ...


def transform_releases_gil(transform: Callable[..., Any] | None) -> bool:
    """Whether ``transform`` declares ``releases_gil = True``: its per-sample work runs without the GIL,
    so thread workers running it in parallel scale (this package's transforms do; a user's own
    function is not known to, unless it declares so itself). None (no transform) counts as True."""
    return transform is None or getattr(transform, "releases_gil", False) is True


def transform_can_defer_decode(transform: Callable[..., Any] | None) -> bool:
    """Whether ``transform``'s images may be handed on as decode plans and decoded on the device
    (``DataLoader(decode="device")``): one of this package's image decode transforms, or a ``Compose``
    of this package's transforms holding at least one (nothing after them reads the pixels)."""
    if isinstance(transform, (RandomResizedCropDecode, CenterCropDecode, DecodeImage)):
        return True
    if isinstance(transform, Compose):
        ours = (RandomResizedCropDecode, CenterCropDecode, DecodeImage, DecodeLabel)
        return (all(isinstance(t, ours) for t in transform.transforms)
                and any(transform_can_defer_decode(t) for t in transform.transforms))
    return False


def random_resized_crop_box(width: int, height: int, scale: tuple[float, float], ratio: tuple[float, float],
                            rng: np.random.Generator) -> tuple[int, int, int, int]:
    """Draw a crop (left, top, width, height) in pixels as torchvision's RandomResizedCrop.get_params.

    Up to 10 tries of an area fraction uniform in ``scale`` and a log-uniform aspect
    ratio (w / h) in ``ratio``; then the largest central crop with a ratio in range (at
    least 1 pixel wide and high, where torchvision can return an empty crop).
    """
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(CROP_ATTEMPTS):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        crop_w = round(math.sqrt(target_area * aspect))
        crop_h = round(math.sqrt(target_area / aspect))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            top = int(rng.integers(0, height - crop_h + 1))
            left = int(rng.integers(0, width - crop_w + 1))
            return left, top, crop_w, crop_h
    in_ratio = width / height
    if in_ratio < min(ratio):
        crop_w, crop_h = width, max(1, round(width / min(ratio)))  # max: torchvision may return 0 here
    elif in_ratio > max(ratio):
        crop_w, crop_h = max(1, round(height * max(ratio))), height
    else:
        crop_w, crop_h = width, height
    return (width - crop_w) // 2, (height - crop_h) // 2, crop_w, crop_h


def center_crop_box(width: int, height: int, size: tuple[int, int], resize_short: int) -> Box:
    """The box (left, top, width, height), in source pixels and fractional, that torchvision's
    ``Resize(resize_short)`` then ``CenterCrop(size)`` keeps; size is (height, width).
    """
    if width <= height:
        new_w, new_h = resize_short, int(resize_short * height / width)
    else:
        new_w, new_h = int(resize_short * width / height), resize_short
    crop_h, crop_w = size
    top, left = int(round((new_h - crop_h) / 2.0)), int(round((new_w - crop_w) / 2.0))
    sx, sy = width / new_w, height / new_h
    return left * sx, top * sy, crop_w * sx, crop_h * sy


@dataclass(frozen=True)
class RandomResizedCropDecode:
    """Decode a random crop resized to ``size`` (height, width), flipped left-right with ``flip_p``.

    Output ``sample[out_field]``: uint8 [height, width, 3] RGB; the encoded field is dropped.
    Draws, in order: the crop (as torchvision), then one uniform for the flip.
    """

    releases_gil: ClassVar[bool] = True  # decodes (and resizes) in C without the GIL: threads scale (worker_choice)

    size: int | tuple[int, int]
    _: KW_ONLY  # the rest by keyword
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    field: str | None = None
    out_field: str = "image"
    interpolation: Interpolation | str = Interpolation.BILINEAR
    backend: Backend | str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _check_size("size", self.size))
        object.__setattr__(self, "scale", _check_range("scale", self.scale, upper=1.0))
        object.__setattr__(self, "ratio", _check_range("ratio", self.ratio, upper=math.inf))
        if isinstance(self.flip_p, bool) or not isinstance(self.flip_p, (int, float)) or not 0 <= self.flip_p <= 1:
            raise invalid("flip_p", "a float in [0, 1]", self.flip_p)
        _check_decode_options(self)

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        def place(width: int, height: int) -> tuple[Box, bool]:
            box = random_resized_crop_box(width, height, self.scale, self.ratio, rng)
            return box, bool(rng.random() < self.flip_p)  # the crop is drawn first, then the flip

        return _decode_crop(self, sample, place)


@dataclass(frozen=True)
class CenterCropDecode:
    """Evaluation path: resize the shorter side to ``resize_short``, keep the central ``size``.

    size: int or (height, width); resize_short defaults to round(max(size) / 0.875), i.e.
    224 -> 256. Output ``sample[out_field]``: uint8 [height, width, 3] RGB; the encoded
    field is dropped. JPEGs decode at a reduced DCT scale where the crop allows it.
    """

    releases_gil: ClassVar[bool] = True  # decodes (and resizes) in C without the GIL: threads scale (worker_choice)

    size: int | tuple[int, int]
    _: KW_ONLY  # the rest by keyword
    resize_short: int | None = None
    field: str | None = None
    out_field: str = "image"
    interpolation: Interpolation | str = Interpolation.BILINEAR
    backend: Backend | str | None = None

    def __post_init__(self) -> None:
        size = _check_size("size", self.size)
        object.__setattr__(self, "size", size)
        resize_short = round(max(size) / 0.875) if self.resize_short is None else self.resize_short
        if isinstance(resize_short, bool) or not isinstance(resize_short, int) or resize_short <= 0:
            raise invalid("resize_short", "a positive int", resize_short)
        object.__setattr__(self, "resize_short", resize_short)
        if max(size) > resize_short:
            raise ConfigError(f"'size' {size} must fit in the resized image: 'resize_short' must be "
                              f">= {max(size)} (got {resize_short})")
        _check_decode_options(self)

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        # Both normalised by __post_init__: (height, width) and an int.
        size, resize_short = cast(tuple[int, int], self.size), cast(int, self.resize_short)
        return _decode_crop(self, sample, lambda width, height: (
            center_crop_box(width, height, size, resize_short), False))


@dataclass(frozen=True)
class DecodeImage:
    """Full decode: ``sample[out_field]`` = uint8 [H, W, 3] RGB at full resolution; the encoded field is dropped."""

    releases_gil: ClassVar[bool] = True  # decodes (and resizes) in C without the GIL: threads scale (worker_choice)

    field: str | None = None
    out_field: str = "image"
    backend: Backend | str | None = None

    def __post_init__(self) -> None:
        _check_fields(self.field, self.out_field)
        resolve_backend(self.backend)

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        field, data = _image_data(sample, self.field)
        try:
            if is_planning():
                image: Any = plan_full(data, backend=self.backend, key=str(sample.get("__key__", "")),
                                       index=_sample_index(sample))
            else:
                image = decode_rgb(data, backend=self.backend)
        except SampleError as err:
            raise _sample_error(sample, field, err) from (err.__cause__ or err)
        return _replace(sample, field, self.out_field, image)


@dataclass(frozen=True)
class DecodeLabel:
    """ASCII integer label -> int: ``b"3"`` -> 3 in ``sample[out_field]``; ``field`` is dropped.

    Already-decoded ints (Parquet columns) pass through.
    """

    releases_gil: ClassVar[bool] = True  # a few Python operations: too little to hold worker threads back

    field: str = "cls"
    out_field: str = "label"

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise invalid("field", "a non-empty str", self.field)
        _check_fields(None, self.out_field)

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        value = _field_value(sample, self.field)
        label = _parse_label(value)
        if label is None:
            shown = bytes(value[:32]) if isinstance(value, (bytes, bytearray, memoryview)) else value
            raise SampleError(f"sample {_where(sample)}: field {self.field!r} is not an integer label "
                              f"(got {shown!r})", key=str(sample.get("__key__", "")),
                              index=_sample_index(sample))
        return _replace(sample, self.field, self.out_field, label)


@dataclass(frozen=True)
class Compose:
    """Apply ``transforms`` in order, all drawing from the same rng."""

    transforms: Sequence[SampleTransform]

    @property
    def releases_gil(self) -> bool:
        """Whether every transform declares that its work releases the GIL (then so does this one)."""
        return all(transform_releases_gil(transform) for transform in self.transforms)

    def __post_init__(self) -> None:
        if isinstance(self.transforms, (str, bytes)) or not isinstance(self.transforms, Sequence):
            raise invalid("transforms", "a sequence of transforms", self.transforms)
        for i, transform in enumerate(self.transforms):
            if not callable(transform):
                raise invalid(f"transforms[{i}]", "a callable (sample, rng) -> sample", transform)
        object.__setattr__(self, "transforms", tuple(self.transforms))

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        for transform in self.transforms:
            sample = transform(sample, rng)
        return sample


def _check_decode_options(transform: RandomResizedCropDecode | CenterCropDecode) -> None:
    """Checks shared by the fused crop transforms; normalises ``interpolation`` to the enum."""
    _check_fields(transform.field, transform.out_field)
    pil_filter(transform.interpolation, name="interpolation")
    object.__setattr__(transform, "interpolation", Interpolation(transform.interpolation))
    resolve_backend(transform.backend)


def _decode_crop(transform: RandomResizedCropDecode | CenterCropDecode, sample: dict[str, Any],
                 place: Callable[[int, int], tuple[Box, bool]]) -> dict[str, Any]:
    """Decode the box ``place(width, height)`` chooses (and whether to flip) at ``transform.size``;
    inside ``planning()``, the same draws as a plan (``EncodedImage``)."""
    field, data = _image_data(sample, transform.field)
    out_h, out_w = cast(tuple[int, int], transform.size)  # normalised by __post_init__
    interpolation = Interpolation(transform.interpolation)  # normalised by __post_init__
    try:
        width, height = image_size(data)
        box, flip = place(width, height)
        if is_planning():
            left, top, box_w, box_h = box
            image: Any = plan_crop(data, (width, height), (float(left), float(top), float(box_w), float(box_h)),
                                   (out_w, out_h), flip=flip, interpolation=interpolation,
                                   backend=transform.backend, key=str(sample.get("__key__", "")),
                                   index=_sample_index(sample))
        else:
            image = decode_crop_resize(data, box, (out_w, out_h), flip=flip, resample=interpolation,
                                       backend=transform.backend)
    except SampleError as err:
        raise _sample_error(sample, field, err) from (err.__cause__ or err)
    return _replace(sample, field, transform.out_field, image)


def _is_pos_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_size(name: str, value: object) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else value
    if isinstance(pair, (tuple, list)) and len(pair) == 2 and all(_is_pos_int(v) for v in pair):
        return int(pair[0]), int(pair[1])
    raise invalid(name, "a positive int or a (height, width) pair of positive ints", value)


def _check_range(name: str, value: object, *, upper: float) -> tuple[float, float]:
    if (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            and 0 < value[0] <= value[1] <= upper):
        return float(value[0]), float(value[1])
    bound = "" if math.isinf(upper) else f" <= {upper}"
    raise invalid(name, f"a (low, high) pair with 0 < low <= high{bound}", value)


def _check_fields(field: str | None, out_field: str) -> None:
    if field is not None and (not isinstance(field, str) or not field):
        raise invalid("field", "None or a non-empty str", field)
    if not isinstance(out_field, str) or not out_field:
        raise invalid("out_field", "a non-empty str", out_field)


def _sample_index(sample: dict[str, Any]) -> int:
    index = sample.get("__index__", -1)
    return int(index) if isinstance(index, (int, np.integer)) else -1


def _where(sample: dict[str, Any]) -> str:
    return f"{sample.get('__key__', '')!r} (index {_sample_index(sample)})"


def _field_value(sample: dict[str, Any], field: str) -> Any:
    if field not in sample:
        fields = sorted(k for k in sample if not k.startswith("__"))
        raise SampleError(f"sample {_where(sample)} has no field {field!r} (fields: {fields})",
                          key=str(sample.get("__key__", "")), index=_sample_index(sample))
    return sample[field]


def _image_data(sample: dict[str, Any], field: str | None) -> tuple[str, bytes]:
    """The image field's name and encoded bytes: ``field``, or the first of IMAGE_FIELDS present."""
    if field is None:
        field = next((f for f in IMAGE_FIELDS if f in sample), None)
        if field is None:
            fields = sorted(k for k in sample if not k.startswith("__"))
            raise SampleError(f"sample {_where(sample)} has no image field (looked for {list(IMAGE_FIELDS)}, "
                              f"found {fields})", key=str(sample.get("__key__", "")), index=_sample_index(sample))
    data = _field_value(sample, field)
    if isinstance(data, (bytearray, memoryview, np.ndarray)):
        data = bytes(data)  # a few µs; the codecs want one contiguous bytes object
    if not isinstance(data, bytes):
        raise SampleError(f"sample {_where(sample)}: field {field!r} must hold encoded bytes "
                          f"(got a {type(data).__name__})", key=str(sample.get("__key__", "")),
                          index=_sample_index(sample))
    return field, data


def _sample_error(sample: dict[str, Any], field: str, err: SampleError) -> SampleError:
    return SampleError(f"sample {_where(sample)}: cannot decode field {field!r}: {err}",
                       key=str(sample.get("__key__", "")), index=_sample_index(sample))


def _replace(sample: dict[str, Any], field: str, out_field: str, value: object) -> dict[str, Any]:
    out = dict(sample)
    del out[field]
    out[out_field] = value
    return out


def _parse_label(value: object) -> int | None:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            value = bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        text = value.strip()
        # int() would also take "1_000", "+3" and non-ASCII digits; a label is plain decimal.
        if _DECIMAL.fullmatch(text):
            return int(text)
    return None
