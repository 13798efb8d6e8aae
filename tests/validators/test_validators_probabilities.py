"""Probabilities judged by their decisions: how an output is found to be softmax/sigmoid (the exported
graph, PyTorch's values, --output-kind), and its decision agreement and probability error on arrays
whose answers are known. A softmax output whose argmax agrees on 8 of 11 samples (72.7%, the trained
pitch model's figure) fails the default int8 gate although its SQNR passes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from edge_export.config import DEFAULT_THRESHOLDS, OutputKind, QuantizeMode
from edge_export.validators.output_kinds import KindDecision, KindSource
from edge_export.validators.parity import compare_outputs
from edge_export.validators.probabilities import (
    DECISION_TIE_MARGIN,
    distribution_axis,
    decision_agreement,
    graph_activation,
    probability_kinds,
    threshold_agreement,
    values_activation,
)

INT8 = DEFAULT_THRESHOLDS[QuantizeMode.INT8]
P = OutputKind.PROBABILITIES


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _swapped_top_two(samples: int, flipped: int, classes: int = 12, seed: int = 0):
    """Softmax rows whose top two classes are 0.02 apart; the candidate swaps them on ``flipped`` rows
    (a small change in value, a different decision)."""
    rng = np.random.default_rng(seed)
    reference, candidate = [], []
    for s in range(samples):
        logits = rng.normal(0, 0.5, size=classes)
        logits[:2] = logits.max() + np.array([1.05, 1.0])  # class 0 just above class 1
        ref = _softmax(logits)[None, :]
        out = ref.copy()
        if s < flipped:
            out[0, [0, 1]] = out[0, [1, 0]]
        reference.append(ref.astype(np.float32))
        candidate.append(out.astype(np.float32))
    return reference, candidate


def test_decision_agreement_counts_rows_and_treats_near_ties_as_agreement():
    ref = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.4, 0.4 - DECISION_TIE_MARGIN / 2, 0.2]])
    out = np.array([[0.3, 0.6, 0.1], [0.2, 0.5, 0.3], [0.3, 0.5, 0.2]])  # row 0 flips; row 2 picks a near-tie
    assert decision_agreement(ref, out) == pytest.approx(2 / 3)
    # a tie at the exported model's top agrees when any tied class is PyTorch's
    assert decision_agreement(np.array([[0.7, 0.3]]), np.array([[0.5, 0.5]])) == 1.0
    # [batch, frames, bins]: one decision per frame
    frames = np.zeros((1, 4, 5))
    frames[0, np.arange(4), [0, 1, 2, 3]] = 1.0
    moved = frames.copy()
    moved[0, 3] = np.roll(moved[0, 3], 1)
    assert decision_agreement(frames, moved) == 0.75


def test_sigmoid_decisions_at_one_half():
    ref = np.array([[0.9, 0.1, 0.6, 0.5 + DECISION_TIE_MARGIN / 2]])
    out = np.array([[0.9, 0.6, 0.4, 0.49]])  # two flips; the last is a near-tie of the threshold
    assert threshold_agreement(ref, out) == 0.5


def test_values_say_softmax_only_for_distributions():
    rows = _softmax(np.random.default_rng(3).normal(size=(2, 5, 7)))
    assert values_activation(list(rows)) == "softmax"
    assert values_activation([1 / (1 + np.exp(-np.random.default_rng(4).normal(size=(1, 7))))]) is None  # sigmoid
    assert values_activation([np.array([[0.5, 0.5]]), np.array([[-0.1, 1.1]])]) is None  # one sample out of [0, 1]
    assert values_activation([np.array([[1.0]])]) is None  # one entry: no distribution
    assert values_activation([np.array([[np.nan, 1.0]])]) is None


@dataclass(frozen=True)
class _Op:
    opcode: str
    inputs: tuple[int, ...]


class _Graph:
    """A flatbuffer model's surface graph_activation reads: tensor 0 -> SOFTMAX -> 1 -> DEQUANTIZE -> 2
    (output "probs"), and CONCATENATION -> 3 (output "boxes")."""

    output_names = ("probs", "boxes")
    outputs = (2, 3)
    _producers = {1: _Op("SOFTMAX", (0,)), 2: _Op("DEQUANTIZE", (1,)), 3: _Op("CONCATENATION", (0, 1))}

    def producer_of(self, tensor: int):
        return self._producers.get(tensor)


def test_the_graph_says_softmax_past_a_dequantize_and_nothing_for_a_concat():
    assert graph_activation(_Graph(), "probs") == "softmax"
    assert graph_activation(_Graph(), "boxes") is None
    assert graph_activation(_Graph(), "missing") is None


def test_which_outputs_become_probabilities():
    dist = [np.full((1, 4), 0.25)]
    by_default = KindDecision(OutputKind.REGRESSION, KindSource.DEFAULT)
    refs = [[dist[0], dist[0]]]
    graph, values = probability_kinds([by_default, by_default], _Graph(), ["probs", "boxes"], refs)
    assert (graph.kind, graph.source, graph.activation) == (P, KindSource.GRAPH, "softmax")
    assert (values.kind, values.source, values.activation) == (P, KindSource.VALUES, "softmax")
    # an option decides; an embedding's name decides; a classifier's name gives way to the graph
    option = KindDecision(OutputKind.REGRESSION, KindSource.OPTION)
    embedding = KindDecision(OutputKind.EMBEDDING, KindSource.NAME)
    named = KindDecision(OutputKind.CLASSIFICATION, KindSource.NAME)
    kept = probability_kinds([option, embedding], _Graph(), ["probs", "probs"], [[dist[0], dist[0]]])
    assert kept == [option, embedding]
    assert probability_kinds([named], _Graph(), ["probs"], [[dist[0]]])[0].source is KindSource.GRAPH
    declared = probability_kinds([KindDecision(P, KindSource.OPTION)], None, ["output_0"], [[dist[0]]])[0]
    assert (declared.kind, declared.source, declared.activation) == (P, KindSource.OPTION, "softmax")


def test_a_softmax_agreeing_on_73_percent_fails_the_int8_gate_though_its_sqnr_passes():
    reference, candidate = _swapped_top_two(samples=11, flipped=3)
    (kind,) = probability_kinds([KindDecision(OutputKind.REGRESSION, KindSource.DEFAULT)], None, ["output_0"], [[r] for r in reference])
    result = compare_outputs([[r] for r in reference], [[c] for c in candidate], names=["output_0"], thresholds=INT8, runtime="t", kinds=[kind])
    (output,) = result.outputs
    checks = {c.metric: c for c in output.checks}
    assert output.metrics["decision_agreement"] == pytest.approx(8 / 11)
    assert checks["sqnr_db"].passed and checks["probability_error"].passed  # what SQNR alone read: a pass
    assert checks["decision_agreement"].passed is False and checks["decision_agreement"].threshold == 0.9
    assert result.passed is False and "decision_agreement" in result.worst().failed_checks
    # one flip in 11 (91%) passes the int8 gate
    reference, candidate = _swapped_top_two(samples=11, flipped=1)
    assert compare_outputs([[r] for r in reference], [[c] for c in candidate], names=["o"], thresholds=INT8, runtime="t", kinds=[kind]).passed


def test_a_log_softmax_is_judged_on_its_probabilities_and_a_sigmoid_also_at_one_half():
    logits = np.random.default_rng(5).normal(size=(4, 1, 6))
    log_p = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    decision = KindDecision(P, KindSource.GRAPH, activation="log_softmax")
    shifted = log_p.copy()
    shifted[..., 0] -= 0.5  # log-probability moved by 0.5: the probability by at most 0.5 * p
    result = compare_outputs([[r] for r in log_p], [[c] for c in shifted], names=["o"], thresholds=INT8, runtime="t", kinds=[decision])
    expected = np.max(np.abs(np.exp(log_p) - np.exp(shifted)))
    assert result.outputs[0].metrics["probability_error"] == pytest.approx(expected)
    assert "threshold_agreement" not in result.outputs[0].metrics
    sig = KindDecision(P, KindSource.GRAPH, activation="sigmoid")
    p = 1 / (1 + np.exp(-logits))
    result = compare_outputs([[r] for r in p], [[r] for r in p], names=["o"], thresholds=INT8, runtime="t", kinds=[sig])
    assert {c.metric for c in result.outputs[0].checks} >= {"decision_agreement", "threshold_agreement", "probability_error"}
    assert result.passed


def test_a_baseline_flags_lost_decisions_and_a_grown_probability_error():
    from report_fixtures import report_with_outputs

    from edge_export.reports.baseline import compare_with_baseline
    from edge_export.validators.parity import OutputParity

    def now(metrics):
        return report_with_outputs(OutputParity(0, "p", (1, 10), metrics, (), decision=KindDecision(P, KindSource.GRAPH, activation="softmax")))

    earlier = {"name": "p", "kind": "probabilities", "passed": True, "metrics": {"decision_agreement": 1.0, "probability_error": 0.004}}
    baseline = {"validation": {"status": "passed", "outputs": [earlier]}}
    assert compare_with_baseline(now(dict(earlier["metrics"])), baseline) == []
    worse = compare_with_baseline(now({"decision_agreement": 0.875, "probability_error": 0.02}), baseline)
    assert [r.metric for r in worse] == ["decision_agreement", "probability_error"]


def test_output_kind_declares_probabilities_and_labels_may_name_them(tmp_path):
    from edge_export.validators.output_kinds import OutputIdentity, parse_labels, parse_output_kinds, resolve_output_kinds

    assert parse_output_kinds("pitch=probabilities") == (("pitch", P),)
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\nc\n")
    (decision,) = resolve_output_kinds([OutputIdentity(0, ("pitch",), (1, 3))], parse_output_kinds("probabilities"), parse_labels(str(labels)))
    assert (decision.kind, decision.source, decision.labels_count) == (P, KindSource.OPTION, 3)


def _channel_softmax(seed: int, shape=(1, 2, 5, 5)) -> np.ndarray:
    """MTCNN P-Net's face output: a softmax over the 2 channels of [1, 2, H, W], one decision per position."""
    logits = np.random.default_rng(seed).normal(0, 2, size=shape)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_channel_softmax_is_found_along_its_axis_and_decided_per_position():
    refs = [_channel_softmax(s) for s in range(3)]
    assert distribution_axis(refs) == 1 and values_activation(refs) == "softmax"
    assert distribution_axis([np.log(r) for r in refs], log=True) == 1
    assert distribution_axis(list(_softmax(np.random.default_rng(1).normal(size=(2, 4, 6))))) == 1  # last axis first
    assert distribution_axis([refs[0], refs[1][:, :, :4]]) is None  # samples of different shapes
    (kind,) = probability_kinds([KindDecision(OutputKind.REGRESSION, KindSource.DEFAULT)], None, ["prob"], [[r] for r in refs])
    assert (kind.kind, kind.source, kind.activation, kind.axis) == (P, KindSource.VALUES, "softmax", 1)
    # the exported model says "face" at 5 of the 25 positions of sample 0 where PyTorch says "no face"
    ref = refs[0]
    out = ref.copy()
    no_face = np.argwhere(ref[0, 1] < 0.5 - DECISION_TIE_MARGIN)[:5]
    for y, x in no_face:
        out[0, :, y, x] = ref[0, ::-1, y, x]
    assert len(no_face) == 5
    assert decision_agreement(ref, out, axis=1) == pytest.approx(20 / 25)
    result = compare_outputs([[ref]], [[out]], names=["prob"], thresholds=INT8, runtime="t", kinds=[kind])
    (output,) = result.outputs
    assert output.metrics["decision_agreement"] == pytest.approx(20 / 25)  # the sample axis is stacked in front
    assert {c.metric: c.passed for c in output.checks}["decision_agreement"] is False


class _ChannelSoftmaxGraph:
    """TFLite's channel softmax: 0 -> TRANSPOSE -> 1 -> SOFTMAX -> 2 -> TRANSPOSE -> 3 -> DEQUANTIZE -> 4
    ("prob"); and 2 -> RESHAPE -> 5 ("flat": the distribution flattened)."""

    output_names = ("prob", "flat")
    outputs = (4, 5)
    _producers = {
        1: _Op("TRANSPOSE", (0,)), 2: _Op("SOFTMAX", (1,)), 3: _Op("TRANSPOSE", (2,)),
        4: _Op("DEQUANTIZE", (3,)), 5: _Op("RESHAPE", (2,)),
    }

    def producer_of(self, tensor: int):
        return self._producers.get(tensor)


def test_the_graph_says_softmax_past_transposes_and_the_values_give_its_axis():
    refs = [[_channel_softmax(s), _channel_softmax(s).reshape(1, -1)] for s in range(2)]
    default = KindDecision(OutputKind.REGRESSION, KindSource.DEFAULT)
    prob, flat = probability_kinds([default, default], _ChannelSoftmaxGraph(), ["prob", "flat"], refs)
    assert (prob.kind, prob.source, prob.activation, prob.axis) == (P, KindSource.GRAPH, "softmax", 1)
    assert flat == default  # a flattened distribution sums to 1 along no axis: nothing to decide along
