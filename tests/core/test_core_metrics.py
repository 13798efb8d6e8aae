"""Parity metrics on arrays whose answers are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_export.validators import metrics as M


def test_exact_match():
    a = np.array([1.0, -2.0, 3.0])
    assert M.max_abs_error(a, a) == 0.0
    assert M.mean_abs_error(a, a) == 0.0
    assert M.relative_l2_error(a, a) == 0.0
    assert M.cosine_similarity(a, a) == pytest.approx(1.0)
    assert M.sqnr_db(a, a) == M.SQNR_CAP_DB


def test_known_errors():
    ref = np.array([3.0, 4.0])  # norm 5
    out = np.array([3.0, 4.5])
    assert M.max_abs_error(ref, out) == pytest.approx(0.5)
    assert M.mean_abs_error(ref, out) == pytest.approx(0.25)
    assert M.relative_l2_error(ref, out) == pytest.approx(0.1)
    # signal 25, noise 0.25 -> 10*log10(100) = 20 dB
    assert M.sqnr_db(ref, out) == pytest.approx(20.0)


def test_sqnr_noise_ten_percent_amplitude_is_20db():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(10000)
    out = ref + 0.1 * ref  # noise power is 1% of signal power
    assert M.sqnr_db(ref, out) == pytest.approx(20.0, abs=1e-9)


def test_cosine_orthogonal_and_opposite():
    assert M.cosine_similarity(np.array([1.0, 0.0]), np.array([0.0, 2.0])) == pytest.approx(0.0)
    assert M.cosine_similarity(np.array([1.0, 2.0]), np.array([-1.0, -2.0])) == pytest.approx(-1.0)
    assert M.cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert M.cosine_similarity(np.zeros(3), np.ones(3)) == 0.0


def test_zero_reference():
    z = np.zeros(4)
    assert M.relative_l2_error(z, np.ones(4)) == math.inf
    assert M.sqnr_db(z, np.ones(4)) == -M.SQNR_CAP_DB


def test_top1_agreement():
    ref = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [1, 0, 0]])
    out = np.array([[0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.2, 0.3, 0.5], [1, 0, 0]])
    assert M.top1_agreement(ref, out) == pytest.approx(0.75)


def test_looks_like_logits():
    assert M.looks_like_logits((1, 10))
    assert M.looks_like_logits((10,))
    assert not M.looks_like_logits((1, 1))
    assert not M.looks_like_logits((1, 3, 8, 8))


def test_error_in_steps():
    assert M.error_in_steps(np.array([0.0, 1.0]), np.array([0.0, 1.5]), scale=0.25) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        M.error_in_steps(np.zeros(1), np.zeros(1), scale=0.0)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError):
        M.max_abs_error(np.zeros(3), np.zeros(4))


def test_compare_outputs_collects_every_failure():
    from edge_export.config import Thresholds
    from edge_export.validators.parity import compare_outputs

    ref = [[np.array([[1.0, 2.0, 3.0]]), np.ones((1, 2, 2, 2))]]
    good = [[np.array([[1.0, 2.0, 3.0]]), np.ones((1, 2, 2, 2)) * 1.5]]
    res = compare_outputs(ref, good, names=["a", "b"], thresholds=Thresholds(atol=0.1, min_sqnr_db=30), runtime="t")
    assert not res.passed
    assert res.outputs[0].passed and not res.outputs[1].passed
    assert res.worst()["output"] == "b"
    assert set(res.worst()["failed_checks"]) == {"max_abs_error", "sqnr_db"}
    bad_shape = [[np.zeros((1, 3)), np.zeros((1, 2))]]
    res2 = compare_outputs(ref, bad_shape, names=["a", "b"], thresholds=Thresholds(), runtime="t")
    assert "shape mismatch" in res2.outputs[1].error
