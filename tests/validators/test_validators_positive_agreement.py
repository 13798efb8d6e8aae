"""A sigmoid's detections judged as such (validators/positive_agreement.py): the expected
intersection over union of PyTorch's and the exported model's detections on real samples, from the
parity samples' logit error; and the runs of an output a sigmoid makes (probabilities.sigmoid_segments)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from edge_export.config import Thresholds
from edge_export.errors import UsageError
from edge_export.validators.metrics import NotComputable
from edge_export.validators.positive_agreement import BAND, MIN_BAND_VALUES, expected_positive_agreement, logit


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=np.float64)))


def _parity(threshold: float, errors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parity values near the threshold (logits spread over the band) and the same values with
    ``errors`` added to their logits."""
    z = float(logit(threshold)) + np.linspace(-BAND / 2, BAND / 2, len(errors))
    return _sigmoid(z), _sigmoid(z + errors)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def test_an_exact_model_keeps_every_detection():
    ref, out = _parity(0.25, np.zeros(32))
    real = _sigmoid(np.array([-3.0, -1.0, 0.5, 2.0, 4.0]))
    assert expected_positive_agreement(ref, out, real, 0.25) == 1.0


def test_known_answer_from_the_normal_tails():
    sigma = 0.5
    ref, out = _parity(0.5, np.tile([sigma, -sigma], 16))  # mean 0, spread exactly sigma
    # one detection a spread above the threshold, one value two spreads below it
    real = _sigmoid(np.array([sigma, -2 * sigma]))
    kept, added = 1 - _phi(-1.0), _phi(-2.0)
    assert expected_positive_agreement(ref, out, real, 0.5) == pytest.approx(kept / (1 + added), rel=1e-9)


def test_a_shift_of_the_logits_loses_detections_near_the_threshold():
    ref, out = _parity(0.25, np.full(32, -1.0))  # every logit one lower: a shift, no spread
    near, far = float(logit(0.25)) + 0.5, float(logit(0.25)) + 3.0
    real = _sigmoid(np.array([near, far, float(logit(0.25)) - 5.0]))
    assert expected_positive_agreement(ref, out, real, 0.25) == pytest.approx(0.5)  # the near one is lost


def test_values_tied_with_the_threshold_and_far_ones_do_not_count():
    ref, out = _parity(0.5, np.tile([1.0, -1.0], 16))
    tie = 0.5 + 1 / 512  # within one int8 step of the threshold: either side agrees
    far_below = _sigmoid(np.full(1000, -40.0))
    value = expected_positive_agreement(ref, out, np.concatenate([[tie, _sigmoid(30.0)], far_below]), 0.5)
    assert value == pytest.approx(1.0)


def test_what_it_cannot_measure_is_not_computable():
    ref, out = _parity(0.5, np.zeros(32))
    with pytest.raises(NotComputable, match="no value at or above 0.5"):
        expected_positive_agreement(ref, out, np.full(10, 0.1), 0.5)
    with pytest.raises(NotComputable, match="near the decision threshold"):
        expected_positive_agreement(np.full(64, 1e-5), np.full(64, 1e-5), np.array([0.9]), 0.5)
    assert MIN_BAND_VALUES > 1
    bad = out.copy()
    bad[3] = np.nan
    with pytest.raises(NotComputable, match="NaN or Inf"):
        expected_positive_agreement(ref, bad, np.array([0.9]), 0.5)
    with pytest.raises(NotComputable, match="no real samples"):
        expected_positive_agreement(ref, out, np.array([]), 0.5)


def test_millions_of_values_stay_bounded_and_a_broken_model_reads_low():
    rng = np.random.default_rng(0)
    ref, out = _parity(0.25, rng.normal(0.0, 3.0, 64))  # a spread of 3 logits: most detections cross
    real = _sigmoid(np.concatenate([rng.normal(-12.0, 2.0, 2_000_000), rng.normal(1.0, 1.0, 200)]))
    start = time.perf_counter()
    value = expected_positive_agreement(ref, out, real, 0.25)
    assert time.perf_counter() - start < 30  # the tails are computed only where they are not ~0
    assert 0.0 <= value < 0.9


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -0.1, float("nan")])
def test_the_decision_threshold_is_a_probability(bad):
    with pytest.raises(UsageError, match="--decision-threshold"):
        Thresholds(decision_threshold=bad)
    assert Thresholds().override(decision_threshold=0.25).decision_threshold == 0.25


# ---- the runs of an output a sigmoid makes, read from the graph (probabilities.sigmoid_segments) ----


class _Graph:
    """A flatbuffer's main subgraph as sigmoid_segments reads it: tensors by index (shape), each
    made by one operator; constants (a TRANSPOSE's permutation) by index."""

    def __init__(self, shapes: dict, ops: list, output: int, constants: dict | None = None) -> None:
        from types import SimpleNamespace

        self.shapes, self.constants = shapes, constants or {}
        self.ops = [SimpleNamespace(opcode=o[0], inputs=o[1], outputs=o[2], options=o[3] if len(o) > 3 else None) for o in ops]
        self.output_names, self.outputs = ("output_0",), (output,)

    def producer_of(self, tensor: int):
        return next((op for op in self.ops if tensor in op.outputs), None)

    def tensor(self, index: int):
        from types import SimpleNamespace

        return SimpleNamespace(shape=self.shapes[index])

    def constant(self, index: int):
        return self.constants.get(index)


def _detector_graph(axis: int = 3, perm=(0, 3, 1, 2), output_shape=(1, 10, 64)) -> _Graph:
    """The test detector's head as litert-torch writes it: boxes (MUL after a LOGISTIC) and scores
    (a LOGISTIC, then DEQUANTIZE) joined along NHWC's channels, transposed to NCHW, flattened."""
    from types import SimpleNamespace

    shapes = {0: (1, 8, 8, 8), 1: (1, 8, 8, 4), 2: (1, 8, 8, 4), 3: (1, 8, 8, 6), 4: (1, 8, 8, 6), 5: (1, 8, 8, 10),
              6: (4,), 7: (1, 10, 8, 8), 8: output_shape}
    ops = [
        ("LOGISTIC", (0,), (1,)), ("MUL", (1,), (2,)), ("LOGISTIC", (0,), (3,)), ("DEQUANTIZE", (3,), (4,)),
        ("CONCATENATION", (2, 4), (5,), SimpleNamespace(axis=axis)), ("TRANSPOSE", (5, 6), (7,)), ("RESHAPE", (7,), (8,)),
    ]
    return _Graph(shapes, ops, 8, {6: np.array(perm)})


def test_a_detectors_scores_are_found_through_its_layout():
    from edge_export.validators.probabilities import holds_sigmoid_parts, sigmoid_segments

    graph = _detector_graph()
    assert sigmoid_segments(graph, "output_0", (1, 10, 64)) == ((1, 4, 10),)  # channels 4:10, boxes (a MUL) are not
    assert holds_sigmoid_parts(graph)
    assert sigmoid_segments(graph, "output_0", (1, 64, 10)) == ()  # not PyTorch's shape: the axes do not line up
    assert sigmoid_segments(graph, "missing", (1, 10, 64)) == ()


@pytest.mark.parametrize(
    "change",
    [
        {"axis": 7},  # a join axis the tensor does not have
        {"axis": -9},
        {"perm": (0, 1, 2, 9)},  # a permutation without the joined axis
        {"output_shape": (1, 640)},  # a flatten that merges the joined axis away
    ],
)
def test_a_graph_whose_shapes_do_not_add_up_has_no_sigmoid_runs(change):
    """Read from a hostile file: a wrong axis or permutation means no runs, never an exception."""
    from edge_export.validators.probabilities import sigmoid_segments

    graph = _detector_graph(**change)
    shape = graph.shapes[8]
    assert sigmoid_segments(graph, "output_0", shape) == ()
