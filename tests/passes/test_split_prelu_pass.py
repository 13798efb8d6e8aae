"""split_prelu_pass: the flatbuffer quantizer's float model gets PRELU as RELU, MUL, MUL, SUB (it has
no PRELU recipe), the same values bit for bit, and the int8 and int16x8 models are fully integer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.passes.flatbuffer import run_flatbuffer_passes, split_prelu_pass


class ConvPReLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.act = nn.Conv2d(3, 6, 3), nn.PReLU(6)
        with torch.no_grad():
            self.act.weight.copy_(torch.linspace(0.05, 0.3, 6))

    def forward(self, x):
        return self.act(self.conv(x))


@pytest.fixture(scope="module")
def prelu_model():
    from edge_export.conversion.litert import convert_module
    from edge_export.passes.fx import rewrite_prelus_as_litert_prelu_pass

    torch.manual_seed(0)
    module, example = ConvPReLU().eval(), (torch.randn(1, 3, 12, 12),)
    graph = torch.export.export(module, example).module()
    assert rewrite_prelus_as_litert_prelu_pass(graph)
    return example, convert_module(graph, example)


def _opcodes(model) -> list[str]:
    return [op.opcode for op in model.operators]


def test_prelu_is_split_and_computes_the_same(prelu_model):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import Resolver, TFLiteRunner

    example, data = prelu_model
    before = read_flatbuffer(data)
    assert "PRELU" in _opcodes(before)
    result = run_flatbuffer_passes(before, (split_prelu_pass,))
    assert result.modified_by == ("split_prelu_pass",)
    ops = _opcodes(result.model)
    start = ops.index("RELU")
    assert "PRELU" not in ops and ops[start:start + 4] == ["RELU", "MUL", "MUL", "SUB"]
    feed = [example[0].numpy()]
    (want,) = TFLiteRunner(before, resolver=Resolver.REFERENCE).run(feed)
    (got,) = TFLiteRunner(result.model, resolver=Resolver.REFERENCE).run(feed)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["int8", "int16x8"])
def test_the_flatbuffer_backend_quantizes_a_prelu_model_fully(prelu_model, mode):
    from edge_export.config import InputSpec, QuantizeMode
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    example, data = prelu_model
    calibration = synthetic_calibration([InputSpec(shape=tuple(example[0].shape), name="x")], 8, seed=0)
    quantized = read_flatbuffer(quantize_flatbuffer(data, QuantizeMode(mode), calibration))
    assert quantized.is_fully_integer  # PRELU left float, as ai-edge-quantizer did, was not
    assert "PRELU" not in _opcodes(quantized)


def test_a_model_without_prelu_is_left_as_it_is():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_model

    model = read_model(convert_module(nn.ReLU(), (torch.zeros(1, 4),)))
    assert split_prelu_pass(model) is False
