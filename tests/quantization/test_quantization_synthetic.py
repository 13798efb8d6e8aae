"""Synthetic calibration that looks like the model's domain: natural-image-like pictures in the
normalized range when the image preprocessing (--mean/--std) is known."""

from __future__ import annotations

import numpy as np

from edge_export.config import InputSpec
from edge_export.quantization import synthetic_calibration
from edge_export.quantization.calibration import natural_image_like

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
