"""Synthetic calibration that looks like the model's domain: natural-image-like pictures in the
normalized range when the image preprocessing (--mean/--std) is known."""

from __future__ import annotations

import numpy as np

from edge_export.config import InputSpec
from edge_export.quantization import synthetic_calibration
from edge_export.quantization.synthetic_calibration import natural_image_like

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _neighbour_correlation(image: np.ndarray) -> float:
    return float(np.corrcoef(image[:, :-1].ravel(), image[:, 1:].ravel())[0, 1])


def test_natural_image_like_pictures_are_smooth_and_in_0_1():
    rng = np.random.default_rng(0)
    pictures = [natural_image_like(rng, 3, 48, 48) for _ in range(8)]
    assert all(p.shape == (3, 48, 48) and p.min() >= 0.0 and p.max() <= 1.0 for p in pictures)
    # neighbouring pixels correlate as in photographs (white noise: about 0)
    assert min(_neighbour_correlation(p[0]) for p in pictures) > 0.5
    assert abs(_neighbour_correlation(rng.standard_normal((48, 48)))) < 0.1
    # RGB channels share most of their structure
    assert np.mean([np.corrcoef(p[0].ravel(), p[1].ravel())[0, 1] for p in pictures]) > 0.5
    assert np.ptp([p.mean() for p in pictures]) > 0.1  # each picture its own brightness


def test_synthetic_images_are_normalized_with_mean_and_std_in_either_layout():
    nchw = synthetic_calibration([InputSpec((1, 3, 16, 16))], 6, seed=3, image_mean=MEAN, image_std=STD)
    nhwc = synthetic_calibration(
        [InputSpec((1, 16, 16, 3))], 6, seed=3, image_mean=MEAN, image_std=STD, layout="nhwc"
    )
    low = (0 - np.array(MEAN)) / np.array(STD)
    high = (1 - np.array(MEAN)) / np.array(STD)
    for (x,), (y,) in zip(nchw.samples, nhwc.samples):
        assert x.shape == (1, 3, 16, 16) and x.dtype == np.float32
        np.testing.assert_allclose(x[0].transpose(1, 2, 0), y[0], rtol=1e-6)  # same pictures, other layout
        for c in range(3):
            assert low[c] - 1e-5 <= x[0, c].min() and x[0, c].max() <= high[c] + 1e-5
    assert "natural-image-like" in nchw.source and not nchw.real_data


def test_non_image_inputs_keep_their_synthetic_kind():
    specs = [InputSpec((1, 3, 16, 16)), InputSpec((1, 8, 32)), InputSpec((1, 8), "int64")]
    sample = synthetic_calibration(specs, 2, image_mean=MEAN, image_std=STD).samples[0]
    assert sample[1].min() < 0  # the sequence input stays standard normal
    assert sample[2].dtype == np.int64 and sample[2].min() >= 0
    plain = synthetic_calibration(specs[:1], 2)
    assert "normal" in plain.source and plain.samples[0][0].min() < low_bound(MEAN, STD)


def low_bound(mean, std) -> float:
    return float(min((0 - np.array(mean)) / np.array(std)))


# ---- drawn like the example inputs (what the export pipeline calibrates on without data) ----------


def _picture_example(layout: str = "nchw") -> np.ndarray:
    picture = (natural_image_like(np.random.default_rng(11), 3, 32, 32) - np.reshape(MEAN, (3, 1, 1))) / np.reshape(STD, (3, 1, 1))
    picture = picture if layout == "nchw" else picture.transpose(1, 2, 0)
    return picture[None].astype(np.float32)


def test_pixel_correlation_tells_pictures_from_noise_and_nothing_from_constants():
    from edge_export.quantization.synthetic_calibration import PICTURE_CORRELATION, pixel_correlation

    rng = np.random.default_rng(0)
    assert pixel_correlation(_picture_example()) > 0.5
    assert pixel_correlation(_picture_example("nhwc"), "nhwc") > 0.5
    assert abs(pixel_correlation(rng.standard_normal((1, 3, 32, 32)))) < 0.1 < PICTURE_CORRELATION
    assert pixel_correlation(np.ones((1, 3, 8, 8))) == 0.0
    assert pixel_correlation(np.full((1, 3, 8, 8), np.nan)) == 0.0


def test_calibration_follows_the_examples_range_and_scale():
    """Token ids across the example's vocabulary (not only 0-9), floats at the example's scale."""
    import torch

    specs = [InputSpec((1, 64), "int64"), InputSpec((1, 8, 32)), InputSpec((1, 4), "bool")]
    ids = torch.arange(100, 1100, 1000 // 64)[:64].reshape(1, 64)
    features = torch.randn(1, 8, 32) * 5.0 + 3.0
    calib = synthetic_calibration(specs, 8, seed=1, like=(ids, features, torch.ones(1, 4, dtype=torch.bool)))
    tokens = np.stack([s[0] for s in calib.samples])
    assert tokens.dtype == np.int64 and tokens.min() >= 100 and tokens.max() <= int(ids.max())
    assert tokens.max() > 900  # the whole range, not the first ten ids
    floats = np.stack([s[1] for s in calib.samples])
    assert abs(floats.mean() - float(features.mean())) < 0.3 and abs(floats.std() / float(features.std()) - 1) < 0.05
    assert all(s[2].dtype == bool for s in calib.samples)
    assert calib.source == "synthetic (like the example inputs, seed 1)" and not calib.real_data


def test_a_picture_example_gets_pictures_and_noise_alternately_in_either_layout():
    from edge_export.quantization.synthetic_calibration import PICTURE_CORRELATION, pixel_correlation

    for layout in ("nchw", "nhwc"):
        example = _picture_example(layout)
        spec = InputSpec(example.shape)
        calib = synthetic_calibration([spec], 16, seed=2, like=(example,), layout=layout)
        correlations = [pixel_correlation(s[0], layout) for s in calib.samples]
        assert all(c > PICTURE_CORRELATION for c in correlations[0::2]) and all(abs(c) < 0.2 for c in correlations[1::2])
        pictures = np.concatenate([s[0] for s in calib.samples[0::2]])
        axes = (0, 2, 3) if layout == "nchw" else (0, 1, 2)
        channel_axis_example = example.mean(axis=(0, 2, 3) if layout == "nchw" else (0, 1, 2))
        np.testing.assert_allclose(pictures.mean(axis=axes), channel_axis_example, atol=1e-3)
        assert pictures[:1].shape == example.shape and pictures.dtype == np.float32
        assert "natural-image-like pictures and noise" in calib.source
        noise = np.concatenate([s[0] for s in calib.samples[1::2]])
        assert abs(float(noise.std()) / float(example.std()) - 1) < 0.05  # the example's spread


def test_a_noise_example_and_a_non_image_shape_get_noise_only():
    """The CLI's --input-shape example is noise: no pictures are made up for it."""
    from edge_export.quantization.synthetic_calibration import pixel_correlation

    import torch

    noise = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    calib = synthetic_calibration([InputSpec((1, 3, 32, 32))], 6, seed=2, like=(noise,))
    assert all(abs(pixel_correlation(s[0])) < 0.2 for s in calib.samples)
    assert "pictures" not in calib.source
    smooth_wide = np.repeat(_picture_example()[:, :1], 8, axis=1)  # 8 channels: not an image input
    calib = synthetic_calibration([InputSpec(smooth_wide.shape)], 4, seed=2, like=(smooth_wide,))
    assert "pictures" not in calib.source


def test_non_finite_examples_do_not_poison_the_draw():
    example = _picture_example()
    example[0, 0, :4, :4] = np.nan
    example[0, 1, 0, 0] = np.inf
    calib = synthetic_calibration([InputSpec(example.shape)], 4, seed=0, like=(example,))
    assert all(np.all(np.isfinite(s[0])) for s in calib.samples)


def test_without_an_example_the_draw_is_unchanged():
    """Existing seeds keep their samples: the plain draw is standard normal and ids 0-9."""
    specs = [InputSpec((1, 3, 8, 8)), InputSpec((1, 4), "int64")]
    rng = np.random.default_rng(4)
    expected = [(rng.standard_normal((1, 3, 8, 8)).astype(np.float32), rng.integers(0, 10, (1, 4))) for _ in range(3)]
    calib = synthetic_calibration(specs, 3, seed=4)
    for (x, ids), (ex, eids) in zip(calib.samples, expected):
        np.testing.assert_array_equal(x, ex)
        np.testing.assert_array_equal(ids, eids)


def test_the_noise_beside_a_narrow_picture_has_its_spread():
    """A [0, 1] picture (digits, unnormalized pixels): the noise samples are at its scale, as parity's."""
    picture = natural_image_like(np.random.default_rng(5), 1, 16, 16)[None].astype(np.float32)
    calib = synthetic_calibration([InputSpec(picture.shape)], 64, seed=0, like=(picture,))
    noise = np.concatenate([s[0] for s in calib.samples[1::2]])
    assert float(picture.std()) < 0.5 and abs(float(noise.std()) / float(picture.std()) - 1) < 0.05
    assert abs(float(noise.mean()) - float(picture.mean())) < 0.05


def test_the_export_calibrates_like_its_example_and_never_on_it():
    """The export stage's synthetic set follows the example it was given (token ids in its range,
    pictures for a picture), with a seed apart from parity's, so no calibration sample is the example."""
    import torch

    from edge_export.options import ExportOptions
    from edge_export.stages.samples import calibration_sets

    picture = torch.from_numpy(_picture_example())
    ids = torch.arange(1000, 1064).reshape(1, 64)
    specs = [InputSpec(tuple(picture.shape), name="image"), InputSpec((1, 64), "int64", name="ids")]
    calibration, heldout = calibration_sets(ExportOptions.from_keywords(quantize="int8", calibration_samples=8), specs, (picture, ids))
    assert heldout is None and len(calibration) == 8
    assert "natural-image-like pictures and noise" in calibration.source
    assert all(1000 <= s[1].min() and s[1].max() <= 1063 for s in calibration.samples)
    assert not any(np.array_equal(s[0], picture.numpy()) for s in calibration.samples)


def test_an_example_at_its_types_limits_draws_without_overflow():
    """A hostile example holding int64's extremes: the draws stay in range instead of failing."""
    import torch

    from edge_export.loading.inputs import make_samples

    big = torch.tensor([[np.iinfo(np.int64).min, np.iinfo(np.int64).max]])
    spec = InputSpec((1, 2), "int64")
    calib = synthetic_calibration([spec], 3, seed=0, like=(big,))
    assert all(s[0].dtype == np.int64 for s in calib.samples)
    assert len(make_samples([spec], 3, 0, (big,))) == 3
