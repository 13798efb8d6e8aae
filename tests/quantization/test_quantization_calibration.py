"""Calibration data: every accepted format, and every kind of bad data refused with the file named."""

from __future__ import annotations

import numpy as np
import pytest

from edge_export.config import InputSpec
from edge_export.errors import CalibrationDataError, UsageError
from edge_export.quantization import CalibrationSet, load_calibration_data, synthetic_calibration

IMG = InputSpec((1, 3, 8, 8), name="image")
VEC = InputSpec((1, 5), name="extra")


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- accepted formats ---------------------------------------------------------------------------


def test_npz_keyed_by_input_name_splits_stacks(tmp_path):
    path = tmp_path / "calib.npz"
    images, extras = _rand(6, 1, 3, 8, 8), _rand(6, 1, 5, seed=1)
    np.savez(path, image=images, extra=extras)
    calib = load_calibration_data(path, [IMG, VEC])
    assert len(calib) == 6 and calib.real_data and calib.source == str(path)
    assert calib.samples[2][0].shape == (1, 3, 8, 8) and calib.samples[2][1].shape == (1, 5)
    np.testing.assert_array_equal(calib.samples[2][0], images[2])
    np.testing.assert_array_equal(calib.samples[5][1], extras[5])


def test_npz_keyed_by_position_and_numpy_default_names(tmp_path):
    by_pos = tmp_path / "pos.npz"
    np.savez(by_pos, **{"0": _rand(3, 1, 3, 8, 8), "1": _rand(3, 1, 5)})
    default = tmp_path / "default.npz"
    np.savez(default, _rand(4, 1, 3, 8, 8), _rand(4, 1, 5))  # arr_0, arr_1
    assert len(load_calibration_data(by_pos, [IMG, VEC])) == 3
    assert len(load_calibration_data(default, [IMG, VEC])) == 4


def test_npy_single_sample_stack_and_batchless_stack(tmp_path):
    one, stack, batchless = tmp_path / "one.npy", tmp_path / "stack.npy", tmp_path / "batchless.npy"
    np.save(one, _rand(1, 3, 8, 8))
    np.save(stack, _rand(5, 1, 3, 8, 8))
    np.save(batchless, _rand(7, 3, 8, 8))  # (N, C, H, W) for a batch-1 input: N samples
    assert len(load_calibration_data(one, [IMG])) == 1
    assert len(load_calibration_data(stack, [IMG])) == 5
    calib = load_calibration_data(batchless, [IMG])
    assert len(calib) == 7 and calib.samples[0][0].shape == (1, 3, 8, 8)


def test_float64_is_accepted_and_cast(tmp_path):
    path = tmp_path / "f64.npy"
    np.save(path, _rand(2, 1, 3, 8, 8).astype(np.float64))
    assert load_calibration_data(path, [IMG]).samples[0][0].dtype == np.float32


def test_folder_of_npy_files_and_max_samples(tmp_path):
    for i in range(5):
        np.save(tmp_path / f"s{i}.npy", _rand(1, 3, 8, 8, seed=i))
    calib = load_calibration_data(tmp_path, [IMG], max_samples=3)
    assert len(calib) == 3
    np.testing.assert_array_equal(calib.samples[1][0], _rand(1, 3, 8, 8, seed=1))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_folder_of_images_resized_normalized_in_layout(tmp_path, layout):
    from PIL import Image

    red = np.zeros((20, 30, 3), dtype=np.uint8)
    red[..., 0] = 255
    Image.fromarray(red).save(tmp_path / "a.png")
    Image.fromarray(red).save(tmp_path / "b.jpg", quality=100)
    spec = InputSpec((1, 3, 8, 8)) if layout == "nchw" else InputSpec((1, 8, 8, 3))
    calib = load_calibration_data(
        tmp_path, [spec], mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), layout=layout, image_size=(8, 8)
    )
    assert len(calib) == 2 and calib.samples[0][0].shape == spec.shape
    x = calib.samples[0][0][0]
    red_plane = x[0] if layout == "nchw" else x[..., 0]
    green_plane = x[1] if layout == "nchw" else x[..., 1]
    np.testing.assert_allclose(red_plane, 1.0, atol=0.02)  # (1 - 0.5) / 0.5
    np.testing.assert_allclose(green_plane, -1.0, atol=0.02)


def test_split_holds_out_the_last_samples():
    calib = synthetic_calibration([IMG], n=10, seed=3)
    train, hold = calib.split(3)
    assert len(train) == 7 and len(hold) == 3
    np.testing.assert_array_equal(hold.samples[0][0], calib.samples[7][0])
    assert not calib.real_data and "synthetic" in calib.source
    # A holdout can never take every sample.
    train1, _ = synthetic_calibration([IMG], n=2).split(5)
    assert len(train1) == 1


def test_synthetic_calibration_matches_specs_and_seed():
    specs = [IMG, InputSpec((1, 4), dtype="int64")]
    a, b = synthetic_calibration(specs, n=3, seed=7), synthetic_calibration(specs, n=3, seed=7)
    assert a.samples[0][0].shape == (1, 3, 8, 8) and a.samples[0][1].dtype == np.int64
    np.testing.assert_array_equal(a.samples[2][0], b.samples[2][0])
    assert a.summary().real_data is False


# ---- refused data -------------------------------------------------------------------------------


def _refused(path, specs, *fragments, **kw):
    with pytest.raises(CalibrationDataError) as info:
        load_calibration_data(path, specs, **kw)
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, text
    return text


def test_wrong_shape_names_file_and_shapes(tmp_path):
    path = tmp_path / "bad.npy"
    np.save(path, _rand(4, 1, 3, 9, 9))
    _refused(path, [IMG], str(path), "(4, 1, 3, 9, 9)", "(1, 3, 8, 8)")


def test_wrong_dtype(tmp_path):
    path = tmp_path / "ints.npy"
    np.save(path, np.ones((2, 1, 3, 8, 8), dtype=np.uint8))
    _refused(path, [IMG], str(path), "uint8", "float32")


def test_sample_count_differs_between_inputs(tmp_path):
    path = tmp_path / "uneven.npz"
    np.savez(path, image=_rand(4, 1, 3, 8, 8), extra=_rand(3, 1, 5))
    _refused(path, [IMG, VEC], str(path), "different number of samples", ": 4", ": 3")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf(tmp_path, bad):
    path = tmp_path / "nonfinite.npz"
    images = _rand(3, 1, 3, 8, 8)
    images[1, 0, 0, 0, 0] = bad
    np.savez(path, image=images)
    _refused(path, [IMG], str(path), "NaN or Inf")


def test_empty_folder(tmp_path):
    _refused(tmp_path, [IMG], str(tmp_path), "no .npy files and no JPEG/PNG images")


def test_unreadable_image(tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "good.png")
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg at all")
    _refused(tmp_path, [IMG], str(tmp_path / "broken.jpg"), "Cannot read the calibration image")


def test_missing_and_extra_npz_keys(tmp_path):
    missing = tmp_path / "missing.npz"
    np.savez(missing, image=_rand(2, 1, 3, 8, 8))
    _refused(missing, [IMG, VEC], str(missing), "no array for input 1 ('extra')")
    extra = tmp_path / "extra.npz"
    # 'labels' is not extra: it labels the samples (calibration_labels.py); 'targets' is
    np.savez(extra, image=_rand(2, 1, 3, 8, 8), extra=_rand(2, 1, 5), targets=np.arange(2))
    _refused(extra, [IMG, VEC], str(extra), "targets", "match no model input")


def test_npy_for_a_two_input_model(tmp_path):
    path = tmp_path / "one.npy"
    np.save(path, _rand(2, 1, 3, 8, 8))
    _refused(path, [IMG, VEC], str(path), "2 inputs")


def test_missing_path_unknown_suffix_and_corrupt_npy(tmp_path):
    _refused(tmp_path / "nope.npz", [IMG], "does not exist")
    other = tmp_path / "data.csv"
    other.write_text("1,2,3")
    _refused(other, [IMG], str(other), "neither .npz, .npy nor a folder")
    corrupt = tmp_path / "corrupt.npy"
    corrupt.write_bytes(b"\x93NUMPY garbage")
    _refused(corrupt, [IMG], str(corrupt), "Cannot read")


def test_image_size_that_contradicts_the_input_shape(tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    _refused(tmp_path, [IMG], "--image-size 16x16", image_size=(16, 16))


def test_bad_options_are_usage_errors(tmp_path):
    np.save(tmp_path / "x.npy", _rand(1, 3, 8, 8))
    with pytest.raises(UsageError):
        load_calibration_data(tmp_path / "x.npy", [IMG], max_samples=0)
    with pytest.raises(UsageError):
        load_calibration_data(tmp_path / "x.npy", [IMG], layout="chwn")
    with pytest.raises(CalibrationDataError):
        CalibrationSet((), "nothing", True)
