"""An operator that computes in float between float model I/O makes a model not fully integer.

The int8 model PT2E gave for a lone ReLU6 was one float RELU6 between the float input and output:
no float tensor *inside* the graph and no inner QUANTIZE, so the report called it fully integer
(docs/OPERATORS.md listed 8 such operators)."""

from __future__ import annotations

import torch

import edge_export
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization.selection import check_integer


def test_a_float_operator_between_float_io_is_not_integer(tmp_path):
    out = tmp_path / "relu6.tflite"
    edge_export.export(torch.nn.ReLU6().eval(), example_inputs=(torch.randn(1, 8, 16),), output=out, samples=2, host_latency=False, quiet_libraries=True)
    model = read_flatbuffer(out.read_bytes(), origin="test")
    assert [op.opcode for op in model.operators] == ["RELU6"]
    assert model.float_tensors == [] and model.inner_quantize_ops == []  # what the check looked at
    assert [op.opcode for op in model.float_operators] == ["RELU6"]
    assert model.is_fully_integer is False
    check = check_integer(model)
    assert not check.fully_integer and [(op.opcode, op.index) for op in check.float_operators] == [("RELU6", 0)]


def test_quantize_and_dequantize_at_float_io_are_not_float_operators(tmp_path):
    out = tmp_path / "conv.tflite"
    torch.manual_seed(0)
    edge_export.export(
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval(), example_inputs=(torch.randn(1, 3, 8, 8),),
        output=out, quantize="int8", quant_backend="flatbuffer", samples=2, calibration_samples=4, host_latency=False, quiet_libraries=True,
    )
    model = read_flatbuffer(out.read_bytes(), origin="test")
    assert model.operators[0].opcode == "QUANTIZE" and model.operators[-1].opcode == "DEQUANTIZE"
    assert model.float_operators == [] and model.is_fully_integer
