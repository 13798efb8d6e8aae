"""How much a calibration folder may make edge-export read, decided before anything is decoded.

A folder is listed lazily and refused past ``MAX_CALIBRATION_FILES`` entries (a folder of a million
files is never listed whole); a symbolic link may point only at a regular file inside the folder;
a FIFO, device or socket is never opened. An image is opened as PNG or JPEG only (Pillow's other
decoders never see the bytes), and its header alone (width x height) says what it decodes to: at
most ``MAX_IMAGE_PIXELS`` pixels an image, and ``DECODE_BUDGET_BYTES`` for all the images read
together (4 bytes a pixel, what Pillow holds for an RGB image), so a folder of 100-byte PNGs that
each declare 30000 x 30000 pixels is exit 2 in a second, not gigabytes of pixels. An ``.npz`` or
``.npy`` folder is held to the same budget by the sizes its headers declare.
"""

from __future__ import annotations

import contextlib
import os
import stat
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import CalibrationDataError

__all__ = [
    "DECODE_BUDGET_BYTES",
    "MAX_CALIBRATION_FILES",
    "MAX_IMAGE_PIXELS",
    "check_decode_budget",
    "check_image_headers",
    "list_calibration_folder",
    "list_class_folders",
    "open_calibration_image",
]

# 10,000 files: far more than calibration needs (128 by default, and ranges stop improving there:
# DEFAULT_CALIBRATION_SAMPLES), few enough to list and sort in a few MiB.
MAX_CALIBRATION_FILES = 10_000
# 8 GiB of decoded pixels (2 gigapixels): 128 photos of 12 megapixels fit, about a minute of decoding.
DECODE_BUDGET_BYTES = 8 << 30
# Pillow's own decompression-bomb limit (its default Image.MAX_IMAGE_PIXELS), enforced here as a refusal
# whatever Image.MAX_IMAGE_PIXELS the process has set.
MAX_IMAGE_PIXELS = 89_478_485
BYTES_PER_PIXEL = 4
IMAGE_FORMATS = ("PNG", "JPEG")

HINT_FEWER_ARRAYS = "Save fewer samples in the archive (128 calibrate as well as more), or smaller ones."
_HINT_FEWER = (
    "Pass --calibration-samples N to read only the first N files (128 calibrate as well as more), "
    "resize the images to about the model's input size, or save the samples as an .npz."
)


def list_calibration_folder(folder: Path) -> list[Path]:
    """The folder's regular files (hidden names left out), sorted; refused past the cap or when a
    link leads outside the folder. Sub-folders, FIFOs, devices and sockets are left out unopened."""
    real_folder = os.path.realpath(folder)
    files: list[Path] = []
    with _scandir(folder) as entries:
        for count, entry in enumerate(entries, start=1):
            if count > MAX_CALIBRATION_FILES:
                raise CalibrationDataError(
                    f"The calibration folder {folder} holds more than {MAX_CALIBRATION_FILES:,} entries; "
                    f"edge-export reads at most {MAX_CALIBRATION_FILES:,} files from one folder.",
                    "Copy the samples to calibrate on (128 are enough) into a folder of their own, or "
                    "save them as an .npz.",
                )
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                _check_link(folder, real_folder, entry)
            if entry.is_file():  # follows a link, now known to stay inside the folder
                files.append(Path(entry.path))
    return sorted(files)


def list_class_folders(folder: Path) -> list[tuple[str, list[Path]]]:
    """A labelled image folder: (class name, its files) for each sub-folder (hidden ones left out),
    sorted by name; [] when the folder has no sub-folder. Each sub-folder is listed as
    list_calibration_folder lists a folder, the links checked against the top folder, and all of
    them together held to MAX_CALIBRATION_FILES."""
    real_folder = os.path.realpath(folder)
    classes: list[tuple[str, Path]] = []
    with _scandir(folder) as entries:
        for count, entry in enumerate(entries, start=1):
            if count > MAX_CALIBRATION_FILES:
                break  # list_calibration_folder refuses the folder with its own message
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                _check_link(folder, real_folder, entry)
            if entry.is_dir():
                classes.append((entry.name, Path(entry.path)))
    found, total = [], 0
    for name, sub in sorted(classes):
        files = list_calibration_folder(sub)
        for f in files:  # a link inside a class folder may still lead out of the top folder
            target = os.path.realpath(f)
            if os.path.commonpath([target, real_folder]) != real_folder:
                raise CalibrationDataError(
                    f"The calibration folder {folder} holds a symbolic link, {f}, that leads outside it "
                    f"(to {target}); calibration files are read only from inside the folder.",
                    "Copy the file into the folder instead of linking to it, or remove the link.",
                )
        total += len(files)
        if total > MAX_CALIBRATION_FILES:
            raise CalibrationDataError(
                f"The class folders of {folder} hold more than {MAX_CALIBRATION_FILES:,} files together; "
                f"edge-export reads at most {MAX_CALIBRATION_FILES:,}.",
                "Copy a subset of each class (a few hundred images) into a folder of its own.",
            )
        found.append((name, files))
    return found


@contextlib.contextmanager
def _scandir(folder: Path) -> Iterator[Any]:
    try:
        with os.scandir(folder) as entries:
            yield entries
    except OSError as exc:
        raise CalibrationDataError(
            f"Cannot list the calibration folder {folder}: {exc.strerror or exc}.",
            "Check the --calibration-data path and its permissions.",
        ) from None


def _check_link(folder: Path, real_folder: str, entry: os.DirEntry) -> None:
    target = os.path.realpath(entry.path)
    if os.path.commonpath([target, real_folder]) != real_folder or target == real_folder:
        raise CalibrationDataError(
            f"The calibration folder {folder} holds a symbolic link, {entry.name}, that leads outside "
            f"it (to {target}); calibration files are read only from inside the folder.",
            "Copy the file into the folder instead of linking to it, or remove the link.",
        )


@contextlib.contextmanager
def open_calibration_image(path: Path) -> Iterator[Any]:
    """The image at ``path`` opened (header read, no pixel decoded) as PNG or JPEG only, from a
    regular file; over MAX_IMAGE_PIXELS it is refused, whatever Pillow's own limit is set to."""
    from PIL import Image

    with _open_regular_file(path) as stream, warnings.catch_warnings():
        # Pillow warns between its limit and twice it and raises above: both are a refusal here.
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with Image.open(stream, formats=IMAGE_FORMATS) as img:
            pixels = img.width * img.height
            if pixels > MAX_IMAGE_PIXELS:
                raise CalibrationDataError(
                    f"The calibration image {path} declares {img.width}x{img.height} pixels "
                    f"({pixels:,}), over the {MAX_IMAGE_PIXELS:,} an image may have.",
                    "Resize it to about the model's input size, or remove it.",
                )
            yield img


@contextlib.contextmanager
def _open_regular_file(path: Path) -> Iterator[Any]:
    """Opened without blocking (a FIFO swapped in after the listing never hangs the run) and checked
    to be a regular file before a byte is read: the listing's check, once more at the open."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    stream = None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CalibrationDataError(
                f"The calibration file {path} is not a regular file.", "Remove it from the calibration folder."
            )
        os.set_blocking(fd, True)
        stream = os.fdopen(fd, "rb")
        yield stream
    finally:
        if stream is not None:
            stream.close()
        else:
            os.close(fd)


def check_image_headers(folder: Path, files: Sequence[Path], header_errors: tuple[type[BaseException], ...]) -> int:
    """Read every image's header (no pixel decoded) and refuse the set before any image is decoded
    when one is over MAX_IMAGE_PIXELS or all together over the budget; the decoded bytes."""
    from ..errors import map_exceptions

    total = 0
    for path in files:
        with map_exceptions(
            {header_errors: CalibrationDataError},
            f"Cannot read the calibration image {path}: {{error}}.",
            "Remove the file or replace it with a valid JPEG/PNG image.",
        ), open_calibration_image(path) as img:
            total += img.width * img.height * BYTES_PER_PIXEL
        check_decode_budget(folder, total, "images", len(files))
    return total


def check_decode_budget(source: Path, declared_bytes: int, what: str, count: int | None = None, hint: str = _HINT_FEWER) -> None:
    """Refuse calibration data whose decoded size is over DECODE_BUDGET_BYTES (exit 2)."""
    from ..processes.memory import format_bytes

    if declared_bytes <= DECODE_BUDGET_BYTES:
        return
    files = f" ({count:,} files to read)" if count is not None else ""
    raise CalibrationDataError(
        f"The calibration data {source}{files} decodes to at least {format_bytes(declared_bytes)} of {what}, "
        f"over the {format_bytes(DECODE_BUDGET_BYTES)} edge-export decodes for calibration.",
        hint,
    )
