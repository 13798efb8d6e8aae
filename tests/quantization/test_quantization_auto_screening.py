"""The faster auto: the cheaper flatbuffer backend first, and PT2E only when the first result does
not already meet the parity target and the fully-integer need; the choice rule otherwise unchanged."""

from __future__ import annotations

import pytest
import torch
from quantization_models import CNN_SPEC

import edge_export
from edge_export.config import QuantizeMode
from edge_export.quantization import BackendAttempt, ParityTarget, QuantizationRequest, quantize_model
from edge_export.quantization.selection import SCREEN_MARGIN_DB

EXAMPLE = (torch.zeros(CNN_SPEC.shape),)


def _attempt(sqnr: float, fully_integer: bool = True, cosine: float = 0.999, ok: bool = True) -> BackendAttempt:
    return BackendAttempt("flatbuffer", ok, fully_integer=fully_integer, sqnr_db=sqnr, cosine=cosine)


def test_target_is_met_only_by_a_fully_integer_result_above_the_margin():
    target = ParityTarget(min_sqnr_db=20.0, min_cosine=0.99)
    assert target.met_by(_attempt(20.0 + SCREEN_MARGIN_DB))
    assert not target.met_by(_attempt(20.0 + SCREEN_MARGIN_DB - 0.1))  # in-sample SQNR needs the margin
    assert not target.met_by(_attempt(40.0, fully_integer=False))  # the integer need is not met
    assert not target.met_by(_attempt(40.0, cosine=0.98))
    assert not target.met_by(_attempt(40.0, ok=False))
    assert not ParityTarget().met_by(_attempt(90.0))  # nothing gated: every backend is measured
    assert ParityTarget(min_cosine=0.99).met_by(_attempt(5.0))


def test_auto_stops_after_the_flatbuffer_backend_when_it_meets_the_target(cnn, cnn_float_bytes, cnn_calibration):
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, calibration=cnn_calibration, target=ParityTarget(min_sqnr_db=20.0, min_cosine=0.99),
    ), float_model_bytes=cnn_float_bytes)
    assert [a.backend for a in result.attempts] == ["flatbuffer"]
    assert result.backend == "flatbuffer" and result.fully_integer
    assert "already meets the parity target" in result.reason and "pt2e was not tried" in result.reason


def test_auto_measures_both_and_keeps_the_better_when_the_target_is_not_met(cnn, cnn_float_bytes, cnn_calibration):
    # The flatbuffer backend's moving-average observer clips (several dB below min-max), so PT2E's
    # simulated parity is not below it by the lowering margin: PT2E is lowered and measured too.
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, calibration=cnn_calibration, target=ParityTarget(min_sqnr_db=200.0), flatbuffer_observer="moving_average",
    ), float_model_bytes=cnn_float_bytes)
    assert [a.backend for a in result.attempts] == ["flatbuffer", "pt2e"]
    best = max(result.attempts, key=lambda a: a.sqnr_db)
    # Both fully integer: the choice rule keeps the better parity (or the first within the tie band).
    assert all(a.fully_integer for a in result.attempts)
    assert result.backend == best.backend or abs(result.attempts[0].sqnr_db - best.sqnr_db) <= 0.05
    assert "not tried" not in result.reason


def test_export_auto_uses_the_exports_thresholds_as_the_target(tmp_path):
    from model_zoo import small_cnn

    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    result = edge_export.export(small_cnn(), example_inputs=(example,), output=tmp_path / "m.tflite", quantize="int8")
    q = result.report["quantization"]
    assert [a["backend"] for a in q["attempts"]] == ["flatbuffer"], q["reason"]
    assert "20 dB" in q["reason"]  # int8's default SQNR gate
    assert result.exit_code == 0


def test_lowering_is_skipped_only_when_a_fully_integer_result_wins_by_more_than_the_margin():
    from edge_export.quantization.selection import (
        LOWERING_MARGIN_DB,
        lowering_not_needed,
    )

    kept = _attempt(30.0)
    assert lowering_not_needed(30.0 - LOWERING_MARGIN_DB - 0.1, [kept]) is kept
    assert lowering_not_needed(30.0 - LOWERING_MARGIN_DB + 0.1, [kept]) is None  # could still win: lower it
    assert lowering_not_needed(35.0, [kept]) is None
    # A mixed-precision result does not settle it: a fully integer PT2E model may be kept over it.
    assert lowering_not_needed(5.0, [_attempt(30.0, fully_integer=False)]) is None
    assert lowering_not_needed(5.0, [_attempt(30.0, ok=False)]) is None
    # The best fully integer attempt is the one to beat.
    better = _attempt(40.0)
    assert lowering_not_needed(36.0, [kept, better]) is better


def test_pt2e_stops_when_both_miss_the_target_and_it_could_gain_under_a_db():
    """misses_target_anyway: PT2E's simulation more than the margin below the target's SQNR and less
    than FULL_INTEGER_PREFERENCE_DB above the fully integer result: a failing model either way."""
    from edge_export.quantization.selection import FULL_INTEGER_PREFERENCE_DB as PREFERENCE
    from edge_export.quantization.selection import misses_target_anyway, pt2e_settled

    kept, target = _attempt(2.0), ParityTarget(min_sqnr_db=20.0)
    assert misses_target_anyway(2.5, [kept], target, 1.5) is kept  # LeViT: 2.2 dB against 1.7
    assert misses_target_anyway(2.0 + PREFERENCE + 0.1, [kept], target, 1.5) is None  # could win by > 1 dB
    assert misses_target_anyway(2.5, [kept], ParityTarget(min_sqnr_db=3.5), 1.5) is None  # could meet the target
    assert misses_target_anyway(2.5, [kept], ParityTarget(), 1.5) is None  # nothing gated
    assert misses_target_anyway(2.5, [kept], None, 1.5) is None
    assert misses_target_anyway(2.5, [_attempt(2.0, fully_integer=False)], target, 1.5) is None
    assert misses_target_anyway(float("nan"), [kept], target, 1.5) is None  # not measured: go on
    assert misses_target_anyway(float("-inf"), [kept], target, 1.5) is kept
    assert misses_target_anyway(2.5, [_attempt(float("nan"))], target, 1.5) is None
    # pt2e_settled: the margin rule first, then this one, each named
    assert pt2e_settled(0.1, [kept], 1.5, target) == (kept, "below")
    assert pt2e_settled(2.5, [kept], 1.5, target) == (kept, "target")
    assert pt2e_settled(9.0, [kept], 1.5, target) is None


@pytest.fixture(scope="module")
def skewed_calibration():
    """A first sample far smaller than the rest: PT2E's moving-average observer keeps ranges near the
    first batch's and clips the others, min-max covers them all, so PT2E loses by many dB."""
    from edge_export.quantization import CalibrationSet, synthetic_calibration

    base = synthetic_calibration([CNN_SPEC], n=16, seed=1)
    first = tuple(a * 0.05 for a in base.samples[0])
    return CalibrationSet((first, *base.samples[1:]), "skewed synthetic", False)


def test_auto_does_not_lower_pt2e_when_its_simulation_cannot_win(cnn, cnn_float_bytes, skewed_calibration):
    from edge_export.config import QuantBackend

    options = {"calibration": skewed_calibration, "pt2e_observer": "moving_average"}
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, target=ParityTarget(min_sqnr_db=200.0), **options,
    ), float_model_bytes=cnn_float_bytes)
    assert [a.backend for a in result.attempts] == ["flatbuffer"], result.reason
    assert result.backend == "flatbuffer" and result.fully_integer
    assert "simulated in PyTorch" in result.reason and "not lowered" in result.reason
    # The choice is the one measuring both gives: the lowered PT2E model is worse.
    lowered = quantize_model(cnn, EXAMPLE, QuantizationRequest(QuantizeMode.INT8, backend=QuantBackend.PT2E, **options))
    assert lowered.attempts[0].sqnr_db < result.attempts[0].sqnr_db - 0.05


def test_auto_stops_pt2e_calibration_part_way_when_its_ranges_cannot_win(cnn, cnn_float_bytes, monkeypatch):
    """With 48 samples, PT2E's ranges are simulated after the first 16: far below the flatbuffer
    result, the other 32 are not run, and the choice is the one the full run makes."""
    import edge_export.quantization.candidates as candidates
    from edge_export.config import QuantBackend
    from edge_export.quantization import CalibrationSet, synthetic_calibration
    from edge_export.quantization.selection import EARLY_LOOK_SAMPLES

    base = synthetic_calibration([CNN_SPEC], n=48, seed=1)
    skewed = CalibrationSet((tuple(a * 0.05 for a in base.samples[0]), *base.samples[1:]), "skewed synthetic", False)
    batches_run = []
    real_batch = candidates._pt2e_batch
    monkeypatch.setattr(candidates, "_pt2e_batch", lambda budget, i, n, **kw: (batches_run.append(i), real_batch(budget, i, n, **kw)))
    options = {"calibration": skewed, "pt2e_observer": "moving_average"}
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, target=ParityTarget(min_sqnr_db=200.0), **options,
    ), float_model_bytes=cnn_float_bytes)
    assert len(batches_run) == EARLY_LOOK_SAMPLES == 16
    assert [a.backend for a in result.attempts] == ["flatbuffer"] and result.fully_integer
    assert f"after {EARLY_LOOK_SAMPLES} of 48 calibration samples" in result.reason, result.reason
    assert "the rest of its calibration was not run" in result.reason
    monkeypatch.undo()
    lowered = quantize_model(cnn, EXAMPLE, QuantizationRequest(QuantizeMode.INT8, backend=QuantBackend.PT2E, **options))
    assert lowered.attempts[0].sqnr_db < result.attempts[0].sqnr_db - 0.05  # the full run's choice too


def test_pt2e_calibration_runs_to_the_end_when_its_early_ranges_could_win(cnn, cnn_float_bytes, monkeypatch):
    import edge_export.quantization.candidates as candidates
    from edge_export.quantization import synthetic_calibration

    batches_run = []
    real_batch = candidates._pt2e_batch
    monkeypatch.setattr(candidates, "_pt2e_batch", lambda budget, i, n, **kw: (batches_run.append(i), real_batch(budget, i, n, **kw)))
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, calibration=synthetic_calibration([CNN_SPEC], n=40, seed=1), target=ParityTarget(min_sqnr_db=200.0), flatbuffer_observer="moving_average",
    ), float_model_bytes=cnn_float_bytes)
    assert len(batches_run) == 40
    assert [a.backend for a in result.attempts] == ["flatbuffer", "pt2e"], result.reason
