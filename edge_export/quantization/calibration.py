"""Calibration data: load it from the user's files, or make synthetic inputs, and check it first.

Every sample is a tuple of numpy arrays, one per model input, each with exactly the input spec's
shape (batch dimension included) and dtype. Files that do not fit are refused before any
quantization runs, with a message naming the file and the mismatch, so that nothing is written from
ranges calibrated on the wrong data.

Accepted sources:
- ``.npz``: one array per input, keyed by the input name, its position ("0", "1", ...), or numpy's
  default ``arr_0``, ``arr_1``; a single-input model may use any one key;
- ``.npy``: one array, for a single-input model;
- a folder of ``.npy`` files (single input): each file one sample or a stack of samples;
- a folder of JPEG/PNG images (one 4-D image input): resized, scaled to [0, 1], normalized with
  ``mean``/``std`` and laid out as ``nchw`` or ``nhwc``; one sub-folder per class, or an ``.npz``
  ``labels`` array, labels the samples (calibration_labels.py: the labels and the held-out split).
An array holds either one sample (the spec's shape) or a stack ``(N, *spec.shape)``; with batch 1 a
stack ``(N, *spec.shape[1:])`` is read as N samples as well. How much a source may make edge-export
read and decode is bounded before anything is decoded (calibration_bounds.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import struct
import zipfile
from pathlib import Path

import numpy as np

from ..config import InputSpec
from ..errors import CalibrationDataError, UsageError, map_exceptions
from .calibration_bounds import HINT_FEWER_ARRAYS, check_decode_budget, check_image_headers
from .calibration_bounds import list_calibration_folder, list_class_folders, open_calibration_image
from .calibration_labels import LABELS_KEY, checked_labels, labelled_images

__all__ = ["DEFAULT_CALIBRATION_SAMPLES", "DEFAULT_SYNTHETIC_SAMPLES", "IMAGE_SUFFIXES", "CalibrationSet", "load_calibration_data"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
DEFAULT_SYNTHETIC_SAMPLES = 32
# Suggested default cap for --calibration-samples on real data: in benchmarks/quantization_calibration.py
# SQNR rose from 8 to 32 to 128 samples (+9 dB on the digits CNN, +14 dB on a small encoder) and not
# beyond; PT2E's histogram observer costs time per sample.
DEFAULT_CALIBRATION_SAMPLES = 128

_FLOAT_DTYPES = ("float32", "float16")
_HINT_SHAPES = (
    "Give one array per input with the input's shape, or a stack of N samples with shape "
    "(N, *input_shape); check --input-shape."
)

# What np.load raises on a damaged, truncated or pickled file (a bad .npz is a bad zip).
_NUMPY_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile)


@dataclass(frozen=True)
class CalibrationSummary:
    """What a quantization was calibrated on, as the report shows it."""

    source: str
    samples: int
    real_data: bool
    input_shapes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class CalibrationSet:
    """Samples to calibrate activation ranges on; ``real_data`` is False for synthetic inputs."""

    samples: tuple[tuple[np.ndarray, ...], ...]
    source: str
    real_data: bool
    labels: tuple[int, ...] | None = None  # a class index per sample (labelled data), else None
    class_names: tuple[str, ...] | None = None  # the class sub-folders' names, by index

    def __post_init__(self) -> None:
        if not self.samples:
            raise CalibrationDataError(f"The calibration set from {self.source} holds no samples.")
        width = len(self.samples[0])
        if any(len(s) != width for s in self.samples):
            raise CalibrationDataError(
                f"The calibration samples from {self.source} do not all have {width} inputs."
            )

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def num_inputs(self) -> int:
        return len(self.samples[0])

    def split(self, n_holdout: int) -> tuple[CalibrationSet, CalibrationSet]:
        """Keep the last ``n_holdout`` samples apart (for parity on inputs not calibrated on).

        At least one sample always stays for calibration, so the holdout may be smaller than asked.
        """
        if n_holdout < 0:
            raise UsageError(f"Cannot hold out {n_holdout} calibration samples.")
        n_holdout = min(n_holdout, len(self.samples) - 1)
        cut = len(self.samples) - n_holdout
        calib = self._part(slice(None, cut), self.source)
        if n_holdout == 0:
            return calib, calib
        return calib, self._part(slice(cut, None), f"{self.source} (held out)")

    def _part(self, which: slice, source: str) -> CalibrationSet:
        return CalibrationSet(self.samples[which], source, self.real_data, None if self.labels is None else self.labels[which], self.class_names)

    def limit(self, max_samples: int | None) -> CalibrationSet:
        if max_samples is None or max_samples >= len(self.samples):
            return self
        if max_samples < 1:
            raise UsageError(f"--calibration-samples {max_samples} must be at least 1.")
        return self._part(slice(None, max_samples), self.source)

    def torch_batches(self) -> list[tuple]:
        import torch

        return [tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in s) for s in self.samples]

    def summary(self) -> CalibrationSummary:
        return CalibrationSummary(self.source, len(self.samples), self.real_data, tuple(tuple(a.shape) for a in self.samples[0]))


# ---- checking one array against one input spec ----------------------------------------------------


def _input_label(spec: InputSpec, position: int) -> str:
    return f"input {position}" + (f" ('{spec.name}')" if spec.name else "")


def _split_samples(arr: np.ndarray, spec: InputSpec, position: int, origin: str) -> list[np.ndarray]:
    """One array -> list of samples of exactly spec.shape, or CalibrationDataError."""
    shape = tuple(spec.shape)
    if arr.shape == shape:
        stacked = arr[None]
    elif arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
        stacked = arr
    elif shape[0] == 1 and arr.ndim == len(shape) and arr.shape[1:] == shape[1:]:
        stacked = arr[:, None]
    else:
        raise CalibrationDataError(
            f"Calibration data {origin} has shape {tuple(arr.shape)}, which does not match "
            f"{_input_label(spec, position)} of shape {shape} (nor a stack of such samples).",
            _HINT_SHAPES,
        )
    if stacked.shape[0] == 0:
        raise CalibrationDataError(f"Calibration data {origin} holds no samples (its first dimension is 0).")
    return [stacked[i] for i in range(stacked.shape[0])]


def _check_dtype(arr: np.ndarray, spec: InputSpec, position: int, origin: str) -> np.ndarray:
    want = spec.dtype
    kind = arr.dtype.kind
    if want in _FLOAT_DTYPES:
        if kind != "f":
            raise CalibrationDataError(
                f"Calibration data {origin} has dtype {arr.dtype}, but {_input_label(spec, position)} "
                f"takes {want}.",
                "Save the calibration arrays as floating point (e.g. arr.astype(np.float32)), "
                "normalized the way the model expects.",
            )
    elif want == "bool":
        if kind != "b":
            raise CalibrationDataError(
                f"Calibration data {origin} has dtype {arr.dtype}, but {_input_label(spec, position)} "
                "takes bool.",
                "Save that input as a boolean array.",
            )
    elif kind not in "iu":
        raise CalibrationDataError(
            f"Calibration data {origin} has dtype {arr.dtype}, but {_input_label(spec, position)} "
            f"takes {want}.",
            "Save that input as an integer array.",
        )
    if kind == "f" and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise CalibrationDataError(
            f"Calibration data {origin} contains {bad} NaN or Inf value(s).",
            "Remove or fix those samples: ranges calibrated on NaN/Inf are meaningless.",
        )
    return arr.astype(want, copy=False)


def _samples_for(arr: np.ndarray, spec: InputSpec, position: int, origin: str) -> list[np.ndarray]:
    arr = _check_dtype(np.asarray(arr), spec, position, origin)
    return _split_samples(arr, spec, position, origin)


def _npy_header(stream) -> tuple[tuple, np.dtype] | None:
    """(shape, dtype) from an .npy header; None for a newer format or no header (np.load reports it)."""
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            return None
    except (OSError, ValueError, EOFError):
        return None
    return shape, dtype


def _declared_npy_bytes(path: Path) -> int:
    """What an .npy file's header says its array takes (0 when it has no readable header)."""
    try:
        with path.open("rb") as fh:
            header = _npy_header(fh)
    except OSError:
        return 0  # np.load reports an unreadable file
    if header is None:
        return 0
    shape, dtype = header
    return int(np.prod(shape, dtype=object)) * dtype.itemsize


def _check_npy_header(stream, stored_bytes: int, origin: str) -> None:
    """Refuse an .npy whose header declares more data than the file holds or than memory can take,
    before numpy allocates it (a 129-byte file can declare 256 GiB)."""
    from ..processes.memory import ensure_memory_for, format_bytes

    header = _npy_header(stream)
    if header is None:
        return
    shape, dtype = header
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize if dtype.itemsize else 0
    if declared > stored_bytes:
        raise CalibrationDataError(
            f"The calibration array {origin} declares shape {tuple(shape)} {dtype} ({format_bytes(declared)}) "
            f"but holds only {format_bytes(stored_bytes)} of data: it is truncated or corrupted.",
            "Write it again with numpy.save.",
        )
    ensure_memory_for(declared, f"The calibration array {origin} ({tuple(shape)} {dtype})",
                      "Use fewer or smaller samples (--calibration-samples), or split the file.", CalibrationDataError)


def _load_array(path: Path, what: str = "file") -> np.ndarray:
    try:
        with path.open("rb") as fh:
            if fh.read(6) == b"\x93NUMPY":
                fh.seek(0)
                _check_npy_header(fh, path.stat().st_size, str(path))
    except OSError:
        pass  # np.load reports an unreadable file
    with map_exceptions(
        {_NUMPY_READ_ERRORS: CalibrationDataError},
        f"Cannot read the calibration {what} {path}: {{error}}.",
        "Write it with numpy.save (no pickled objects).",
    ):
        arr = np.load(path, allow_pickle=False)
    if isinstance(arr, np.lib.npyio.NpzFile):
        arr.close()
        raise CalibrationDataError(f"{path} is an .npz archive, not an .npy array.", "Rename it to .npz.")
    return arr


def _zip_inputs(per_input: list[list[np.ndarray]], specs: Sequence[InputSpec], origin: str) -> list[tuple]:
    counts = [len(s) for s in per_input]
    if len(set(counts)) > 1:
        detail = ", ".join(f"{_input_label(sp, i)}: {c}" for i, (sp, c) in enumerate(zip(specs, counts)))
        raise CalibrationDataError(
            f"Calibration data {origin} has a different number of samples per input ({detail}).",
            "Give every input the same number of samples, in the same order.",
        )
    return [tuple(s[i] for s in per_input) for i in range(counts[0])]


# ---- the sources ------------------------------------------------------------------------------


def _from_npz(path: Path, specs: Sequence[InputSpec]) -> tuple[list[tuple], tuple[int, ...] | None]:
    from ..loading.npz_files import UnsafeNpz, check_npz_members

    with map_exceptions(
        {_NUMPY_READ_ERRORS: CalibrationDataError},
        f"Cannot read the calibration archive {path}: {{error}}.",
        "Write it with numpy.savez (no pickled objects).",
    ):
        try:
            with zipfile.ZipFile(path) as zf:
                declared = check_npz_members(zf, f"the calibration archive {path}")
        except UnsafeNpz as exc:
            raise CalibrationDataError(
                f"The calibration archive {path} is not usable: {exc}.",
                "Write it with numpy.savez or numpy.savez_compressed, one plain numeric array per input.",
            ) from None
        check_decode_budget(path, declared, "arrays", hint=HINT_FEWER_ARRAYS)
        archive = np.load(path, allow_pickle=False)
    with archive:
        # a 'labels' array holds class indices, not an input (unless an input is named so)
        has_labels = LABELS_KEY in archive.files and LABELS_KEY not in {s.name for s in specs}
        keys = [k for k in archive.files if not (has_labels and k == LABELS_KEY)]
        if not keys:
            raise CalibrationDataError(f"The calibration archive {path} holds no arrays.", _HINT_SHAPES)
        chosen: list[str] = []
        for i, spec in enumerate(specs):
            candidates = [k for k in (spec.name, str(i), f"arr_{i}", f"input_{i}", f"args_{i}") if k]
            key = next((k for k in candidates if k in keys), None)
            if key is None and len(specs) == 1 and len(keys) == 1:
                key = keys[0]
            if key is None:
                raise CalibrationDataError(
                    f"The calibration archive {path} has no array for {_input_label(spec, i)}: it holds "
                    f"{', '.join(sorted(keys))}.",
                    f"Key each array by input name or position ({', '.join(candidates)}).",
                )
            chosen.append(key)
        unused = sorted(set(keys) - set(chosen))
        if unused:
            raise CalibrationDataError(
                f"The calibration archive {path} holds arrays {', '.join(unused)} that match no model "
                f"input (the model has {len(specs)} input(s)).",
                "Remove them, or key each array by input name or position.",
            )
        with map_exceptions({_NUMPY_READ_ERRORS: CalibrationDataError}, f"Cannot read the calibration archive {path}: {{error}}.",
                            "Write it with numpy.savez (no pickled objects)."):
            per_input = [
                _samples_for(archive[key], spec, i, f"{path}['{key}']") for i, (key, spec) in enumerate(zip(chosen, specs))
            ]
            samples = _zip_inputs(per_input, specs, str(path))
            labels = checked_labels(archive[LABELS_KEY], f"{path}['{LABELS_KEY}']", len(samples)) if has_labels else None
    return samples, labels


def _single_input(specs: Sequence[InputSpec], path: Path, kind: str) -> InputSpec:
    if len(specs) != 1:
        raise CalibrationDataError(
            f"{kind} {path} gives one array per sample, but the model has {len(specs)} inputs.",
            "Use an .npz archive with one array per input, keyed by input name or position.",
        )
    return specs[0]


def _from_npy(path: Path, specs: Sequence[InputSpec]) -> list[tuple]:
    spec = _single_input(specs, path, "The .npy file")
    return [(s,) for s in _samples_for(_load_array(path), spec, 0, str(path))]


def _from_npy_folder(path: Path, files: list[Path], specs: Sequence[InputSpec]) -> list[tuple]:
    spec = _single_input(specs, path, "The folder of .npy files")
    total = 0
    for f in files:  # every header first: the budget is refused before any array is read
        total += _declared_npy_bytes(f)
        check_decode_budget(path, total, "arrays", len(files))
    samples: list[tuple] = []
    for f in files:
        samples.extend((s,) for s in _samples_for(_load_array(f), spec, 0, str(f)))
    return samples


def _image_geometry(spec: InputSpec, layout: str, path: Path) -> tuple[int, int, int]:
    if len(spec.shape) != 4 or spec.shape[0] != 1:
        raise CalibrationDataError(
            f"{path} is a folder of images, but the model input has shape {spec.shape}, not "
            "(1, C, H, W) or (1, H, W, C).",
            "Use an .npy/.npz file for non-image inputs.",
        )
    if layout == "nchw":
        _, c, h, w = spec.shape
    else:
        _, h, w, c = spec.shape
    if c not in (1, 3):
        raise CalibrationDataError(
            f"The model input {spec.shape} has {c} channels in layout {layout}; images give 1 or 3.",
            "Check --layout (nchw or nhwc) against the model's input shape.",
        )
    return c, h, w


def _from_images(
    path: Path,
    files: list[Path],
    specs: Sequence[InputSpec],
    image_size: tuple[int, int] | None,
    mean: tuple[float, ...] | None,
    std: tuple[float, ...] | None,
    layout: str,
    max_samples: int | None,
) -> list[tuple]:
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:
        raise UsageError(
            "Reading calibration images needs pillow, which is not installed.",
            "pip install 'edge-export[images]', or convert the images to an .npy file.",
        ) from exc
    spec = _single_input(specs, path, "The image folder")
    if spec.dtype not in _FLOAT_DTYPES:
        raise CalibrationDataError(
            f"{path} is a folder of images, but the model input takes {spec.dtype}, not float.",
            "Give the calibration data as .npy/.npz arrays of the right dtype.",
        )
    channels, height, width = _image_geometry(spec, layout, path)
    if image_size is not None and tuple(image_size) != (height, width):
        raise CalibrationDataError(
            f"--image-size {image_size[0]}x{image_size[1]} does not match the model input {spec.shape} "
            f"(height {height}, width {width} in layout {layout}).",
            "Drop --image-size or make it agree with --input-shape.",
        )
    mean_arr = np.asarray(mean if mean is not None else (0.0,) * channels, dtype=np.float32)
    std_arr = np.asarray(std if std is not None else (1.0,) * channels, dtype=np.float32)
    for label, values in (("--mean", mean_arr), ("--std", std_arr)):
        if values.size not in (1, channels):
            raise UsageError(f"{label} has {values.size} values; the image input has {channels} channels.")
    if np.any(std_arr == 0):
        raise UsageError("--std has a zero value; it divides the pixel values.")
    files = files[: max_samples or len(files)]
    # Pillow's decoders also raise SyntaxError ("broken PNG file") and struct.error on damaged files
    errors = (UnidentifiedImageError, Image.DecompressionBombError, Image.DecompressionBombWarning, OSError, ValueError, SyntaxError, struct.error)
    check_image_headers(path, files, errors)
    samples = []
    for f in files:
        pixels = _decoded_image(f, channels, (width, height), errors)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        pixels = (pixels - mean_arr) / std_arr  # HWC, normalized per channel
        arr = pixels.transpose(2, 0, 1) if layout == "nchw" else pixels
        samples.append((arr[None].astype(spec.dtype),))
    return samples


def _decoded_image(path: Path, channels: int, size: tuple[int, int], errors: tuple[type[BaseException], ...]) -> np.ndarray:
    """One image as float32 HWC (or HW) in [0, 1], resized to ``size`` (width, height)."""
    from PIL import Image

    from ..processes.memory import ensure_memory_for

    with map_exceptions(
        {errors: CalibrationDataError},
        f"Cannot read the calibration image {path}: {{error}}.",
        "Remove the file or replace it with a valid JPEG/PNG image.",
    ), open_calibration_image(path) as img:
        # The header's size, before any pixel is decoded: RGB bytes plus the float32 copy.
        ensure_memory_for(img.width * img.height * 4 * 16, f"The calibration image {path} ({img.width}x{img.height} pixels)",
                          "Resize the image files, or remove this one.", CalibrationDataError)
        img = img.convert("RGB" if channels == 3 else "L").resize(size, Image.BILINEAR)
        return np.asarray(img, dtype=np.float32) / 255.0


def load_calibration_data(
    path: str | Path,
    input_specs: Sequence[InputSpec],
    *,
    image_size: tuple[int, int] | None = None,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    layout: str = "nchw",
    max_samples: int | None = None,
) -> CalibrationSet:
    """Read and check calibration data for a model with ``input_specs``. See the module docstring."""
    if not input_specs:
        raise UsageError("The model has no inputs to calibrate.")
    if layout not in ("nchw", "nhwc"):
        raise UsageError(f"Layout '{layout}' is not known.", "Use nchw or nhwc.")
    if max_samples is not None and max_samples < 1:
        raise UsageError(f"--calibration-samples {max_samples} must be at least 1.")
    p = Path(path)
    if not p.exists():
        raise CalibrationDataError(f"Calibration data {p} does not exist.", "Check the --calibration-data path.")
    labels, class_names = None, None
    if p.is_dir() and not list_calibration_folder(p) and (classes := list_class_folders(p)):
        files, labels, class_names = labelled_images(p, classes, IMAGE_SUFFIXES)
        samples = _from_images(p, files, input_specs, image_size, mean, std, layout, max_samples)
        labels = labels[: len(samples)]
    elif p.is_dir():
        entries = list_calibration_folder(p)
        npys = [e for e in entries if e.suffix.lower() == ".npy"]
        images = [e for e in entries if e.suffix.lower() in IMAGE_SUFFIXES]
        if not npys and not images:
            raise CalibrationDataError(
                f"The calibration folder {p} holds no .npy files and no JPEG/PNG images.",
                "Point --calibration-data at a folder of .npy files or images, or at an .npz/.npy file.",
            )
        if npys and images:
            raise CalibrationDataError(
                f"The calibration folder {p} mixes .npy files and images.",
                "Keep one kind of calibration file per folder.",
            )
        if npys:
            samples = _from_npy_folder(p, npys[:max_samples], input_specs)  # each file holds a sample or more
        else:
            samples = _from_images(p, images, input_specs, image_size, mean, std, layout, max_samples)
    elif p.suffix.lower() == ".npz":
        samples, labels = _from_npz(p, input_specs)
    elif p.suffix.lower() == ".npy":
        samples = _from_npy(p, input_specs)
    else:
        raise CalibrationDataError(
            f"Calibration data {p} is neither .npz, .npy nor a folder.",
            "Save the samples with numpy (np.save / np.savez) or point at a folder of images.",
        )
    if not samples:
        raise CalibrationDataError(f"Calibration data {p} holds no samples.", _HINT_SHAPES)
    return CalibrationSet(tuple(samples), str(p), True, None if labels is None else tuple(labels), class_names).limit(max_samples)
