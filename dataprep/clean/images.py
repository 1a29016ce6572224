"""Clean one image record: check, decode fully, normalise to RGB, re-encode only when needed.

Checks run cheapest first: read -> identify (header only) -> pixel count -> size ->
full decode. A plain RGB JPEG that needs no rotation and no resize keeps its original
bytes (no generational loss); everything else is re-encoded as ``reencode_format``.

JPEG data is decoded *strictly*: libjpeg reports damaged entropy-coded data ("Corrupt
JPEG data: N extraneous bytes before marker", "premature end of data segment") only as
warnings, which Pillow ignores, so Pillow alone accepts a JPEG cut in half and padded
with an EOI marker or one whose scan was overwritten. With ``simplejpeg`` (libjpeg-turbo
with warnings raised as errors) installed, every JPEG is decoded by it once; without it,
Pillow decodes and ``jpeg_structure_problem`` checks that every scan ends in a marker
and the file has an EOI marker after the last scan, which catches truncation and most
overwrites but not damage that leaves the marker structure intact. PNG chunk CRCs and
the IEND chunk are checked too (``dataprep.clean.structure``): Pillow checks neither.

Pure functions of the record and the options, run on dataprep's cleaning threads (or
worker processes). Assumes ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` is False (Pillow's
default). Pillow's ``DecompressionBombWarning`` is silenced (``max_pixels`` is applied
exactly instead): per call, by briefly changing the warning filters, until
``prepare_threads`` silences it for the whole process, which is what threads need
(``warnings.catch_warnings`` is not thread-safe).
"""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
from PIL import Image, JpegImagePlugin, UnidentifiedImageError

from dataprep.clean.sidecars import RejectedInput, default_json, dump_json, read_field, read_sidecars
from dataprep.clean.options import ImageFormat, ImageOptions
from dataprep.inputs.names import IMAGE_EXTENSIONS
from dataprep.clean.structure import jpeg_structure_problem, png_structure_problem
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import RawRecord, Reject, RejectReason

try:
    import simplejpeg
except ImportError:  # optional ("fast" extra): fall back to Pillow + a marker check
    simplejpeg = None

_PIL_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF")  # never EPS & co. (Ghostscript)
_JPEG_FORMATS = frozenset({"JPEG", "MPO"})  # MPO: camera JPEG with extra frames after the first EOI
# What Pillow's plugins raise on malformed input (see its fuzzing tests); MemoryError is not caught.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, LookupError, TypeError, ArithmeticError)
_ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
_RGB_PROFILE_MODES = frozenset({"RGB", "RGBA", "RGBa", "P", "PA"})  # modes whose ICC profile describes RGB
_ORIENTATION_TAG = 0x0112
# Same table as ``ImageOps.exif_transpose``; applied by hand because the strict JPEG path
# decodes to a numpy array, not to the Image that carries the EXIF block.
_T = Image.Transpose
_TRANSPOSE = dict(zip(range(2, 9), (_T.FLIP_LEFT_RIGHT, _T.ROTATE_180, _T.FLIP_TOP_BOTTOM, _T.TRANSPOSE,
                                    _T.ROTATE_270, _T.TRANSVERSE, _T.ROTATE_90), strict=True))
_MAGIC = (
    (b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"BM", "BMP"),
)


_bomb_warnings_ignored = False  # set by prepare_threads


def prepare_threads() -> None:
    """Make this process ready to run ``clean_image`` on several threads at once.

    Loads Pillow's plugins up front and ignores ``DecompressionBombWarning`` process-wide
    for good. Meant for a process of its own (dataprep's cleaning child), called before
    its threads start.
    """
    global _bomb_warnings_ignored
    Image.init()
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    _bomb_warnings_ignored = True


def clean_image(raw: RawRecord, opts: ImageOptions, label_index: int | None) -> CleanRecord | Reject:
    """Turn an image record into a sample, or say why not.

    Output fields (bytes): "jpg" or "png" (the image, RGB), "cls" (ASCII decimal of
    ``label_index``, when given), "txt" (UTF-8 sidecar text, NFC), "json" (UTF-8 JSON
    object, sorted keys: the sidecar .json object, else label/width/height of the output
    image; "__source__" = ``raw.source`` in both, and a sidecar's "label", "width" or
    "height" replaced by the sample's own), and every other sidecar field unchanged.
    """
    try:
        image_field = _image_field(raw)
        others = {f: p for f, p in raw.files.items() if f != image_field}
        sidecars, user_json = read_sidecars(others)
        data = read_field(raw.files[image_field], image_field)
        if not data:
            raise RejectedInput(RejectReason.EMPTY_FILE, f"{image_field} file {raw.files[image_field]} has 0 bytes")
        out_field, encoded, (width, height) = _clean_pixels(data, opts)
        fields: dict[str, object] = {out_field: encoded}
        if label_index is not None:
            fields["cls"] = str(label_index).encode("ascii")
        generated = default_json(raw, width, height)
        if user_json is None:
            doc = generated
        else:  # the user's object, but what dataprep knows about the sample is never contradicted
            doc = dict(user_json)
            doc.update({key: value for key, value in generated.items() if key in doc})
        doc["__source__"] = raw.source
        fields["json"] = dump_json(doc)
        for name, value in sidecars.items():
            if name in fields:
                raise RejectedInput(RejectReason.BAD_METADATA,
                                f"sidecar field {name!r} collides with the generated {name!r} field")
            fields[name] = value
    except RejectedInput as rejected:
        return Reject(raw.source, rejected.reason, rejected.detail, raw.row)
    return CleanRecord(raw.key, raw.source, fields)


def _image_field(raw: RawRecord) -> str:
    # The first image field in sorted order, as dataprep.plan.duplicates' search picks it;
    # any other image field passes through as a sidecar.
    images = sorted(f for f in raw.files if f in IMAGE_EXTENSIONS)
    if not images:
        fields = ", ".join(sorted(raw.files)) or "none"
        raise RejectedInput(RejectReason.NO_MEDIA, f"no image among the fields ({fields})")
    return images[0]


# ----------------------------------------------------------------------------- pixels


def _clean_pixels(data: bytes, opts: ImageOptions) -> tuple[str, bytes, tuple[int, int]]:
    """(output field, encoded bytes, (width, height) of the output) for one image file's bytes."""
    img = _open(data)
    width, height = img.size
    if width * height > opts.max_pixels:
        raise RejectedInput(RejectReason.TOO_LARGE,
                        f"{width}x{height} = {width * height:,} pixels > max_pixels {opts.max_pixels:,}")
    orientation = _orientation(img)
    upright = (height, width) if orientation >= 5 else (width, height)
    if min(upright) < opts.min_side:
        raise RejectedInput(
            RejectReason.TOO_SMALL,
            f"shorter side {min(upright)} px < min_side {opts.min_side} "
            f"({upright[0]}x{upright[1]} after EXIF orientation)",
        )
    target = target_size(upright, opts)
    is_jpeg = img.format in _JPEG_FORMATS
    if is_jpeg and img.mode == "RGB" and orientation == 1 and target is None:
        _check_jpeg(data, img)
        return ImageFormat.JPEG.value, data, upright
    icc = img.info.get("icc_profile") if img.mode in _RGB_PROFILE_MODES else None
    subsampling = JpegImagePlugin.get_sampling(img) if is_jpeg else -1
    final = target or upright
    # The decoder works in stored orientation: ask it for the target size turned back.
    pixels = _decode(data, img, (final[1], final[0]) if orientation >= 5 else final)
    if orientation in _TRANSPOSE:
        pixels = pixels.transpose(_TRANSPOSE[orientation])
    pixels = _to_rgb(pixels, opts.background)
    if pixels.size != final:
        pixels = pixels.resize(final, Image.Resampling.LANCZOS, reducing_gap=3.0)
    return (*_encode(pixels, opts, icc, subsampling), final)


def target_size(size: tuple[int, int], opts: ImageOptions) -> tuple[int, int] | None:
    """(width, height) after ``resize_short`` / ``max_side``, or None when no resize is needed (never upscales)."""
    width, height = size
    if opts.resize_short is not None and min(size) > opts.resize_short:
        side = opts.resize_short
        if width <= height:
            return side, max(1, round(height * side / width))
        return max(1, round(width * side / height)), side
    if opts.max_side is not None and max(size) > opts.max_side:
        side = opts.max_side
        if width >= height:
            return side, max(1, round(height * side / width))
        return max(1, round(width * side / height)), side
    return None


def _open(data: bytes) -> Image.Image:
    if _bomb_warnings_ignored:
        return _open_image(data)
    with warnings.catch_warnings():
        # max_pixels is applied exactly by the caller; Pillow's own warning would only add noise.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return _open_image(data)


def _open_image(data: bytes) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data), formats=_PIL_FORMATS)
    except Image.DecompressionBombError as err:
        raise RejectedInput(RejectReason.TOO_LARGE, f"Pillow refuses to open it: {err}") from None
    except UnidentifiedImageError:
        raise _unidentified(data) from None
    except _DECODE_ERRORS as err:
        raise _decode_failure(data, err, _sniff(data)) from None


def _sniff(data: bytes) -> str | None:
    """The image format that ``data``'s first bytes announce, if any."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return next((fmt for magic, fmt in _MAGIC if data.startswith(magic)), None)


def _unidentified(data: bytes) -> RejectedInput:
    fmt = _sniff(data)
    if fmt is None:
        return RejectedInput(RejectReason.NOT_AN_IMAGE, f"no image format recognised (first bytes {data[:8].hex(' ')})")
    return _decode_failure(data, None, fmt)


def _decode_failure(data: bytes, err: BaseException | None, fmt: str | None) -> RejectedInput:
    """TRUNCATED or CORRUPT, from the decoder's complaint and the file's own structure."""
    said = f"{type(err).__name__}: {err}" if err is not None else f"Pillow cannot read the {fmt} header"
    if "truncated" in said.lower():
        return RejectedInput(RejectReason.TRUNCATED, f"{fmt or 'image'} data ends early ({said})")
    if fmt == "JPEG" and (problem := jpeg_structure_problem(data)) is not None:
        return RejectedInput(problem[0], f"{problem[1]} ({said})")
    if fmt == "PNG" and (problem := png_structure_problem(data)) is not None:
        return RejectedInput(problem[0], f"{problem[1]} ({said})")
    if fmt == "WEBP" and len(data) >= 8 and int.from_bytes(data[4:8], "little") + 8 > len(data):
        riff_end = int.from_bytes(data[4:8], "little") + 8
        return RejectedInput(RejectReason.TRUNCATED,
                         f"WEBP data ends at byte {len(data)}, its RIFF header says {riff_end} ({said})")
    return RejectedInput(RejectReason.CORRUPT, f"{fmt or 'image'} data does not decode ({said})")


def _orientation(img: Image.Image) -> int:
    """EXIF orientation 1..8 (1 = upright); 1 when absent, invalid or unreadable."""
    try:
        value = img.getexif().get(_ORIENTATION_TAG, 1)
    except _DECODE_ERRORS:
        return 1  # a damaged EXIF block does not make the pixels unusable
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _decode(data: bytes, img: Image.Image, stored: tuple[int, int]) -> Image.Image:
    """All pixels of an opened image; JPEGs may come DCT-scaled down to no less than ``stored``."""
    if img.format in _JPEG_FORMATS:
        return _decode_jpeg(data, img, stored)
    if img.format == "PNG" and (problem := png_structure_problem(data)) is not None:
        raise RejectedInput(*problem)  # Pillow checks neither the CRC of pixel data nor that IEND comes
    return _load(img, data)


def _load(img: Image.Image, data: bytes) -> Image.Image:
    """Decode all pixel data with Pillow (the full decode, not just the header)."""
    try:
        img.load()
    except _DECODE_ERRORS as err:
        raise _decode_failure(data, err, "JPEG" if img.format in _JPEG_FORMATS else img.format) from None
    return img


# ----------------------------------------------------------------------------- JPEG


def _strict_decode(data: bytes, colorspace: str, stored: tuple[int, int] | None) -> np.ndarray:
    """uint8 [H, W, C] from libjpeg-turbo with its warnings raised as errors (needs simplejpeg)."""
    try:
        if stored is None:
            # Validation only: 1/8-scale grey output skips most IDCT and colour work, but
            # every scan's entropy-coded data is still decoded, so the same damage is found
            # (600 random overwrites, baseline and progressive: same verdicts as full RGB).
            pixels: np.ndarray = simplejpeg.decode_jpeg(data, colorspace=colorspace, fastdct=True, min_factor=8)
        else:
            # Smallest DCT scale still >= the target size; Lanczos does the rest.
            pixels = simplejpeg.decode_jpeg(data, colorspace=colorspace, min_width=stored[0], min_height=stored[1])
    except ValueError as err:
        raise _decode_failure(data, err, "JPEG") from None
    return pixels


def _check_jpeg(data: bytes, img: Image.Image) -> None:
    """Decode a JPEG fully and strictly without keeping the pixels."""
    if simplejpeg is not None:
        _strict_decode(data, "CMYK" if img.mode == "CMYK" else "GRAY", None)
        return
    if (problem := jpeg_structure_problem(data)) is not None:
        raise RejectedInput(*problem)
    _load(img, data)


def _decode_jpeg(data: bytes, img: Image.Image, stored: tuple[int, int]) -> Image.Image:
    """The JPEG's pixels, strictly decoded, scaled down by the DCT to at least ``stored`` (width, height)."""
    if simplejpeg is not None:
        if img.mode in ("RGB", "L"):
            return Image.fromarray(_strict_decode(data, "RGB", stored))
        # CMYK/YCCK: validate strictly, decode with Pillow, which knows Adobe's inverted CMYK.
        _strict_decode(data, "CMYK", None)
    elif (problem := jpeg_structure_problem(data)) is not None:
        raise RejectedInput(*problem)
    img.draft(img.mode, stored)
    return _load(img, data)


# ----------------------------------------------------------------------------- output


def _to_rgb(img: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """Mode RGB: alpha composited on ``background``, 16-bit grey scaled (not clipped) to 8 bits."""
    mode = img.mode
    if mode in _ALPHA_MODES or "transparency" in img.info:
        rgba = img.convert("RGBA")
        canvas = Image.new("RGB", img.size, background)
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    if mode == "RGB":
        return img
    if mode == "I" or mode.startswith("I;16"):
        # Pillow's convert() clips 16-bit values at 255; keep the high byte instead.
        grey = (np.clip(np.asarray(img), 0, 65535).astype(np.uint16) >> 8).astype(np.uint8)
        return Image.fromarray(grey).convert("RGB")
    try:
        return img.convert("RGB")
    except ValueError as err:
        raise RejectedInput(RejectReason.CORRUPT, f"pixel mode {mode} cannot be converted to RGB ({err})") from None


def _encode(img: Image.Image, opts: ImageOptions, icc: bytes | None, subsampling: int) -> tuple[str, bytes]:
    """(field, bytes): RGB ``img`` encoded as ``opts.reencode_format`` without EXIF."""
    img.info = {}  # nothing of the source's metadata (EXIF, DPI, comments) rides along
    params: dict[str, object] = {"icc_profile": icc} if icc else {}
    buffer = io.BytesIO()
    if opts.reencode_format is ImageFormat.JPEG:
        if subsampling in (0, 1, 2):  # keep a JPEG source's chroma subsampling; else Pillow's 4:2:0
            params["subsampling"] = subsampling
        img.save(buffer, "JPEG", quality=opts.quality, optimize=False, **params)
    else:
        img.save(buffer, "PNG", **params)
    return opts.reencode_format.value, buffer.getvalue()
