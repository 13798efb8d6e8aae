"""Outputs judged by their parts: a detector-like output whose boxes (pixels) and scores (0-1) share
one tensor is split along the axis where their ranges differ 10x or more, and a collapsed part fails
the verdict by name; ordinary outputs have no parts. Arrays whose answers are known, no model."""

from __future__ import annotations

import numpy as np

from edge_export.config import DEFAULT_THRESHOLDS, QuantizeMode
from edge_export.output.serialize import to_json_value
from edge_export.validators.output_parts import MAX_PARTS_PER_AXIS, PART_RANGE_FACTOR, find_parts
from edge_export.validators.parity import compare_outputs

INT8 = DEFAULT_THRESHOLDS[QuantizeMode.INT8]


def _detector_outputs(samples: int = 4, nc: int = 80, anchors: int = 60, seed: int = 0) -> list[np.ndarray]:
    """[1, 4 + nc, anchors] per sample: boxes in pixels (0-480), class scores in (0, 1)."""
    rng = np.random.default_rng(seed)
    outs = []
    for _ in range(samples):
        boxes = rng.uniform(0, 480, size=(1, 4, anchors))
        scores = 1 / (1 + np.exp(-rng.normal(-2, 2, size=(1, nc, anchors))))
        outs.append(np.concatenate([boxes, scores], axis=1).astype(np.float32))
    return outs


def _int8_one_scale(values: np.ndarray) -> np.ndarray:
    """What one int8 scale over the whole tensor does (asymmetric, 256 levels over its range)."""
    lo, hi = min(float(values.min()), 0.0), float(values.max())
    scale = (hi - lo) / 255
    return (np.round((values - lo) / scale) * scale + lo).astype(np.float32)


def test_boxes_and_scores_are_two_parts_along_the_channel_axis_only():
    parts = find_parts(np.stack(_detector_outputs()))
    assert [(p.axis, p.start, p.stop) for p in parts] == [(1, 0, 4), (1, 4, 84)]
    assert parts[0].reference_max_abs > 400 and parts[1].reference_max_abs <= 1
    assert parts[1].label("output_0", 3) == "output_0[:, 4:84, :]"


def test_exactly_ten_times_below_is_a_part_and_just_under_is_not():
    edge = np.array([[[PART_RANGE_FACTOR, 1.0, 1.0]]])  # [samples 1, batch 1, 3]: max 10, then 1 and 1
    assert [(p.start, p.stop) for p in find_parts(edge)] == [(0, 1), (1, 3)]
    assert find_parts(edge * np.array([1.0, 1.0001, 1.0001])) == ()


def test_ordinary_outputs_have_no_parts():
    # one class 13x below the top but no 10x gap between the classes' ranges: logits, not parts
    spread = np.array([[[2.0, 0.15, 1.0, 0.9, 0.5, 0.3]]])
    assert find_parts(spread) == ()
    rng = np.random.default_rng(1)
    assert find_parts(rng.normal(size=(8, 1, 10))) == ()  # logits
    assert find_parts(rng.normal(size=(8, 1, 16, 8, 8))) == ()  # a feature map
    assert find_parts(rng.normal(size=(8, 10))) == ()  # a 1-D output: no axis but the batch axis
    assert find_parts(np.zeros((2, 1, 4, 5))) == ()


def test_the_search_is_bounded_and_nan_safe():
    alternating = np.tile(np.array([100.0, 1.0]), MAX_PARTS_PER_AXIS)  # 16 runs along the axis
    assert find_parts(alternating.reshape(1, 1, -1)) == ()
    nan = np.stack(_detector_outputs(samples=2))
    nan[0, 0, 5, 0] = np.nan
    assert find_parts(nan) == ()
    # a part that is zero everywhere is not judged; with one part left the axis does not split
    dead = np.concatenate([np.full((1, 1, 2, 3), 50.0), np.zeros((1, 1, 2, 3))], axis=2)
    assert find_parts(dead) == ()


def test_collapsed_scores_fail_the_verdict_though_the_whole_tensor_passes():
    reference = _detector_outputs()
    candidate = [_int8_one_scale(r) for r in reference]
    result = compare_outputs([[r] for r in reference], [[c] for c in candidate], names=["output_0"], thresholds=INT8, runtime="t")
    (output,) = result.outputs
    assert output.metrics["sqnr_db"] > 20 and all(c.passed for c in output.checks)  # what the old verdict read
    boxes, scores = output.parts
    assert boxes.passed and boxes.metrics["sqnr_db"] > 20
    assert not scores.passed and scores.metrics["sqnr_db"] < 20
    assert result.passed is False and output.failed_parts == (scores,)
    worst = result.worst()
    assert worst.part == "output_0[:, 4:84, :]" and worst.failed_checks == ("sqnr_db of output_0[:, 4:84, :]",)
    as_json = to_json_value(result)
    assert as_json["outputs"][0]["parts"][1]["part"] == "output_0[:, 4:84, :]"
    assert as_json["outputs"][0]["parts"][1]["passed"] is False
    assert as_json["worst"]["part"] == "output_0[:, 4:84, :]"


def test_an_ordinary_output_keeps_its_json():
    rng = np.random.default_rng(2)
    reference = [rng.normal(size=(1, 10)).astype(np.float32) for _ in range(4)]
    candidate = [r + 1e-3 for r in reference]
    result = compare_outputs([[r] for r in reference], [[c] for c in candidate], names=["output_0"], thresholds=INT8, runtime="t")
    as_json = to_json_value(result)
    assert "parts" not in as_json["outputs"][0] and "part" not in as_json["worst"]
    assert set(as_json["outputs"][0]["metrics"]) == {
        "max_abs_error", "mean_abs_error", "relative_l2_error", "cosine", "sqnr_db", "worst_sample_sqnr_db",
        "max_abs_error_steps", "top1_agreement", "top5_agreement", "worst_sample_cosine", "neighbour_agreement",
    }
    assert result.passed


def test_the_renderers_name_the_collapsed_part():
    import dataclasses

    from rich.console import Console

    from edge_export.reports.junit import render_junit
    from edge_export.reports.markdown import render_markdown
    from edge_export.reports.summary import print_summary
    from report_fixtures import skipped_report

    reference = _detector_outputs()
    result = compare_outputs(
        [[r] for r in reference], [[_int8_one_scale(r)] for r in reference], names=["output_0"], thresholds=INT8, runtime="t"
    )
    report = dataclasses.replace(skipped_report(), validation=result)
    out = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
    print_summary(report, out, Console(record=True, width=300, force_terminal=False))
    assert "worst part output_0[:, 4:84, :]: SQNR" in out.export_text()
    assert r"↳ part <code>output\_0\[\:, 4\:84, \:\]</code>" in render_markdown(report)
    assert "output_0[:, 4:84, :]: sqnr_db" in render_junit(report)
