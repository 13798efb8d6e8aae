"""A classifier's expected top-1 agreement (validators/expected_top1.py): the error measured on the
parity samples against PyTorch's margins on every real sample. Eight parity samples that all agree
cannot show a 10% flip rate (EfficientNet-Lite0 on the Edge TPU passed at 0.906 of held-out crops);
the margins of the real data can, and the export fails naming the check."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from edge_export import export
from edge_export.config import DEFAULT_THRESHOLDS, OutputKind, QuantizeMode
from edge_export.validators.expected_top1 import MAX_MARGIN_ROWS, expected_top1_agreement
from edge_export.validators.metrics import NotComputable
from edge_export.validators.output_kinds import KindDecision, KindSource
from edge_export.validators.parity import compare_outputs

INT8 = DEFAULT_THRESHOLDS[QuantizeMode.INT8]


def _two_class_parity(spread: float, samples: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch picks class 0 by 10; the exported model moves class 0 up and class 1 down by
    spread / 2 each: the error on their difference is ``spread`` on every sample."""
    ref = np.tile([10.0, 0.0], (samples, 1))
    return ref, ref + np.tile([spread / 2, -spread / 2], (samples, 1))


def test_a_margin_equal_to_the_spread_flips_with_the_normal_tail_beyond_one_sigma():
    ref, out = _two_class_parity(0.2)
    margins = np.array([[0.2, 0.0]] * 4 + [[10.0, 0.0]] * 4)  # half the samples one sigma from a flip
    tail = 0.5 * math.erfc(1 / math.sqrt(2))  # 0.1587
    assert expected_top1_agreement(ref, out, margins) == pytest.approx(1 - tail / 2, abs=1e-12)


def test_no_error_keeps_every_decision_and_ties_are_not_flips():
    ref, _ = _two_class_parity(0.0)
    assert expected_top1_agreement(ref, ref.copy(), np.array([[1.0, 0.99]])) == 1.0
    _, out = _two_class_parity(0.5)
    # a class tied with PyTorch's top agrees either way (as top1_agreement counts ties); the
    # other classes of that row are far
    assert expected_top1_agreement(ref, out, np.array([[3.0, 3.0, -40.0]])) == pytest.approx(1.0)


def test_the_chance_to_flip_sums_over_the_classes_near_the_top_and_stops_at_one():
    ref, out = _two_class_parity(1.0)
    near = np.array([[0.0] + [-0.01] * 30])  # 30 classes a hundredth below the top: a flip is all but sure
    assert expected_top1_agreement(ref, out, near) == 0.0


def test_it_cannot_be_computed_without_real_margins_or_finite_values():
    ref, out = _two_class_parity(0.1)
    with pytest.raises(NotComputable, match="no real samples"):
        expected_top1_agreement(ref, out, np.zeros((0, 2)))
    with pytest.raises(NotComputable, match="NaN or Inf"):
        expected_top1_agreement(ref, out, np.array([[np.nan, 0.0]]))
    with pytest.raises(NotComputable, match="1 class"):
        expected_top1_agreement(ref[:, :1], out[:, :1], np.array([[1.0]]))


def test_the_margins_are_bounded_whatever_the_data_holds():
    ref, out = _two_class_parity(0.2)
    far = np.tile([10.0, 0.0], (MAX_MARGIN_ROWS, 1))
    near = np.tile([0.0, 0.0 - 1e-9], (1000, 1))  # past the bound: not read
    assert expected_top1_agreement(ref, out, np.concatenate([far, near])) == pytest.approx(1.0)


def _judge(real_rows: np.ndarray | None):
    ref, out = _two_class_parity(0.3)
    real = None if real_rows is None else [[row[None]] for row in real_rows]
    return compare_outputs(
        [[r[None]] for r in ref], [[o[None]] for o in out], names=["logits"], thresholds=INT8, runtime="t",
        kinds=[KindDecision(OutputKind.CLASSIFICATION, KindSource.OPTION)], real_references=real,
    ).outputs[0]


def test_eight_agreeing_samples_fail_when_the_real_data_sits_near_its_decisions():
    close = np.array([[0.3, 0.0]] * 6 + [[5.0, 0.0]] * 2)  # 6 of 8 samples one sigma from a flip
    judged = _judge(close)
    checks = {c.metric: c for c in judged.checks}
    assert checks["top1_agreement"].passed and judged.metrics["top1_agreement"] == 1.0
    assert checks["expected_top1_agreement"].threshold == 0.95 and checks["expected_top1_agreement"].passed is False
    assert judged.metrics["expected_top1_agreement"] == pytest.approx(1 - 0.75 * 0.5 * math.erfc(1 / math.sqrt(2)))
    assert not judged.passed
    assert _judge(np.array([[5.0, 0.0]] * 8)).passed  # margins far beyond the error: kept


def test_without_real_data_the_metric_is_absent_not_null():
    judged = _judge(None)
    assert "expected_top1_agreement" not in judged.metrics
    assert "expected_top1_agreement" not in {c.metric for c in judged.checks}


class _Classifier(torch.nn.Module):
    """Ten classes, spread well apart on its data: int8 keeps its decisions."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.body(x) * 4.0


@pytest.fixture(scope="module")
def classifier_exports(tmp_path_factory):
    """The same classifier at int8 with real .npz calibration data, and without any (synthetic)."""
    folder = tmp_path_factory.mktemp("expected_top1")
    data = folder / "data.npz"
    np.savez(data, x=np.random.default_rng(0).normal(size=(40, 1, 16)).astype(np.float32))
    common = dict(quantize="int8", quant_backend="flatbuffer", output_kinds="classification", mixed_precision="off",
                  host_latency=False, example_inputs=(torch.zeros(1, 16),))
    real = export(_Classifier().eval(), output=folder / "real.tflite", calibration_data=str(data), **common)
    synthetic = export(_Classifier().eval(), output=folder / "synthetic.tflite", **common)
    return real, synthetic, folder


def test_an_export_with_real_data_reports_and_gates_the_expected_top1(classifier_exports):
    real, synthetic, folder = classifier_exports
    (output,) = real.report["validation"]["outputs"]
    value = output["metrics"]["expected_top1_agreement"]
    check = next(c for c in output["checks"] if c["metric"] == "expected_top1_agreement")
    assert 0.0 <= value <= 1.0 and check["threshold"] == 0.95 and check["passed"] == (value >= 0.95)
    assert real.report["validation"]["thresholds"]["min_expected_top1"] == 0.95
    assert "expected top-1" in (folder / "real.report.md").read_text()
    (plain,) = synthetic.report["validation"]["outputs"]
    assert "expected_top1_agreement" not in plain["metrics"]
    json.dumps(real.report)  # plain JSON


def test_a_stricter_expected_top1_fails_the_export_naming_it(classifier_exports, tmp_path):
    real, _, folder = classifier_exports
    value = real.report["validation"]["outputs"][0]["metrics"]["expected_top1_agreement"]
    assert value < 1.0  # int8 moves the logits: some real sample has a chance to flip
    strict = export(
        _Classifier().eval(), output=tmp_path / "strict.tflite", calibration_data=str(folder / "data.npz"),
        quantize="int8", quant_backend="flatbuffer", output_kinds="classification", mixed_precision="off",
        host_latency=False, example_inputs=(torch.zeros(1, 16),), min_expected_top1=min(1.0, value + 1e-3),
    )
    assert strict.exit_code == 1
    assert "expected_top1_agreement" in strict.report["validation"]["worst"]["failed_checks"]
