"""The image-folder tree: valid photos, special variants (formats, modes, EXIF, odd names), sidecars, broken files."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import numpy as np
from PIL import Image

from dataprep.inputs.records import RejectReason
from dataprep.synthetic.photos import Style, encode, encode_jpeg, photo_like, random_style, render, soft_ellipse
from dataprep.synthetic.sink import Sink, prepare_dir
from dataprep.synthetic.spec import STREAM_BROKEN, STREAM_CLASS, STREAM_IMAGE, SyntheticReport, SyntheticSpec
from dataprep.synthetic.vocab import PEOPLE, SUBJECTS, WORDS

logger = logging.getLogger(__name__)

SPECIAL_KINDS = (
    "png_rgb", "png_rgba", "jpeg_gray", "jpeg_cmyk", "png_palette", "png_gray16",
    "jpeg_exif_orientation_6", "odd_name", "undecodable_name", "png_rgb", "png_rgba", "jpeg_gray",
)
BROKEN_KINDS: dict[str, RejectReason] = {
    "empty": RejectReason.EMPTY_FILE,
    "truncated": RejectReason.TRUNCATED,  # cut at half: Pillow "image file is truncated"
    # A bogus SOF marker written into the scan: libjpeg fails hard ("two SOF markers"),
    # Pillow raises OSError "broken data stream". Plain garbage in the scan would only
    # raise libjpeg *warnings*, which Pillow ignores.
    "corrupt_scan": RejectReason.CORRUPT,
    "text_as_jpeg": RejectReason.NOT_AN_IMAGE,
    "tiny": RejectReason.TOO_SMALL,  # 8x8, below a min side of 32
    "duplicate": RejectReason.DUPLICATE,  # bytes of img_0000, sorts after it
    "bad_json_sidecar": RejectReason.BAD_METADATA,  # valid JPEG, .json is an array
    "bad_txt_sidecar": RejectReason.BAD_METADATA,  # valid JPEG, .txt is not UTF-8
}
ODD_NAME = "photo ü 1.jpg"
# On Linux the name is kept as bytes; Python sees it with surrogateescape.
UNDECODABLE_NAME = os.fsdecode(b"img_\xff\xfe_latin1.jpg")


def _pick_size(rng: np.random.Generator) -> tuple[int, int]:
    """(height, width) in pixels: ImageNet-like mix, 80% around 500x375 in either orientation."""
    draw = rng.random()
    if draw < 0.1:
        return 768, 1024
    if draw < 0.2:
        return 240, 320
    long_side = int(rng.integers(470, 501))
    short_side = int(round(long_side * rng.uniform(0.7, 0.8)))
    return (short_side, long_side) if rng.random() < 0.7 else (long_side, short_side)


def _special_bytes(kind: str, pixels: np.ndarray, rng: np.random.Generator) -> tuple[str, bytes]:
    """(extension, encoded file) of the ``kind`` variant of ``pixels`` (uint8 [H, W, 3])."""
    image = Image.fromarray(pixels)
    if kind == "png_rgb":
        return "png", encode(image, "PNG")
    if kind == "png_rgba":
        alpha = soft_ellipse(pixels.shape[0], pixels.shape[1], rng) * 255
        image.putalpha(Image.fromarray(alpha.astype(np.uint8)))
        return "png", encode(image, "PNG")
    if kind == "png_palette":
        return "png", encode(image.quantize(64), "PNG")
    if kind == "png_gray16":
        # Low bits random so the file really needs 16 bits.
        grey = np.asarray(image.convert("L"),
                          dtype=np.uint16) * 256 + rng.integers(0, 256, pixels.shape[:2], dtype=np.uint16)
        return "png", encode(Image.fromarray(grey), "PNG")
    if kind == "jpeg_gray":
        return "jpg", encode(image.convert("L"), "JPEG", quality=90)
    if kind == "jpeg_cmyk":
        return "jpg", encode(image.convert("CMYK"), "JPEG", quality=90)
    if kind == "jpeg_exif_orientation_6":
        # Displayed upright, the image has a pure red 32x32 block at its top-left corner;
        # stored rotated 90 degrees counter-clockwise, as a camera held sideways writes it.
        shown = pixels.copy()
        shown[:32, :32] = (255, 0, 0)
        exif = Image.Exif()
        exif[0x0112] = 6  # Orientation: rotate 90 CW to display
        return "jpg", encode(Image.fromarray(np.ascontiguousarray(np.rot90(shown))), "JPEG", quality=90, exif=exif)
    return "jpg", encode_jpeg(pixels, rng)


def _caption(rng: np.random.Generator, subject: str) -> bytes:
    words = " ".join(str(w) for w in rng.choice(WORDS, 3))
    return f"A {subject} photographed on a {words} day. 📷\n".encode()


def _metadata(rng: np.random.Generator, index: int, height: int, width: int) -> bytes:
    doc = {"caption_id": index, "photographer": str(rng.choice(PEOPLE)), "license": "CC-BY-4.0", "height": height,
           "width": width}
    return json.dumps(doc, ensure_ascii=False).encode()


def _write_image(directory: Path, stem: str, index: int, kind: str, style: Style, seed: int, sink: Sink,
                 sidecars: bool) -> tuple[str, str]:
    """Write image ``index`` (and its sidecars) under ``directory``; returns (file name, kind written)."""
    rng = np.random.default_rng([seed, STREAM_IMAGE, index])
    height, width = _pick_size(rng)
    ext, data = _special_bytes(kind, render(height, width, style, rng), rng)
    name = {"odd_name": ODD_NAME, "undecodable_name": UNDECODABLE_NAME}.get(kind, f"{stem}.{ext}")
    try:
        sink.write(directory / name, data)
    except OSError as err:
        if kind != "undecodable_name" or err.errno not in (errno.EILSEQ, errno.EINVAL):
            raise
        logger.warning("%s: the file system refuses a non-UTF-8 file name (%s); writing %s.jpg instead", directory,
                       err.strerror, stem)
        name, kind = f"{stem}.jpg", "jpeg"
        sink.write(directory / name, data)
    sidecar_stem = name.rpartition(".")[0]
    if sidecars and index % 3 == 0:
        sink.write(directory / f"{sidecar_stem}.txt", _caption(rng, SUBJECTS[index % len(SUBJECTS)]))
    if sidecars and index % 5 == 0:
        sink.write(directory / f"{sidecar_stem}.json", _metadata(rng, index, height, width))
    return name, kind


def _corrupt_scan(jpeg: bytes) -> bytes:
    """``jpeg`` with an SOF0 marker written over the middle of its entropy-coded scan."""
    sos = jpeg.index(b"\xff\xda")
    scan_start = sos + 2 + int.from_bytes(jpeg[sos + 2 : sos + 4], "big")
    middle = (scan_start + len(jpeg) - 2) // 2
    patch = b"\xff\xc0\x00\x11"
    return jpeg[:middle] + patch + jpeg[middle + len(patch) :]


def _broken_files(kind: str, rng: np.random.Generator, original: bytes) -> list[tuple[str, bytes]]:
    """[(extension, bytes)] of one broken input: the image first, then any sidecar."""
    valid = encode_jpeg(photo_like(240, 320, rng), rng)
    files = {
        "empty": [("jpg", b"")],
        "truncated": [("jpg", valid[: len(valid) // 2])],
        "corrupt_scan": [("jpg", _corrupt_scan(valid))],
        "text_as_jpeg": [("jpg", b"Shopping list:\n- eggs\n- flour\nNot an image at all.\n")],
        "tiny": [("jpg", encode_jpeg(photo_like(8, 8, rng), rng))],
        "duplicate": [("jpg", original)],
        "bad_json_sidecar": [("jpg", valid), ("json", b'["a JSON array", "not an object"]\n')],
        "bad_txt_sidecar": [("jpg", valid), ("txt", "Légende: café à Zürich\n".encode("latin-1"))],
    }
    return files[kind]


def _class_dir(index: int, classes: int) -> str:
    return f"class_{index:0{max(2, len(str(classes - 1)))}d}"


def make_image_tree(root: str | os.PathLike[str], *, images: int, classes: int, seed: int, broken: bool = True,
                    sidecars: bool = True) -> SyntheticReport:
    """Write an image-folder tree ``root/class_KK/img_NNNN.ext``: ``images`` valid images, then the broken ones.

    The report's paths are relative to ``root`` itself; its table and text counts are 0.
    Image ``i`` is in class ``i % classes``; images 1..12 are the ``SPECIAL_KINDS`` in
    order (as many as fit); image 0 is a plain JPEG, copied by the "duplicate" input.
    """
    SyntheticSpec(images=images, classes=classes, seed=seed, broken=broken, sidecars=sidecars)  # validates
    top = Path(root)
    prepare_dir(top)
    dirs = [_class_dir(k, classes) for k in range(classes)]
    for name in dirs:
        (top / name).mkdir()
    styles = [random_style(np.random.default_rng([seed, STREAM_CLASS, k])) for k in range(classes)]
    digits = max(4, len(str(images + len(BROKEN_KINDS))))
    sink = Sink()
    special: dict[str, str] = {}
    for index in range(images):
        kind = SPECIAL_KINDS[index - 1] if 1 <= index <= len(SPECIAL_KINDS) else "jpeg"
        directory = dirs[index % classes]
        name, written = _write_image(top / directory, f"img_{index:0{digits}d}", index, kind, styles[index % classes],
                                     seed, sink, sidecars)
        if written != "jpeg":
            special[f"{directory}/{name}"] = written
    rejects = _write_broken(top, dirs, images, digits, seed, sink) if broken else {}
    return SyntheticReport(root=top, image_files=images, broken=rejects, table_rows=0, bad_table_rows=0, text_files=0,
                           bytes_written=sink.bytes_written, special=special)


def _write_broken(top: Path, dirs: list[str], first: int, digits: int, seed: int, sink: Sink) -> dict[str, str]:
    """Write ``BROKEN_KINDS`` as images ``first``, ``first + 1``...; returns path -> reject reason."""
    original = (top / dirs[0] / f"img_{0:0{digits}d}.jpg").read_bytes()
    rng = np.random.default_rng([seed, STREAM_BROKEN])
    rejects: dict[str, str] = {}
    for offset, (kind, reason) in enumerate(BROKEN_KINDS.items()):
        index = first + offset
        stem = f"{dirs[index % len(dirs)]}/img_{index:0{digits}d}"
        files = _broken_files(kind, rng, original)
        for ext, data in files:
            sink.write(top / f"{stem}.{ext}", data)
        rejects[f"{stem}.{files[0][0]}"] = str(reason)
    return rejects
