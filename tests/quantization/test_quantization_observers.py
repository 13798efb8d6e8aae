"""Activation-range observers: each produces a working model, and the default beats the library's."""

from __future__ import annotations

import pytest
import torch
from quantization_models import CNN_SPEC, heldout, tflite_outputs, torch_outputs

from edge_export.config import QuantizeMode
from edge_export.errors import QuantizationError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization import synthetic_calibration
from edge_export.quantization.flatbuffer_recipes import DEFAULT_FLATBUFFER_OBSERVER, quantize_flatbuffer
from edge_export.quantization.pt2e import quantize_pt2e
from edge_export.validators.metrics import sqnr_db


@pytest.fixture(scope="module")
def many_samples():
    return synthetic_calibration([CNN_SPEC], n=64, seed=5)


def _sqnr(model, data):
    xs = heldout(CNN_SPEC, 8)
    return sqnr_db(torch_outputs(model, xs), tflite_outputs(data, xs))


def test_flatbuffer_observers_and_the_default_beats_the_moving_average(cnn, cnn_float_bytes, many_samples):
    scores = {}
    for observer in ("moving_average", "minmax", "percentile"):
        data = quantize_flatbuffer(cnn_float_bytes, QuantizeMode.INT8, many_samples, observer=observer)
        assert read_flatbuffer(data).is_fully_integer
        scores[observer] = _sqnr(cnn, data)
    # ai-edge-quantizer's moving average (factor 0.95) shrinks ranges towards a typical sample and
    # clips; min-max keeps the extremes. benchmarks/quantization_calibration.py has the numbers.
    assert DEFAULT_FLATBUFFER_OBSERVER == "minmax"
    assert scores["minmax"] > scores["moving_average"] + 3.0, scores
    assert scores["percentile"] > 25.0, scores


def test_pt2e_minmax_observer(cnn, many_samples):
    data = quantize_pt2e(cnn, (torch.zeros(CNN_SPEC.shape),), QuantizeMode.INT8, many_samples, observer="minmax")
    assert _sqnr(cnn, data) > 30.0


def test_unknown_observer_is_refused(cnn_float_bytes, many_samples):
    with pytest.raises(QuantizationError, match="Unknown flatbuffer-backend observer"):
        quantize_flatbuffer(cnn_float_bytes, QuantizeMode.INT8, many_samples, observer="kl")
