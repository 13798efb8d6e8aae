"""The layout passes (issue 24, item 3): ``rewrite_reduction_axes_pass``,
``permute_fully_connected_weights_pass`` and ``fold_layout_chains_pass`` on the converter's own output for a NHWC model whose heads are written for NCHW, in float and int8,
checked by running both models (the rewrites must compute exactly what the converter's graph does)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.flatbuffer import FlatbufferModel, read_flatbuffer
from edge_export.passes.flatbuffer import LAYOUT_PASSES, run_flatbuffer_passes

SHAPE = (1, 3, 8, 8)
pytestmark = pytest.mark.slow  # two conversions and a quantization (about 40 s here)


class NCHWHeads(nn.Module):
    """A conv, then the heads hand-written CNNs put on a feature map, each written for NCHW."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 4)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return (
            y.mean((2, 3)),  # global average pooling: [N, C]
            y.amax(1),  # over channels: [N, H, W]
            y.sum(2),  # over H only: [N, C, W], whose axes NHWC holds in another order
            y.flatten(2).transpose(1, 2),  # patches as tokens: [N, HW, C]
            y.mean((2, 3), keepdim=True).flatten(1),
            self.fc(y.flatten(1)),  # a classifier on the whole map, flattened C, H, W
        )


@dataclass(frozen=True)
class Models:
    fp32: FlatbufferModel  # the converter's graph (NHWC input, TRANSPOSEs to NCHW inside)
    int8: FlatbufferModel  # the flatbuffer backend's int8 model of it


@pytest.fixture(scope="module")
def models() -> Models:
    import litert_torch

    from edge_export.config import InputSpec, QuantizeMode
    from edge_export.conversion.litert import plan_channels_last, wrap_channels_last
    from edge_export.processes.library_output import quiet_libraries
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    torch.manual_seed(0)
    module = NCHWHeads().eval()
    example = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    wrapped = wrap_channels_last(module, plan_channels_last([4], [2, 3, 3, 3, 2, 2]))
    with quiet_libraries():  # litert_torch.convert itself: convert_module would run the passes
        fp32 = bytes(litert_torch.convert(wrapped, (example.permute(0, 2, 3, 1).contiguous(),)).model_content())
    nhwc_shape = (SHAPE[0], SHAPE[2], SHAPE[3], SHAPE[1])
    calibration = synthetic_calibration([InputSpec(shape=nhwc_shape, name="x")], 8, seed=1)
    int8 = quantize_flatbuffer(fp32, QuantizeMode.INT8, calibration)
    return Models(read_flatbuffer(fp32), read_flatbuffer(int8))


def _rewritten(model: FlatbufferModel) -> FlatbufferModel:
    result = run_flatbuffer_passes(model, LAYOUT_PASSES)
    assert result.modified_by == ("rewrite_reduction_axes_pass", "permute_fully_connected_weights_pass", "fold_layout_chains_pass")
    names = [t.name for t in result.model.tensors]
    assert len(set(names)) == len(names)  # ai-edge-quantizer refuses repeated names
    return result.model


def _run(model: FlatbufferModel, inputs: np.ndarray, reference_kernels: bool) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.BUILTIN_REF if reference_kernels else OpResolverType.AUTO
    interpreter = Interpreter(model_content=model.data, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], inputs)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def _inputs(model: FlatbufferModel, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    tensor = model.input_tensors[0]
    if tensor.dtype == "float32":
        return [rng.standard_normal(tensor.shape).astype(np.float32) for _ in range(count)]
    return [rng.integers(-128, 128, tensor.shape).astype(np.int8) for _ in range(count)]


def _through_dequantize(model: FlatbufferModel, tensor: int) -> int:
    producer = model.producer_of(tensor)
    return producer.inputs[0] if producer is not None and producer.opcode == "DEQUANTIZE" else tensor


def _transposes(model: FlatbufferModel) -> list:
    return [op for op in model.operators if op.opcode == "TRANSPOSE"]


def test_the_converter_transposes_the_feature_map_back_to_nchw(models):
    # what the passes are for: every head reads the feature map through a TRANSPOSE to NCHW
    for model in (models.fp32, models.int8):
        (to_nchw, *rest) = _transposes(model)
        assert model.tensors[to_nchw.inputs[0]].shape == (1, 8, 8, 8)
        assert model.constant(to_nchw.inputs[1]).tolist() == [0, 3, 1, 2]


@pytest.mark.parametrize("kind", ["fp32", "int8"])
def test_reductions_read_the_nhwc_feature_map_over_nhwc_axes(models, kind):
    after = _rewritten(getattr(models, kind))
    reductions = [op for op in after.operators if op.opcode in ("MEAN", "REDUCE_MAX", "SUM")]
    # the converter writes the float means as a SUM and a MUL by 1/HW (and shares the two means)
    axes = sorted(tuple(sorted(after.constant(op.inputs[1]).tolist())) for op in reductions)
    assert axes == [(1,), (1, 2), (3,)]  # H for y.sum(2), H and W for the means, C for y.amax(1)
    conv_out = next(op for op in after.operators if op.opcode == "CONV_2D").outputs[0]
    # (int8: the quantizer keeps REDUCE_MAX in float, behind a DEQUANTIZE of the feature map)
    assert all(_through_dequantize(after, op.inputs[0]) == conv_out for op in reductions)
    # the one TRANSPOSE left reorders the small result of y.sum(2) ([N, W, C] -> [N, C, W]), not the feature map
    (left,) = _transposes(after)
    assert after.tensors[left.inputs[0]].shape == (1, 8, 8) and after.constant(left.inputs[1]).tolist() == [0, 2, 1]
    assert after.producer_of(left.inputs[0]).opcode == "SUM"
    # ... and the report names it, inside the graph, in the model's own forward()
    from edge_export.conversion.transpose_report import find_transposes

    report = find_transposes(after)
    assert (report.count, report.inner) == (1, 1)
    # (it writes a model output, named after the signature: the module is read from what it reduces,
    # the ReLU'd conv output of the root's forward())
    assert (report.sites[0].operator_index, report.sites[0].module, report.sites[0].module_type) == (left.index, "", "NCHWHeads")
    # the patches are a RESHAPE of the NHWC feature map; keep_dims' [N, 1, 1, C] is reshaped, not transposed
    assert after.op_counts.get("RESHAPE", 0) >= 1
    # the classifier flattens the NHWC map as it lies, its weight columns permuted to match
    (fc,) = [op for op in after.operators if op.opcode == "FULLY_CONNECTED"]
    flatten = after.producer_of(fc.inputs[0])
    assert flatten.opcode == "RESHAPE" and flatten.inputs[0] == conv_out
    used = {i for op in after.operators for i in (*op.inputs, *op.outputs)} | set(after.inputs) | set(after.outputs)
    assert used >= {t.index for t in after.tensors}, "tensors nothing reads are dropped"


def test_the_rewrites_compute_what_the_converter_graph_does_in_float(models):
    after = _rewritten(models.fp32)
    for sample in _inputs(models.fp32, 4):
        for kernels in (True, False):
            expected, got = _run(models.fp32, sample, kernels), _run(after, sample, kernels)
            assert [e.shape for e in expected] == [g.shape for g in got]
            for e, g in zip(expected, got):
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)  # float sums in another order
            np.testing.assert_array_equal(got[3], expected[3])  # the patches only move data


def test_the_rewrites_are_bit_exact_in_int8(models):
    after = _rewritten(models.int8)
    for sample in _inputs(models.int8, 4):
        for kernels in (True, False):
            for e, g in zip(_run(models.int8, sample, kernels), _run(after, sample, kernels)):
                np.testing.assert_array_equal(g, e)


def test_the_passes_change_nothing_the_second_time(models):
    after = _rewritten(models.fp32)
    result = run_flatbuffer_passes(after, LAYOUT_PASSES)
    assert result.modified_by == () and result.model is after


def test_a_transpose_that_moves_data_is_kept(models):
    """The NCHW input TRANSPOSE of a model without --channels-last is a real reorder: no change,
    and conversion hands the converter's bytes on untouched."""
    from edge_export.conversion.litert import convert_module, fold_layout_transposes

    torch.manual_seed(0)
    data = convert_module(nn.Sequential(nn.Conv2d(3, 4, 1)).eval(), (torch.randn(SHAPE),))
    model = read_flatbuffer(data)
    assert len(_transposes(model)) == 2  # NCHW in and out: the boundary transposes stay
    assert fold_layout_transposes(data) is data
    assert run_flatbuffer_passes(model, LAYOUT_PASSES).modified_by == ()
