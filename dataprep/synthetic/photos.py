"""Photo-like image content (1/f^alpha texture over gradients and soft shapes) and its encoding."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
from PIL import Image

from dataprep.synthetic.spec import check_count


@dataclasses.dataclass(frozen=True, slots=True)
class Style:
    """The look of one class: spectral slope, colours (float32 RGB [4, 3]: gradient ends, two shape colours), layout."""

    alpha: float
    colours: np.ndarray
    angle_rad: float
    n_shapes: int
    texture_std: float


def random_style(rng: np.random.Generator) -> Style:
    """A Style drawn from ``rng``."""
    return Style(
        alpha=float(rng.uniform(1.6, 2.4)),
        colours=rng.uniform(20, 235, (4, 3)).astype(np.float32),
        angle_rad=float(rng.uniform(0, 2 * np.pi)),
        n_shapes=int(rng.integers(2, 6)),
        texture_std=float(rng.uniform(34, 50)),
    )


def _fractal_noise(height: int, width: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """float32 [H, W], zero mean, unit std; power spectrum ~ 1/f^alpha (random phases)."""
    fy = np.fft.fftfreq(height).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(width).astype(np.float32)[None, :]
    freq = np.sqrt(fy * fy + fx * fx)
    freq[0, 0] = 1.0
    envelope = freq ** np.float32(-alpha / 2)
    envelope[0, 0] = 0.0  # no DC: the mean comes from the base layer
    shape = envelope.shape
    spectrum = (rng.standard_normal(shape,
                                    dtype=np.float32) + 1j * rng.standard_normal(shape, dtype=np.float32)) * envelope
    noise = np.fft.irfft2(spectrum, s=(height, width)).astype(np.float32)
    noise -= noise.mean()
    noise /= noise.std() + np.float32(1e-8)
    return noise


def soft_ellipse(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [H, W] in [0, 1]: a rotated ellipse with a soft edge at a random place."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    cy, cx = rng.uniform(0, height), rng.uniform(0, width)
    ry, rx = rng.uniform(0.1, 0.45, 2) * min(height, width)
    theta = rng.uniform(0, np.pi)
    dy, dx = yy - cy, xx - cx
    u = (dx * np.cos(theta) + dy * np.sin(theta)) / rx
    v = (-dx * np.sin(theta) + dy * np.cos(theta)) / ry
    edge = rng.uniform(4, 40)
    return (1 / (1 + np.exp((np.sqrt(u * u + v * v) - 1) * edge))).astype(np.float32)


def _base_layer(height: int, width: int, style: Style, rng: np.random.Generator) -> np.ndarray:
    """float32 [H, W, 3] low-frequency layer: gradient, shapes and chroma noise, 0..255."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    ramp = xx / width * np.cos(style.angle_rad) + yy / height * np.sin(style.angle_rad)
    ramp = (ramp - ramp.min()) / (np.ptp(ramp) + 1e-6)
    base = style.colours[0] * (1 - ramp[..., None]) + style.colours[1] * ramp[..., None]
    for k in range(style.n_shapes):
        mask = soft_ellipse(height, width, rng)[..., None]
        colour = style.colours[2 + k % 2] + rng.normal(0, 15, 3).astype(np.float32)
        base = base * (1 - mask) + colour * mask
    chroma = np.stack([_fractal_noise(height, width, style.alpha, rng) for _ in range(3)], axis=-1)
    return base + chroma * np.float32(12)


def render(height: int, width: int, style: Style, rng: np.random.Generator) -> np.ndarray:
    """uint8 [H, W, 3]: base layer at 1/4 resolution, upsampled, plus full-resolution luminance texture.

    The texture's strength varies over the image (smooth sky next to busy foliage).
    """
    small_h, small_w = max(height // 4, 8), max(width // 4, 8)
    base = np.clip(_base_layer(small_h, small_w, style, rng), 0, 255).astype(np.uint8)
    base_up = np.asarray(Image.fromarray(base).resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32)
    gain = 0.2 + 1.6 / (1 + np.exp(-2 * _fractal_noise(small_h, small_w, 3.0, rng)))
    gain_up = np.asarray(Image.fromarray(gain.astype(np.float32),
                                         "F").resize((width, height), Image.Resampling.BILINEAR))
    texture = _fractal_noise(height, width, style.alpha, rng) * gain_up * np.float32(style.texture_std)
    return np.clip(base_up + texture[..., None], 0, 255).astype(np.uint8)


def photo_like(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A photo-like RGB image: uint8 [H, W, 3] on the CPU, random style drawn from ``rng``."""
    check_count("height", height, 1)
    check_count("width", width, 1)
    return render(height, width, random_style(rng), rng)


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    """The bytes of ``image`` saved by Pillow as ``fmt`` with ``params``."""
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def encode_jpeg(pixels: np.ndarray, rng: np.random.Generator) -> bytes:
    """A JPEG of ``pixels`` (uint8 [H, W, 3]) at a quality drawn from ``rng``."""
    # Quality varies like in scraped datasets; 87..96 gives ~100 KB at 500x375.
    return encode(Image.fromarray(pixels), "JPEG", quality=int(rng.integers(87, 97)))
