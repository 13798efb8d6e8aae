"""Thresholds set from the trained-model table (issue #39, docs/BENCHMARKS.md section 30), on arrays
whose answers are known: float32's absolute limit grows with the output's magnitude (boxes in pixels),
a decision gate on few decisions allows one decision, the probability error is one line at int8 and
int16x8, and an embedding is judged as a whole vector, not by dimensions of another range."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_export.config import DEFAULT_THRESHOLDS, OutputKind, QuantizeMode, Thresholds, scaled_atol
from edge_export.validators.output_kinds import KindDecision, KindSource
from edge_export.validators.parity import compare_outputs
from edge_export.validators.probabilities import decision_count, decision_slack

FP32 = DEFAULT_THRESHOLDS[QuantizeMode.NONE]
INT8 = DEFAULT_THRESHOLDS[QuantizeMode.INT8]
INT16X8 = DEFAULT_THRESHOLDS[QuantizeMode.INT16X8]
P = OutputKind.PROBABILITIES


def _checks(result) -> dict:
    (output,) = result.outputs
    return {c.metric: c for c in output.checks}


def test_scaled_atol_is_the_larger_of_the_two_and_nan_safe():
    assert scaled_atol(1e-4, 1e-3, 800.0) == pytest.approx(0.8)
    assert scaled_atol(1e-4, 1e-3, 0.05) == 1e-4  # small values keep the absolute floor
    assert scaled_atol(1e-4, 1e-3, -800.0) == pytest.approx(0.8)
    for magnitude in (math.nan, math.inf):
        assert scaled_atol(1e-4, 1e-3, magnitude) == 1e-4
    assert scaled_atol(1e-4, None, 800.0) == 1e-4 and scaled_atol(None, 1e-3, 800.0) is None


def test_an_atol_given_outright_drops_the_relative_widening():
    assert FP32.atol_relative is not None
    assert FP32.override(atol=1e-3).atol_relative is None
    assert FP32.override(atol=1e-3, atol_relative=1e-2).atol_relative == 1e-2
    assert FP32.override(min_sqnr_db=70.0).atol_relative == FP32.atol_relative
    with pytest.raises(Exception):
        Thresholds(atol_relative=-1.0)


def _pixels(error: float, samples: int = 4) -> tuple[list, list]:
    """[1, 4, 100] boxes up to 800 px, one value off by ``error``."""
    rng = np.random.default_rng(0)
    refs = [rng.uniform(0, 800, size=(1, 4, 100)) for _ in range(samples)]
    refs[0][0, 0, 0] = 800.0
    outs = [r.copy() for r in refs]
    outs[1][0, 2, 7] += error
    return [[r] for r in refs], [[o] for o in outs]


def test_fp32_boxes_in_pixels_are_held_to_a_limit_that_scales_with_them():
    limit = FP32.atol_relative * 800.0
    for error in (0.71, 0.82):  # YOLO11n fp32's largest errors in two runs: every box IoU 1.000
        ref, out = _pixels(error)
        checks = _checks(compare_outputs(ref, out, names=["boxes"], thresholds=FP32, runtime="t"))
        assert checks["max_abs_error"].threshold == pytest.approx(limit) and checks["max_abs_error"].passed
    ref, out = _pixels(limit * 1.5)
    assert _checks(compare_outputs(ref, out, names=["boxes"], thresholds=FP32, runtime="t"))["max_abs_error"].passed is False
    # --atol 1e-4 given outright: the same 0.71 px fails
    ref, out = _pixels(0.71)
    outright = FP32.override(atol=1e-4)
    assert _checks(compare_outputs(ref, out, names=["boxes"], thresholds=outright, runtime="t"))["max_abs_error"].passed is False


def test_small_values_keep_the_absolute_limit():
    ref = [[np.full((1, 10), 0.02)]]  # below atol / atol_relative (0.05): 1e-4 stays the limit
    out = [[np.full((1, 10), 0.02 + 2e-4)]]
    check = _checks(compare_outputs(ref, out, names=["o"], thresholds=FP32, runtime="t"))["max_abs_error"]
    assert check.threshold == 1e-4 and check.passed is False


def test_a_part_is_held_to_its_whole_outputs_float_limit():
    """Boxes up to 800 px and scores in [0, 1] in one fp32 output: the scores part's rounding error
    (3e-4, more than 1e-4) passes under the output's limit, as YOLO11n fp32's did with every score kept."""
    rng = np.random.default_rng(3)
    refs = [np.concatenate([rng.uniform(0, 800, size=(1, 4, 50)), rng.uniform(0, 1, size=(1, 80, 50))], axis=1) for _ in range(4)]
    outs = [r.copy() for r in refs]
    outs[0][0, 10, 3] += 3e-4
    result = compare_outputs([[r] for r in refs], [[o] for o in outs], names=["output_0"], thresholds=FP32, runtime="t")
    (output,) = result.outputs
    boxes, scores = output.parts
    (atol,) = [c for c in scores.checks if c.metric == "max_abs_error"]
    assert atol.threshold == pytest.approx(FP32.atol_relative * max(float(np.max(r)) for r in refs))
    assert atol.passed and result.passed


def test_a_decision_gate_allows_at_least_one_decision():
    assert decision_count((8, 1, 360)) == 8
    assert decision_count((8, 1, 2, 19, 19), axis=2) == 8 * 19 * 19
    assert decision_count((8, 1, 6), per_value=True) == 48
    assert decision_slack(0.9, 8) == pytest.approx(0.875)  # 0.9 would demand all 8: one may differ
    assert decision_slack(0.9, 11) == 0.9 and decision_slack(0.9, 10_000) == 0.9  # the gate allows a flip itself
    assert decision_slack(0.99, 8) == pytest.approx(0.875)
    assert decision_slack(0.9, 1) == 0.9 and decision_slack(0.9, 0) == 0.9  # one decision: no slack


def _pitch_frames(samples: int, moved: int, bins: int = 360) -> tuple[list, list]:
    """Sigmoid bins with one clear peak per frame; ``moved`` frames' peak moves one bin in the export."""
    rng = np.random.default_rng(1)
    refs, outs = [], []
    for s in range(samples):
        peak = int(rng.integers(10, bins - 10))
        ref = np.full((1, bins), 0.01)
        ref[0, peak - 1: peak + 2] = (0.6, 0.9, 0.7)
        out = ref.copy()
        if s < moved:
            out[0, peak + 1] = 0.95
        refs.append([ref])
        outs.append([out])
    return refs, outs


def test_one_bin_moved_on_8_frames_passes_int8_and_two_fail():
    sigmoid = KindDecision(P, KindSource.GRAPH, activation="sigmoid")
    refs, outs = _pitch_frames(8, moved=1)  # CREPE micro: 7 of 8 frames (0.875)
    checks = _checks(compare_outputs(refs, outs, names=["pitch"], thresholds=INT8, runtime="t", kinds=[sigmoid]))
    assert checks["decision_agreement"].value == 0.875 and checks["decision_agreement"].passed
    refs, outs = _pitch_frames(8, moved=2)
    checks = _checks(compare_outputs(refs, outs, names=["pitch"], thresholds=INT8, runtime="t", kinds=[sigmoid]))
    assert checks["decision_agreement"].value == 0.75 and checks["decision_agreement"].passed is False
    # 73% of 400 frames: far below the gate
    refs, outs = _pitch_frames(400, moved=108)
    checks = _checks(compare_outputs(refs, outs, names=["pitch"], thresholds=INT8, runtime="t", kinds=[sigmoid]))
    assert checks["decision_agreement"].value == pytest.approx(0.73) and checks["decision_agreement"].passed is False


def test_the_probability_error_line_is_the_same_at_int8_and_int16x8():
    assert INT16X8.max_probability_error == INT8.max_probability_error
    decision = KindDecision(P, KindSource.GRAPH, activation="softmax", axis=1)
    ref = np.array([[0.7, 0.3]])
    for error, passed in ((0.0214, True), (0.18, False)):  # MTCNN R-Net int16x8 (intact); P-Net int8 (faces lost)
        out = ref + np.array([[-error, error]])
        checks = _checks(compare_outputs([[ref]], [[out]], names=["face"], thresholds=INT16X8, runtime="t", kinds=[decision]))
        assert checks["probability_error"].passed is passed


def test_an_embedding_is_judged_as_a_whole_vector_not_by_dimensions_of_another_range():
    rng = np.random.default_rng(2)
    refs = []
    for _ in range(6):
        v = rng.normal(size=(1, 384))
        v[0, 127] *= 0.01  # a dimension whose range is 100x below the others
        refs.append(v / np.linalg.norm(v))
    outs = [r.copy() for r in refs]
    for o in outs:
        o[0, 127] = 0.0  # lost entirely: the direction barely moves
    embedding = KindDecision(OutputKind.EMBEDDING, KindSource.OPTION)
    result = compare_outputs([[r] for r in refs], [[o] for o in outs], names=["e"], thresholds=INT8, runtime="t", kinds=[embedding])
    (output,) = result.outputs
    assert output.parts is None and result.passed
    assert output.metrics["worst_sample_cosine"] > 0.9999


def _unit_vectors(cosines: list[float], dim: int = 64, seed: int = 4) -> tuple[list, list]:
    """Reference unit vectors and exported ones at exactly the given cosines to them."""
    rng = np.random.default_rng(seed)
    refs, outs = [], []
    for c in cosines:
        v, w = rng.normal(size=dim), rng.normal(size=dim)
        v /= np.linalg.norm(v)
        w -= (w @ v) * v
        w /= np.linalg.norm(w)
        refs.append(v[None, :])
        outs.append((c * v + np.sqrt(1 - c * c) * w)[None, :])
    return refs, outs


def test_int16x8_embeddings_pass_minilms_worst_cosine_and_fail_resemblyzers():
    embedding = KindDecision(OutputKind.EMBEDDING, KindSource.OPTION)
    for worst, passed in ((0.9984, True), (0.9964, False)):  # MiniLM int16x8 (intact); Resemblyzer (neighbours lost)
        refs, outs = _unit_vectors([0.9999, 0.9995, worst, 0.9998, 0.9997])
        checks = _checks(compare_outputs([[r] for r in refs], [[o] for o in outs], names=["e"], thresholds=INT16X8, runtime="t", kinds=[embedding]))
        assert checks["worst_sample_cosine"].value == pytest.approx(worst)
        assert checks["worst_sample_cosine"].passed is passed
