"""The faster auto's shortcuts change no number: PT2E's weight observers stop after the first
calibration sample, and the simulation before lowering computes the weights' rounding once."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quantization_models import CNN_SPEC, Residual, make

from edge_export.config import QuantizeMode
from edge_export.quantization import pt2e, selection

EXAMPLE = (torch.zeros(CNN_SPEC.shape),)
_WEIGHT_QDQ = ("quantized_decomposed.quantize_per_channel.default", "quantized_decomposed.dequantize_per_channel.default")


def _converted(module, batches, monkeypatch, *, freeze: bool, observer: str):
    frozen_observers = []
    real = pt2e.freeze_parameter_observers

    def spy(prepared):
        frozen = real(prepared) if freeze else []
        frozen_observers.append(frozen)
        return frozen

    with monkeypatch.context() as patch:
        patch.setattr(pt2e, "freeze_parameter_observers", spy)
        converted, _ = pt2e.prepare_and_convert_pt2e(module, EXAMPLE, QuantizeMode.INT8, batches, observer=observer)
    return converted, frozen_observers


# minmax: the activations' observers are of the class frozen for weights, and must keep observing.
@pytest.mark.parametrize("observer", ["histogram", "minmax"])
def test_frozen_weight_observers_give_the_same_quantized_graph(cnn, cnn_calibration, monkeypatch, observer):
    batches = cnn_calibration.torch_batches()
    for module in (cnn, make(Residual)):
        every_sample, _ = _converted(module, batches, monkeypatch, freeze=False, observer=observer)
        frozen, observers = _converted(module, batches, monkeypatch, freeze=True, observer=observer)
        weighted = [m for m in module.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
        assert [len(o) for o in observers] == [len(weighted)]  # once, after the first sample: one per weight
        assert frozen.code == every_sample.code
        ours, theirs = dict(frozen.named_buffers()), dict(every_sample.named_buffers())
        assert ours.keys() == theirs.keys()
        for name, value in ours.items():
            assert torch.equal(value, theirs[name]), name
        # The observers are back to their class's forward after the calibration.
        assert not any("forward" in vars(m) for m in observers[0])


def test_simulation_with_weights_rounded_once_gives_identical_outputs(cnn, cnn_calibration):
    converted, _ = pt2e.prepare_and_convert_pt2e(cnn, EXAMPLE, QuantizeMode.INT8, cnn_calibration.torch_batches())
    samples = cnn_calibration.samples[:8]
    per_forward = selection.reference_outputs(converted, samples)
    once = selection.with_weights_dequantized_once(converted)
    assert not any(str(n.target) in _WEIGHT_QDQ for n in once.graph.nodes)
    # The lowering still needs the chains: the graph given is not changed.
    assert sum(str(n.target) in _WEIGHT_QDQ for n in converted.graph.nodes) == 2 * 3
    for a, b in zip(per_forward, selection.reference_outputs(once, samples), strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(x, y)
