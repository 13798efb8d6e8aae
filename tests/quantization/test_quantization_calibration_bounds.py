"""Calibration data is bounded before anything is decoded (quantization/calibration_bounds.py): a
folder's file count (listed lazily), each image's declared pixels, the decoded size of everything
read; links out of the folder and files that are not regular are never read. Over a bound: exit 2
naming the path, what was found, the bound and the fix, nothing written."""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import pytest

from edge_export.config import InputSpec
from edge_export.errors import CalibrationDataError
from edge_export.quantization import calibration_bounds, load_calibration_data
from edge_export.quantization.calibration_bounds import DECODE_BUDGET_BYTES, MAX_CALIBRATION_FILES, MAX_IMAGE_PIXELS
from image_mutations import image_bytes, png_declaring

IMG = InputSpec((1, 3, 8, 8), name="x")


def _refusal(path, *words, **kwargs) -> str:
    with pytest.raises(CalibrationDataError) as info:
        load_calibration_data(path, [IMG], **kwargs)
    assert info.value.exit_code == 2
    text = str(info.value)
    for word in words:
        assert word in text, text
    return text


def _images(folder, count, fmt="PNG"):
    folder.mkdir(exist_ok=True)
    for i in range(count):
        (folder / f"{i:03d}.{fmt.lower()}").write_bytes(image_bytes(fmt, seed=i))
    return folder


# ---- the bounds --------------------------------------------------------------------------------


def test_a_folder_over_the_file_cap_is_refused(tmp_path):
    for i in range(MAX_CALIBRATION_FILES + 1):
        (tmp_path / f"{i:05d}.png").touch()
    _refusal(tmp_path, str(tmp_path), f"more than {MAX_CALIBRATION_FILES:,} entries", ".npz")


class _EndlessFolder:
    """os.scandir of a folder that never ends: only a lazy count can refuse it."""

    def __init__(self, folder):
        self.folder, self.yielded = folder, 0

    def __call__(self, path):
        return contextlib.nullcontext(self._entries())

    def _entries(self):
        while True:
            self.yielded += 1
            yield self.folder  # a DirEntry of a real file: is_file() and is_symlink() answer


def test_the_folder_is_counted_lazily(tmp_path, monkeypatch):
    (tmp_path / "a.png").write_bytes(image_bytes())
    entry = next(os.scandir(tmp_path))
    endless = _EndlessFolder(entry)
    monkeypatch.setattr(calibration_bounds.os, "scandir", endless)
    _refusal(tmp_path, "more than")
    assert endless.yielded == MAX_CALIBRATION_FILES + 1


def test_tiny_pngs_declaring_huge_images_are_refused_before_decoding(tmp_path):
    side = 9000  # 81 Mpx: under the per-image limit; 27 of them are over the budget
    count = DECODE_BUDGET_BYTES // (side * side * 4) + 2
    for i in range(count):
        (tmp_path / f"{i:03d}.png").write_bytes(png_declaring(side, side))
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < 100 * count
    start = time.perf_counter()
    text = _refusal(tmp_path, str(tmp_path), f"({count:,} files to read)", "8.0 GiB", "--calibration-samples")
    assert time.perf_counter() - start < 2.0, text  # headers only: nothing was decoded


@pytest.mark.parametrize("side", [10000, 30000])
def test_one_image_over_the_pixel_limit_is_refused(tmp_path, side):
    """Over Pillow's limit (a warning there) and over twice it (its error): both exit 2 here."""
    _images(tmp_path, 2)
    (tmp_path / "bomb.png").write_bytes(png_declaring(side, side))
    _refusal(tmp_path, str(tmp_path / "bomb.png"), f"{side * side}")


def test_the_pixel_limit_holds_when_pillow_has_none(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    _images(tmp_path, 2)
    (tmp_path / "bomb.png").write_bytes(png_declaring(10000, 10000))
    _refusal(tmp_path, str(tmp_path / "bomb.png"), "10000x10000", f"{MAX_IMAGE_PIXELS:,}")


def test_calibration_samples_bound_what_is_read(tmp_path):
    """The refused folder above is fine with --calibration-samples: only the first files are read."""
    _images(tmp_path, 3)
    for i in range(40):
        (tmp_path / f"z{i:03d}.png").write_bytes(png_declaring(9000, 9000))
    data = load_calibration_data(tmp_path, [IMG], max_samples=3)
    assert len(data) == 3


def test_npz_and_npy_folders_are_held_to_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration_bounds, "DECODE_BUDGET_BYTES", 1000)
    archive = tmp_path / "calib.npz"
    np.savez(archive, x=np.zeros((8, 1, 3, 8, 8), np.float32))
    _refusal(archive, str(archive), "arrays", "Save fewer samples")
    folder = tmp_path / "arrays"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"{i}.npy", np.zeros((1, 3, 8, 8), np.float32))
    _refusal(folder, str(folder), "(3 files to read)")
    assert len(load_calibration_data(folder, [IMG], max_samples=1)) == 1  # 768 bytes: within


# ---- what is read at all -----------------------------------------------------------------------


def test_a_link_out_of_the_folder_is_refused(tmp_path):
    folder = _images(tmp_path / "calib", 2)
    (tmp_path / "secret.png").write_bytes(image_bytes())
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    _refusal(folder, "link.png", "outside", str(tmp_path / "secret.png"))
    (folder / "link.png").unlink()
    (folder / "up.png").symlink_to("..")
    _refusal(folder, "up.png", "outside")


def test_links_inside_fifos_folders_and_other_formats(tmp_path):
    folder = _images(tmp_path / "calib", 2)
    (folder / "same.png").symlink_to(folder / "000.png")  # inside: read as any file
    os.mkfifo(folder / "pipe.png")  # never opened: a FIFO would block the read
    (folder / "dir.png").mkdir()
    assert len(load_calibration_data(folder, [IMG])) == 3
    (folder / "anim.png").write_bytes(image_bytes("GIF"))  # Pillow reads GIF; only PNG and JPEG are opened
    _refusal(folder, "anim.png", "Cannot read the calibration image")


def test_a_png_named_jpg_and_a_normal_folder_still_load(tmp_path):
    folder = _images(tmp_path / "calib", 3, "JPEG")
    (folder / "png_named.jpg").write_bytes(image_bytes("PNG"))
    data = load_calibration_data(folder, [IMG], mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    assert len(data) == 4 and data.samples[0][0].shape == (1, 3, 8, 8)
    assert all(np.isfinite(s[0]).all() for s in data.samples)


# ---- through the CLI: exit 2 in seconds, nothing written ----------------------------------------


@pytest.fixture(scope="module")
def tiny_pt2(tmp_path_factory):
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(256, 3)).eval()
    path = tmp_path_factory.mktemp("bounds") / "tiny.pt2"
    torch.export.save(torch.export.export(net, (torch.zeros(1, 3, 8, 8),)), path)
    return path


@pytest.mark.parametrize("folder_kind", ["too-many-files", "decode-bomb"])
def test_the_cli_refuses_a_bounded_folder_with_exit_2(run_cli, tiny_pt2, tmp_path, folder_kind):
    folder = tmp_path / "calib"
    folder.mkdir()
    if folder_kind == "too-many-files":
        for i in range(MAX_CALIBRATION_FILES + 1):
            (folder / f"{i:05d}.png").touch()
    else:
        for i in range(DECODE_BUDGET_BYTES // (9000 * 9000 * 4) + 2):
            (folder / f"{i:03d}.png").write_bytes(png_declaring(9000, 9000))
    start = time.perf_counter()
    res = run_cli(tiny_pt2, "-o", tmp_path / "out" / "m.tflite", "--quantize", "int8", "--calibration-data", folder)
    assert res.exit_code == 2, res.stderr
    said = res.stderr.replace("\n", "")
    assert "Traceback" not in said and str(folder) in said
    assert ("more than 10,000 entries" if folder_kind == "too-many-files" else "decodes to at least") in said, said
    assert not (tmp_path / "out").exists()
    assert time.perf_counter() - start < 30


def test_calibration_samples_read_only_their_files_and_the_held_out_ones(tmp_path):
    """--calibration-samples 4 with --samples 2: the first 6 images are read (4 calibrate, 2 check
    parity), so bombs after them are never opened. (A normal folder through the CLI:
    test_quantization_cli.py::test_calibration_images_folder.)"""
    import torch

    from edge_export.config import QuantizeMode
    from edge_export.options import ExportOptions
    from edge_export.stages.samples import calibration_sets

    folder = _images(tmp_path / "calib", 6)
    for i in range(30):
        (folder / f"z{i:03d}.png").write_bytes(png_declaring(9000, 9000))
    options = ExportOptions.from_keywords(quantize=QuantizeMode.INT8, calibration_data=str(folder), calibration_samples=4, samples=2)
    calibration, heldout = calibration_sets(options, [IMG], (torch.zeros(1, 3, 8, 8),))
    assert len(calibration) == 4 and len(heldout) == 2
    without = ExportOptions.from_keywords(quantize=QuantizeMode.INT8, calibration_data=str(folder), samples=2)
    with pytest.raises(CalibrationDataError, match="--calibration-samples"):
        calibration_sets(without, [IMG], (torch.zeros(1, 3, 8, 8),))
