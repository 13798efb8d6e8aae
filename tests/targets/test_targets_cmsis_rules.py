"""The CMSIS-NN rule check: none for the models edge-export quantizes itself (int8, int16x8), every
violation listed with its module on models altered to break a rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_harness import validate_report

from edge_export.flatbuffer import read_flatbuffer
from edge_export.flatbuffer import pack_model
from edge_export.targets.micro.cmsis_nn import MAY_DIFFER, REFERENCE_KERNEL, check_cmsis_nn


class _Dense(torch.nn.Module):
    """Linear, ReLU, Linear: int16x8 has a CMSIS-NN kernel for each."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class _DenseMax(_Dense):
    """The same with torch.maximum: MAXIMUM has no int16 CMSIS-NN kernel."""

    def forward(self, x):
        hidden = self.fc1(x)
        return self.fc2(torch.maximum(hidden, -hidden))


def _int16x8(module: torch.nn.Module, tmp_path, name: str):
    import edge_export

    torch.manual_seed(0)
    result = edge_export.export(module.eval(), example_inputs=(torch.randn(1, 16),), output=tmp_path / f"{name}.tflite", quantize="int16x8", samples=2)
    return read_flatbuffer(result.tflite_path.read_bytes())


@pytest.fixture(scope="module")
def micro_cnn(tmp_path_factory):
    """The small CNN (model_zoo) exported with --target micro --keep-names (the rules name modules, which need the tensor names): the report and the model."""
    from model_zoo import small_cnn

    import edge_export

    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    result = edge_export.export(
        small_cnn(), example_inputs=(example,), output=tmp_path_factory.mktemp("cmsis") / "cnn.tflite", target="micro", samples=2, keep_names=True,
        quant_backend="flatbuffer",  # what auto keeps for this model, without also running PT2E: the rules are the point
    )
    return validate_report(result.report), read_flatbuffer(result.tflite_path.read_bytes())


def test_edge_export_int8_micro_model_meets_every_rule(micro_cnn):
    report_json, model = micro_cnn
    section = report_json["target"]["cmsis_nn"]
    assert section["ok"] is True and section["violations"] == [] and section["checked_operators"] == len(model.operators)
    assert "CONV_2D" in model.op_counts and "FULLY_CONNECTED" in model.op_counts
    assert check_cmsis_nn(model).ok
    from pathlib import Path

    markdown = Path(report_json["artifacts"]["report_markdown"]).read_text()
    assert "### CMSIS-NN kernel rules" in markdown


def _weights_of(model, opcode):
    op = next(op for op in model.operators if op.opcode == opcode)
    return op, op.inputs[1]


def test_asymmetric_and_per_tensor_weights_are_listed_with_their_module(micro_cnn):
    model = micro_cnn[1]
    conv, conv_weights = _weights_of(model, "CONV_2D")
    _, fc_weights = _weights_of(model, "FULLY_CONNECTED")
    mutable = model.mutable()
    tensors = mutable.subgraphs[0].tensors
    # The conv's weights per-tensor (one scale for every channel); the FC's with a zero point of 3.
    q = tensors[conv_weights].quantization
    q.scale, q.zeroPoint = np.array([float(np.max(q.scale))], np.float32), np.array([0], np.int64)
    tensors[fc_weights].quantization.zeroPoint = np.full_like(tensors[fc_weights].quantization.zeroPoint, 3)
    altered = read_flatbuffer(pack_model(mutable))

    report = check_cmsis_nn(altered)
    assert not report.ok and "reference kernels the host parity check ran" in report.note
    by_tensor = {v.tensor_index: v for v in report.violations}
    assert set(by_tensor) == {conv_weights, fc_weights}
    per_tensor, asymmetric = by_tensor[conv_weights], by_tensor[fc_weights]
    assert per_tensor.opcode == "CONV_2D" and per_tensor.operator_index == conv.index
    assert per_tensor.rule.startswith("per-channel weights") and "1 scale for" in per_tensor.found
    assert asymmetric.opcode == "FULLY_CONNECTED" and "zero point 3" in asymmetric.found
    assert asymmetric.module == "head" and per_tensor.module.startswith("features.")  # the PyTorch modules
    assert {v.consequence for v in report.violations} == {MAY_DIFFER}
    assert "CMSIS-NN assumes symmetric weights" in asymmetric.describe()


def test_int16x8_models(tmp_path):
    dense = _int16x8(_Dense(), tmp_path, "dense")
    assert any(t.dtype == "int16" for t in dense.tensors) and check_cmsis_nn(dense).violations == ()

    with_max = _int16x8(_DenseMax(), tmp_path, "dense_max")
    report = check_cmsis_nn(with_max)
    assert [(v.opcode, v.consequence) for v in report.violations] == [("MAXIMUM", REFERENCE_KERNEL)]
    assert report.violations[0].found == "int16 input" and report.violations[0].module is not None

    # An int16 activation with a zero point, and an int32 bias where int16 needs int64.
    mutable = dense.mutable()
    tensors = mutable.subgraphs[0].tensors
    fc = next(op for op in dense.operators if op.opcode == "FULLY_CONNECTED")
    activation, bias = fc.outputs[0], fc.inputs[2]
    tensors[activation].quantization.zeroPoint = np.array([5], np.int64)
    mutable.buffers[tensors[bias].buffer].data = np.asarray(mutable.buffers[tensors[bias].buffer].data).view(np.int64).astype(np.int32).view(np.uint8)
    from ai_edge_litert import schema_py_generated as schema

    tensors[bias].type = schema.TensorType.INT32
    found = {(v.tensor_index, v.rule) for v in check_cmsis_nn(read_flatbuffer(pack_model(mutable))).violations}
    assert (activation, "int16 activations with zero point 0") in found
    assert (bias, "int64 bias with int16 activations") in found


def test_rules_run_in_order_and_list_a_tensor_once():
    """MAXIMUM(x, x) then ADD(x, y) on an int16 ``x`` with a zero point: the missing int16 kernel,
    then ``x``'s zero point, listed at the first operator that reads it and only there."""
    from edge_export.flatbuffer import FlatbufferModel, OperatorInfo, QuantParams, TensorInfo

    def int16(i, name, zero_point):
        return TensorInfo(i, name, (1, 4), (1, 4), "int16", False, QuantParams((0.1,), (zero_point,)))

    tensors = (int16(0, "x", 5), int16(1, "y", 0), int16(2, "z", 0))
    ops = (OperatorInfo(0, "MAXIMUM", (0, 0), (1,), None), OperatorInfo(1, "ADD", (0, 1), (2,), None))
    model = FlatbufferModel(size_bytes=0, num_subgraphs=1, tensors=tensors, operators=ops, inputs=(0,), outputs=(2,),
                            signatures=(), min_runtime_version=None, description=None, subgraph_operators=(ops,))
    report = check_cmsis_nn(model)
    assert [(v.operator_index, v.tensor_index, v.found, v.consequence) for v in report.violations] == [
        (0, None, "int16 input", REFERENCE_KERNEL),
        (0, 0, "int16 activation with zero point 5", MAY_DIFFER),
    ]
    assert report.checked_operators == 2
