"""Quantization's own measures judge an output's parts as parity does: a backend, the sensitivity
ranking and the mixed-precision search aim at the worst part, so a detector whose boxes dominate the
whole-tensor SQNR is not declared good while its class scores are lost (issue #39, YOLO11n: 25.9 dB
whole, scores 0.5 dB)."""

from __future__ import annotations

import math

import numpy as np

from edge_export.quantization.promotion_steps import AccuracyTarget, evaluate_target
from edge_export.quantization.selection import worst_parity
from edge_export.validators.output_parts import worst_sqnr_db


def _detector_outputs(seed: int = 0) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """Samples of a (1, 4 + 6, 50) head: boxes in pixels, sigmoid scores; the candidate's boxes are
    off by 0.1 px and its scores are noise of the scores' own size."""
    rng = np.random.default_rng(seed)
    refs, outs = [], []
    for _ in range(4):
        boxes, scores = rng.uniform(0, 320, (1, 4, 50)), rng.uniform(0, 1, (1, 6, 50))
        ref = np.concatenate([boxes, scores], axis=1).astype(np.float32)
        out = np.concatenate([boxes + rng.normal(0, 0.1, boxes.shape), rng.uniform(0, 1, scores.shape)], axis=1).astype(np.float32)
        refs.append([ref])
        outs.append([out])
    return refs, outs


def test_the_worst_part_limits_the_sqnr():
    refs, outs = _detector_outputs()
    ref, out = np.stack([r[0] for r in refs]), np.stack([o[0] for o in outs])
    whole = 10 * math.log10(float((ref.astype(np.float64) ** 2).sum() / ((ref - out).astype(np.float64) ** 2).sum()))
    assert whole > 20  # the boxes dominate the whole tensor
    assert worst_sqnr_db(ref, out) < 5  # the scores part is noise
    assert worst_parity(refs, outs)[0] == worst_sqnr_db(ref, out)


def test_the_search_target_is_missed_on_a_lost_part():
    refs, outs = _detector_outputs()
    check = evaluate_target(outs, refs, AccuracyTarget(min_sqnr_db=20.0))
    assert not check.met and check.sqnr_db < 5


def test_an_ordinary_output_reads_its_plain_sqnr_and_nan_is_the_worst():
    ref = np.linspace(-1, 1, 200, dtype=np.float32).reshape(2, 1, 10, 10)
    out = ref + np.float32(0.01)
    assert worst_sqnr_db(ref, out) == worst_sqnr_db(ref.ravel(), out.ravel())
    bad = out.copy()
    bad[0, 0, 0, 0] = np.nan
    assert math.isnan(worst_parity([[ref[0]], [ref[1]]], [[bad[0]], [bad[1]]])[0])


def test_one_vector_per_sample_is_judged_whole():
    """An embedding's near-zero dimensions are no lost part (MiniLM's all-int16 model read 0.0 dB
    on them with a cosine of 0.9988)."""
    rng = np.random.default_rng(3)
    ref = np.concatenate([rng.normal(0, 1, (6, 1, 40)), rng.normal(0, 1e-4, (6, 1, 4))], axis=2).astype(np.float32)
    out = ref.copy()
    out[..., 40:] = 0.0
    out[..., :40] += np.float32(0.01)
    assert worst_sqnr_db(ref, out) > 30
