"""Synthetic calibration inputs, for when the user gives no calibration data.

They follow the model's example inputs the way parity's random inputs do (``inputs.make_samples``):
a float input is normal noise with its example's mean and standard deviation, an integer input lies
in its example's range (token ids across the vocabulary the example uses, not only 0-9). When an
image input's example is a picture (neighbouring pixels correlated, as in a photograph; the noise
the CLI draws from --input-shape alone is not), every other sample is a natural-image-like picture
with the example's per-channel statistics. Ranges from noise alone miss what a picture drives
through the first layers, ranges from pictures alone clip what noise drives (docs/BENCHMARKS.md
15.2 and 23.6); min/max over both covers both. The principle is parity's: without data, the
tool validates on the example and on noise at its scale, so it calibrates on that distribution
(other seeds). Wider noise (unit spread beside a [0, 1] picture) was measured and not kept: it
helped one trained model on real data and cost the zoo's image models their gain (23.6). The
samples alternate, so every prefix of the set (the early look, the selection's parity samples)
holds both kinds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config import InputSpec
from ..errors import UsageError
from .calibration import DEFAULT_SYNTHETIC_SAMPLES, CalibrationSet

__all__ = ["PICTURE_CORRELATION", "natural_image_like", "pixel_correlation", "synthetic_calibration"]

# Correlation of horizontally neighbouring pixels above which an example counts as a picture:
# natural_image_like pictures read 0.5-0.8 at 16-224 pixels (photographs more), white noise about 0
# (within 0.1 even at 8x8).
PICTURE_CORRELATION = 0.25

_FLOAT_DTYPES = ("float32", "float16")
_INT_LOW, _INT_TOP = 0, 9  # integer inputs without an example, both ends included (as inputs.make_samples draws them)


def natural_image_like(
    rng: np.random.Generator, channels: int, height: int, width: int, exponent: float = 2.0
) -> np.ndarray:
    """One (channels, height, width) image in [0, 1] with a natural image's power spectrum (power
    falling as 1/f^``exponent``, 2 for photographs): smooth regions and edges, not pixel noise. The
    channels share most of their structure (as RGB channels do), and each image gets its own
    brightness and contrast."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    freq = np.sqrt(fx**2 + fy**2)
    freq[0, 0] = 1.0 / max(height, width)
    amplitude = freq ** (-exponent / 2)
    shared = rng.standard_normal((height, width))
    image = np.empty((channels, height, width))
    for c in range(channels):
        noise = 0.8 * shared + 0.6 * rng.standard_normal((height, width)) if channels > 1 else shared
        image[c] = np.fft.irfft2(np.fft.rfft2(noise) * amplitude, s=(height, width))
    image = (image - image.min()) / max(float(image.max() - image.min()), 1e-12)
    low, high = sorted(rng.uniform(0.0, 1.0, 2))
    high = max(high, low + 0.3)  # at least 30% of the full range: some contrast in every image
    return np.clip(low + image * (high - low), 0.0, 1.0)


def _image_geometry_of(spec: InputSpec, layout: str) -> tuple[int, int, int] | None:
    """(channels, height, width) of a float 1- or 3-channel batch-1 image input, else None."""
    if spec.dtype not in _FLOAT_DTYPES or len(spec.shape) != 4 or spec.shape[0] != 1:
        return None
    _, c, h, w = spec.shape if layout == "nchw" else (spec.shape[0], spec.shape[3], spec.shape[1], spec.shape[2])
    return (c, h, w) if c in (1, 3) and h > 1 and w > 1 else None


def _chw(arr: np.ndarray, layout: str) -> np.ndarray:
    return arr[0] if layout == "nchw" else arr[0].transpose(2, 0, 1)


def pixel_correlation(image: np.ndarray, layout: str = "nchw") -> float:
    """Pearson correlation of horizontally neighbouring pixels of a batch-1 image (0.0 when it is
    constant or not finite: nothing to tell)."""
    chw = np.asarray(_chw(np.asarray(image, dtype=np.float64), layout))
    left, right = chw[:, :, :-1].ravel(), chw[:, :, 1:].ravel()
    if left.size < 2 or not (np.all(np.isfinite(left)) and np.all(np.isfinite(right))):
        return 0.0
    if float(left.std()) == 0.0 or float(right.std()) == 0.0:
        return 0.0
    value = float(np.corrcoef(left, right)[0, 1])
    return value if math.isfinite(value) else 0.0


@dataclass(frozen=True)
class _InputDraw:
    """How one input's samples are drawn: its example's statistics, and whether it is a picture."""

    spec: InputSpec
    mean: float = 0.0
    std: float = 1.0
    low: int = _INT_LOW
    top: int = _INT_TOP  # included: an example's max may be its type's largest value
    picture: tuple[np.ndarray, np.ndarray] | None = None  # per-channel mean, std (C, 1, 1) of a picture example


def _finite_stats(values: np.ndarray) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if values.size < 2:
        return 0.0, 1.0
    std = float(values.std())
    return float(values.mean()), (std if std > 0 else 1.0)


def _draw_for(spec: InputSpec, example: np.ndarray | None, layout: str) -> _InputDraw:
    """The draw that follows one example input (the defaults without one, as parity's)."""
    if example is None or example.size < 2:
        return _InputDraw(spec)
    if spec.dtype in _FLOAT_DTYPES:
        mean, std = _finite_stats(example.astype(np.float64).ravel())
        if _image_geometry_of(spec, layout) is None or pixel_correlation(example, layout) < PICTURE_CORRELATION:
            return _InputDraw(spec, mean, std)
        chw = _chw(example.astype(np.float64), layout)
        stats = [_finite_stats(channel.ravel()) for channel in chw]
        per_channel = tuple(np.array([s[k] for s in stats]).reshape(-1, 1, 1) for k in (0, 1))
        return _InputDraw(spec, mean, std, picture=per_channel)
    if spec.dtype == "bool":
        return _InputDraw(spec)
    return _InputDraw(spec, low=int(example.min()), top=int(example.max()))


def _noise(draw: _InputDraw, rng: np.random.Generator) -> np.ndarray:
    spec = draw.spec
    if spec.dtype in _FLOAT_DTYPES:
        return (rng.standard_normal(spec.shape) * draw.std + draw.mean).astype(spec.dtype)
    if spec.dtype == "bool":
        return rng.integers(0, 2, spec.shape).astype(bool)
    return rng.integers(draw.low, max(draw.top, draw.low), spec.shape, endpoint=True).astype(spec.dtype)


def _pictures(draw: _InputDraw, count: int, rng: np.random.Generator, layout: str) -> list[np.ndarray]:
    """``count`` pictures whose pooled per-channel mean and std are the example's: the per-image
    brightness and contrast of ``natural_image_like`` survive the mapping."""
    c, h, w = _image_geometry_of(draw.spec, layout)
    raw = np.stack([natural_image_like(rng, c, h, w) for _ in range(count)])  # N, C, H, W in [0, 1]
    pooled_mean = raw.mean(axis=(0, 2, 3)).reshape(-1, 1, 1)
    pooled_std = np.maximum(raw.std(axis=(0, 2, 3)).reshape(-1, 1, 1), 1e-6)
    mean, std = draw.picture
    out = []
    for picture in raw:
        mapped = (picture - pooled_mean) / pooled_std * std + mean
        mapped = mapped if layout == "nchw" else mapped.transpose(1, 2, 0)
        out.append(mapped[None].astype(draw.spec.dtype))
    return out


def _following_examples(
    specs: Sequence[InputSpec], n: int, rng: np.random.Generator, like: Sequence, layout: str
) -> tuple[list[tuple], bool]:
    """Samples drawn like the examples: alternately a picture (for picture inputs) and noise.
    Returns them and whether any input got pictures."""
    draws = [_draw_for(spec, None if ex is None else np.asarray(ex), layout) for spec, ex in zip(specs, like)]
    pictures = {i: _pictures(d, (n + 1) // 2, rng, layout) for i, d in enumerate(draws) if d.picture is not None}
    samples = []
    for k in range(n):
        sample = []
        for i, draw in enumerate(draws):
            use_picture = i in pictures and k % 2 == 0
            sample.append(pictures[i][k // 2] if use_picture else _noise(draw, rng))
        samples.append(tuple(sample))
    return samples, bool(pictures)


def _normalized_pictures(
    specs: Sequence[InputSpec], n: int, rng: np.random.Generator, mean: tuple | None, std: tuple | None, layout: str
) -> list[tuple]:
    """Every image input a natural-image-like picture normalized with ``mean``/``std`` (the
    model's preprocessing); the other inputs as without an example."""
    samples = []
    for _ in range(n):
        sample = []
        for spec in specs:
            geometry = _image_geometry_of(spec, layout)
            if geometry is None:
                sample.append(_noise(_InputDraw(spec), rng))
                continue
            c, h, w = geometry
            m = np.asarray(mean if mean is not None else (0.0,), dtype=np.float32).reshape(-1, 1, 1)
            s = np.asarray(std if std is not None else (1.0,), dtype=np.float32).reshape(-1, 1, 1)
            picture = (natural_image_like(rng, c, h, w) - m) / s  # CHW
            picture = picture if layout == "nchw" else picture.transpose(1, 2, 0)
            sample.append(picture[None].astype(spec.dtype))
        samples.append(tuple(sample))
    return samples


def synthetic_calibration(
    input_specs: Sequence[InputSpec],
    n: int = DEFAULT_SYNTHETIC_SAMPLES,
    seed: int = 0,
    *,
    like: Sequence | None = None,
    image_mean: tuple[float, ...] | None = None,
    image_std: tuple[float, ...] | None = None,
    layout: str = "nchw",
) -> CalibrationSet:
    """``n`` synthetic samples; ranges from these are not the model's real ranges, hence
    ``real_data=False``.

    Without ``like``: standard-normal float inputs, integers in [0, 10). With ``like`` (the example
    inputs, one array or tensor per input): drawn like them (the module docstring says how). With
    ``image_mean``/``image_std`` instead: every image input a natural-image-like picture normalized
    with them (the API's and benchmarks' choice; docs/BENCHMARKS.md 15.2)."""
    if n < 1:
        raise UsageError(f"Cannot make {n} synthetic calibration samples.")
    rng = np.random.default_rng(seed)
    if image_mean is not None or image_std is not None:
        samples = _normalized_pictures(input_specs, n, rng, image_mean, image_std, layout)
        kind = "natural-image-like images, normalized with --mean/--std"
    elif like is not None:
        samples, pictures = _following_examples(input_specs, n, rng, _as_arrays(like), layout)
        kind = "like the example inputs" + (": natural-image-like pictures and noise" if pictures else "")
    else:
        samples = [tuple(_noise(_InputDraw(spec), rng) for spec in input_specs) for _ in range(n)]
        kind = "normal"
    return CalibrationSet(tuple(samples), f"synthetic ({kind}, seed {seed})", False)


def _as_arrays(like: Sequence) -> list[np.ndarray | None]:
    """Example inputs (torch tensors or arrays) as numpy arrays."""
    out = []
    for value in like:
        if value is None:
            out.append(None)
        elif hasattr(value, "detach"):
            tensor = value.detach().cpu()
            out.append((tensor.float() if str(tensor.dtype) == "torch.bfloat16" else tensor).numpy())
        else:
            out.append(np.asarray(value))
    return out
