"""Hostile image files for the calibration-folder tests, the fuzzer and benchmarks/calibration_fuzz.py:
PNGs whose header declares any size (a 100-byte file can declare 30000 x 30000 pixels), truncated
and bit-flipped PNG/JPEG files, wrong extensions, empty files, folders named like images, FIFOs and
symbolic links. Each case is a set of entries made in a folder; ``outside`` is a folder beside it."""

from __future__ import annotations

import io
import os
import random
import struct
import zlib
from pathlib import Path

import numpy as np

KINDS = (
    "good-png", "good-jpeg", "huge-png", "over-limit-png", "large-png", "truncated-png", "truncated-jpeg",
    "flipped-png", "flipped-jpeg", "zero-bytes", "gif-as-png", "text-as-jpg", "png-as-jpg", "folder-named-png",
    "fifo-named-png", "link-outside", "link-inside", "dangling-link", "hidden", "npy-among-images",
)


def image_bytes(fmt: str = "PNG", size: tuple[int, int] = (12, 10), seed: int = 0) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def png_declaring(width: int, height: int) -> bytes:
    """A small valid PNG whose IHDR is patched to declare ``width`` x ``height`` (CRC fixed), so
    that only its header tells the truth about what decoding it would take."""
    data = bytearray(image_bytes("PNG", (1, 1)))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF)
    return bytes(data)


def _flipped(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def make_entry(folder: Path, outside: Path, kind: str, index: int, rng: random.Random) -> None:
    """One entry of ``kind`` in ``folder`` (``outside``: a folder beside it, for links)."""
    name = f"{index:03d}_{kind}"
    png, jpeg = image_bytes("PNG", seed=index), image_bytes("JPEG", seed=index)
    files = {
        "good-png": (".png", png), "good-jpeg": (".jpg", jpeg),
        "huge-png": (".png", png_declaring(30000, 30000)),
        "over-limit-png": (".png", png_declaring(10000, 10000)),  # over Pillow's limit, under twice it
        "large-png": (".png", png_declaring(rng.randint(2000, 9000), rng.randint(2000, 9000))),
        "truncated-png": (".png", png[: rng.randrange(1, len(png))]),
        "truncated-jpeg": (".jpg", jpeg[: rng.randrange(1, len(jpeg))]),
        "flipped-png": (".png", _flipped(png, rng)), "flipped-jpeg": (".jpeg", _flipped(jpeg, rng)),
        "zero-bytes": (".png", b""), "gif-as-png": (".png", image_bytes("GIF")),
        "text-as-jpg": (".jpg", b"not an image\n" * 10), "png-as-jpg": (".jpg", png),
        "hidden": (".png", b"\x00" * 10), "npy-among-images": (".npy", b"\x93NUMPY"),
    }
    if kind in files:
        suffix, content = files[kind]
        (folder / (("." if kind == "hidden" else "") + name + suffix)).write_bytes(content)
    elif kind == "folder-named-png":
        (folder / f"{name}.png").mkdir()
    elif kind == "fifo-named-png":
        os.mkfifo(folder / f"{name}.png")
    elif kind == "link-outside":
        target = outside / f"{name}.png"
        target.write_bytes(png)
        (folder / f"{name}.png").symlink_to(target)
    elif kind == "link-inside":
        (folder / f"{name}_target.png").write_bytes(png)
        (folder / f"{name}.png").symlink_to(folder / f"{name}_target.png")
    elif kind == "dangling-link":
        (folder / f"{name}.png").symlink_to(folder / "missing.png")
    else:
        raise ValueError(kind)


def make_case(folder: Path, outside: Path, rng: random.Random) -> list[str]:
    """A folder of one to three good images and up to two entries of any kind (none in about a
    quarter of the cases, so that some folders still calibrate); the kinds made, shuffled."""
    folder.mkdir(parents=True)
    outside.mkdir(parents=True, exist_ok=True)
    kinds = [rng.choice(("good-png", "good-jpeg")) for _ in range(rng.randint(1, 3))]
    kinds += [rng.choice(KINDS) for _ in range(rng.choice((0, 1, 1, 2)))]
    rng.shuffle(kinds)
    for index, kind in enumerate(kinds):
        make_entry(folder, outside, kind, index, rng)
    return kinds
