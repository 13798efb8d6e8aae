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


def test_top1_agreement_counts_ties_as_agreement():
    # a quantized output often ties two classes at the top: either one agrees
    ref = np.array([[0.1, 0.9, 0.0]])
    tied = np.array([[0.5, 0.5, 0.0]])
    assert M.top1_agreement(ref, tied) == 1.0
    assert M.top1_agreement(ref, np.array([[0.6, 0.5, 0.0]])) == 0.0


def test_topk_agreement_known_answers():
    ref = np.zeros((3, 10))
    ref[:, 0] = 1.0  # PyTorch's top class is 0 in every row
    out = np.tile(np.arange(10.0)[::-1], (3, 1))  # class 0 first
    out[1] = np.arange(10.0)  # class 0 last: rank 10
    out[2, 0] = 5.5  # class 0 ranks 5th (9, 8, 7, 6 score higher)
    assert M.topk_agreement(ref, out, 5) == pytest.approx(2 / 3)
    assert M.topk_agreement(ref, out, 1) == pytest.approx(1 / 3)


def test_topk_not_computable_without_enough_classes():
    with pytest.raises(M.NotComputable, match="1 class"):
        M.top1_agreement(np.ones((4, 1)), np.ones((4, 1)))
    with pytest.raises(M.NotComputable, match="every class is in the top 5"):
        M.topk_agreement(np.ones((4, 5)), np.ones((4, 5)), 5)


def test_worst_sample_cosine_is_the_minimum_not_the_mean():
    ref = np.array([[1.0, 0.0]] * 9 + [[1.0, 1.0]])
    out = np.array([[1.0, 0.0]] * 9 + [[1.0, -1.0]])  # the last row is orthogonal
    assert M.row_cosines(ref, out) == pytest.approx([1.0] * 9 + [0.0])
    assert M.worst_sample_cosine(ref, out) == pytest.approx(0.0)
    assert M.cosine_similarity(ref, out) == pytest.approx(9 / 11)  # over all samples it hides


def _unit(angles_deg):
    a = np.radians(angles_deg)
    return np.stack([np.cos(a), np.sin(a)], axis=1)


def test_neighbour_agreement_known_answers():
    ref = _unit([0, 10, 90, 100])  # pairs: 0<->1, 2<->3
    assert M.neighbour_agreement(ref, ref) == 1.0
    # move row 1 to 80 degrees: it is now nearest to row 2 (10 away) instead of row 0 (80 away),
    # and row 2's nearest becomes row 1; rows 0 and 3 keep theirs
    moved = _unit([0, 80, 90, 100])
    assert M.neighbour_agreement(ref, moved) == pytest.approx(0.5)
    # the neighbours agree although every vector was scaled: cosine ignores length
    assert M.neighbour_agreement(ref, 3.0 * ref) == 1.0


def test_neighbour_agreement_counts_ties_in_pytorch_as_agreement():
    ref = _unit([0, 10, -10])  # row 0 has two equally near neighbours in PyTorch
    out = _unit([0, 10.5, -9.5])  # the exported model prefers the other one
    assert M.neighbour_agreement(ref, out) == 1.0


def test_neighbour_agreement_needs_three_vectors():
    for n in (1, 2):
        with pytest.raises(M.NotComputable, match="at least 3"):
            M.neighbour_agreement(np.ones((n, 4)), np.ones((n, 4)))


def test_non_finite_arrays_are_not_computable_and_never_an_exact_match():
    ref = np.array([1.0, 2.0, 3.0])
    for bad in (np.nan, np.inf, -np.inf):
        out = np.array([1.0, bad, 3.0])
        assert math.isnan(M.sqnr_db(ref, out))  # was 200 dB ("exact") for NaN, a crash for Inf
        with pytest.raises(M.NotComputable):
            M.worst_sample_cosine(ref[None], out[None])
        with pytest.raises(M.NotComputable):
            M.top1_agreement(ref[None], out[None])


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
    assert res.worst().output == "b"
    assert set(res.worst().failed_checks) == {"max_abs_error", "sqnr_db"}
    bad_shape = [[np.zeros((1, 3)), np.zeros((1, 2))]]
    res2 = compare_outputs(ref, bad_shape, names=["a", "b"], thresholds=Thresholds(), runtime="t")
    assert "shape mismatch" in res2.outputs[1].error
