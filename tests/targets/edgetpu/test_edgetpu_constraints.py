"""Each published Edge TPU requirement, with a flatbuffer (or a tiny model) that breaks it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgetpu_helpers import edit_flatbuffer, export_int8, find_op
from edge_export.errors import TargetError
from edge_export.flatbuffer import FlatbufferModel, OperatorInfo, TensorInfo, QuantParams
from edge_export.targets.edgetpu.mapping import OpStatus
from edge_export.targets.edgetpu.checks import (
    check_edgetpu,
    check_edgetpu_bytes,
    check_edgetpu_inputs,
    module_path_from_tensor_name,
)


def _op(report, opcode):
    return next(op for op in report.ops if op.opcode == opcode)


def test_base_model_maps(small_cnn_int8):
    report = check_edgetpu_bytes(small_cnn_int8)
    assert report.fully_mapped
    assert [op.opcode for op in report.ops] == ["CONV_2D", "MAX_POOL_2D", "MEAN", "FULLY_CONNECTED"]


def test_fused_activation_on_pooling(small_cnn_int8):
    def change(m):
        find_op(m, "MAX_POOL_2D").builtinOptions.fusedActivationFunction = 1  # RELU

    op = _op(check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change)), "MAX_POOL_2D")
    assert op.status is OpStatus.UNSPECIFIED and "fused activation" in op.reason


def test_fully_connected_shuffled_weights(small_cnn_int8):
    def change(m):
        find_op(m, "FULLY_CONNECTED").builtinOptions.weightsFormat = 1

    op = _op(check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change)), "FULLY_CONNECTED")
    assert op.status is OpStatus.UNSPECIFIED and "weight format" in op.reason


def test_weights_must_be_constant(small_cnn_int8):
    def change(m):
        m.subgraphs[0].tensors[find_op(m, "CONV_2D").inputs[1]].buffer = 0  # no data: a run-time tensor

    report = check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change))
    assert report.first_unmapped.opcode == "CONV_2D"
    assert "weights are not constant" in report.first_unmapped.reason


def test_float_tensor_is_an_unsupported_data_type(small_cnn_int8):
    from ai_edge_litert import schema_py_generated as schema

    def change(m):
        m.subgraphs[0].tensors[find_op(m, "MEAN").outputs[0]].type = schema.TensorType.FLOAT32

    op = _op(check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change)), "MEAN")
    assert op.status is OpStatus.UNSUPPORTED_DTYPE and "float32" in op.reason


def test_int16_activations_are_an_unsupported_data_type(small_cnn_int8):
    from ai_edge_litert import schema_py_generated as schema

    def change(m):
        for op in m.subgraphs[0].operators:
            m.subgraphs[0].tensors[op.outputs[0]].type = schema.TensorType.INT16

    report = check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change))
    assert report.first_unmapped.status is OpStatus.UNSUPPORTED_DTYPE and report.num_on_tpu == 0


def test_rank_rule_batch_above_one(small_cnn_int8):
    def change(m):
        t = m.subgraphs[0].tensors[find_op(m, "MAX_POOL_2D").outputs[0]]
        t.shape[0] = 2
        t.shapeSignature = None

    op = _op(check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change)), "MAX_POOL_2D")
    assert op.status is OpStatus.UNSUPPORTED_RANK


def test_dynamic_dimension(small_cnn_int8):
    def change(m):
        sg = m.subgraphs[0]
        t = sg.tensors[sg.inputs[0]]
        t.shapeSignature = [-1, *list(t.shape)[1:]]

    report = check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change))
    assert report.model_problems and "dynamic" in report.model_problems[0]
    assert report.num_on_tpu == 0 and not report.fully_mapped
    assert "dynamic dimension" in report.first_unmapped.reason


def test_operator_not_on_the_list(small_cnn_int8):
    from ai_edge_litert import schema_py_generated as schema

    def change(m):
        code = m.operatorCodes[find_op(m, "MAX_POOL_2D").opcodeIndex]
        code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.L2_POOL_2D

    report = check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change))
    assert report.first_unmapped.opcode == "L2_POOL_2D"
    assert report.first_unmapped.status is OpStatus.NOT_SUPPORTED and report.num_on_tpu == 1


def test_mean_over_channels(small_cnn_int8):
    import numpy as np

    def change(m):
        axes_tensor = m.subgraphs[0].tensors[find_op(m, "MEAN").inputs[1]]
        m.buffers[axes_tensor.buffer].data = np.frombuffer(np.array([1, 3], np.int32).tobytes(), np.uint8)

    op = _op(check_edgetpu_bytes(edit_flatbuffer(small_cnn_int8, change)), "MEAN")
    assert op.status is OpStatus.UNSPECIFIED and "[1, 3]" in op.reason


def test_strided_slice_with_stride_two():
    class Strided(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.fc2 = nn.Linear(16, 16), nn.Linear(8, 4)

        def forward(self, x):
            return self.fc2(self.fc(x)[:, :, ::2])

    report = check_edgetpu_bytes(export_int8(Strided().eval(), (torch.randn(1, 8, 16),)))
    assert report.first_unmapped.opcode == "STRIDED_SLICE"
    assert "strides [1, 1, 2]" in report.first_unmapped.reason
    assert report.ops[-1].status is OpStatus.AFTER_CUT


# ---- rules shown on small hand-built graphs (FlatbufferModel objects) ----------------------------

Q = QuantParams(scales=(0.1,), zero_points=(0,))


def _tensor(i, shape, dtype="int8", const=False, name=None):
    return TensorInfo(i, name or f"t{i}", tuple(shape), tuple(shape), dtype, const, Q if dtype in ("int8", "uint8") else None)


def _graph(tensors, ops, inputs, outputs):
    return FlatbufferModel(
        size_bytes=0, num_subgraphs=1, tensors=tuple(tensors), operators=tuple(ops), inputs=tuple(inputs),
        outputs=tuple(outputs), signatures=(), min_runtime_version=None, description=None,
        subgraph_operators=(tuple(ops),),
    )


def _op_info(i, opcode, ins, outs, options=None):
    return OperatorInfo(i, opcode, tuple(ins), tuple(outs), type(options).__name__ if options else None, options)


def _single(opcode, in_shapes, out_shape, options=None, const_inputs=()):
    tensors = [_tensor(i, s, const=i in const_inputs) for i, s in enumerate(in_shapes)]
    tensors.append(_tensor(len(tensors), out_shape))
    op = _op_info(0, opcode, range(len(in_shapes)), [len(in_shapes)], options)
    report = check_edgetpu(_graph(tensors, [op], [i for i in range(len(in_shapes)) if i not in const_inputs], [len(in_shapes)]))
    return report.ops[0]


def test_concatenation_with_a_constant_needs_exactly_two_inputs():
    from ai_edge_litert import schema_py_generated as schema

    opts = schema.ConcatenationOptionsT()
    opts.axis = 3
    three = _single("CONCATENATION", [(1, 4, 4, 2)] * 3, (1, 4, 4, 6), opts, const_inputs=(2,))
    assert three.status is OpStatus.UNSPECIFIED and "exactly 2" in three.reason
    two = _single("CONCATENATION", [(1, 4, 4, 2)] * 2, (1, 4, 4, 4), opts, const_inputs=(1,))
    assert two.status is OpStatus.MAPPED
    opts.fusedActivationFunction = 1
    fused = _single("CONCATENATION", [(1, 4, 4, 2)] * 2, (1, 4, 4, 4), opts)
    assert fused.status is OpStatus.UNSPECIFIED and "fused activation" in fused.reason


def test_pad_only_on_x_and_y():
    assert _single("PAD", [(1, 4, 4, 2), (4, 2)], (1, 6, 6, 2), const_inputs=(1,)).status is OpStatus.MAPPED
    channels = _single("PAD", [(1, 4, 4, 2), (4, 2)], (1, 4, 4, 4), const_inputs=(1,))
    assert channels.status is OpStatus.UNSPECIFIED and "x/y" in channels.reason


def test_softmax_is_1d_and_at_most_16000_elements():
    assert _single("SOFTMAX", [(1, 1000)], (1, 1000)).status is OpStatus.MAPPED
    big = _single("SOFTMAX", [(1, 20000)], (1, 20000))
    assert big.status is OpStatus.UNSPECIFIED and "16000" in big.reason
    two_d = _single("SOFTMAX", [(1, 4, 16)], (1, 4, 16))
    assert two_d.status is OpStatus.UNSPECIFIED and "1-D" in two_d.reason


def test_squeeze_only_of_leading_ones():
    from ai_edge_litert import schema_py_generated as schema

    opts = schema.SqueezeOptionsT()
    opts.squeezeDims = [0]
    assert _single("SQUEEZE", [(1, 4, 8)], (4, 8), opts).status is OpStatus.MAPPED
    opts.squeezeDims = [2]
    inner = _single("SQUEEZE", [(4, 8, 1)], (4, 8), opts)
    assert inner.status is OpStatus.UNSPECIFIED and "leading" in inner.reason


def test_strided_slice_masks():
    from ai_edge_litert import schema_py_generated as schema

    for mask in ("ellipsisMask", "newAxisMask"):
        opts = schema.StridedSliceOptionsT()
        setattr(opts, mask, 1)
        op = _single("STRIDED_SLICE", [(1, 4, 8), (3,), (3,), (3,)], (1, 4, 4), opts, const_inputs=(1, 2, 3))
        assert op.status is OpStatus.UNSPECIFIED and "mask" in op.reason


def test_resize_needs_3d_tensors():
    assert _single("RESIZE_NEAREST_NEIGHBOR", [(1, 4, 4, 8), (2,)], (1, 8, 8, 8), const_inputs=(1,)).status is OpStatus.MAPPED
    flat = _single("RESIZE_BILINEAR", [(4, 8), (2,)], (8, 8), const_inputs=(1,))
    assert flat.status is OpStatus.UNSPECIFIED and "3-D" in flat.reason


# ---- the partition rule -------------------------------------------------------------------------


def test_partition_rule_float_io_edges_do_not_cut_and_the_first_unsupported_op_does():
    t = [
        _tensor(0, (1, 8, 8, 3), "float32", name="input"),
        _tensor(1, (1, 8, 8, 3)),
        _tensor(2, (8, 3, 3, 3), const=True),
        _tensor(3, (1, 8, 8, 8)),
        _tensor(4, (1, 8, 8, 8)),  # HARD_SWISH output
        _tensor(5, (1, 8, 8, 8)),
        _tensor(6, (1, 8, 8, 8), "float32", name="output"),
    ]
    ops = [
        _op_info(0, "QUANTIZE", [0], [1]),
        _op_info(1, "CONV_2D", [1, 2, -1], [3]),
        _op_info(2, "HARD_SWISH", [3], [4]),
        _op_info(3, "CONV_2D", [4, 2, -1], [5]),
        _op_info(4, "DEQUANTIZE", [5], [6]),
    ]
    report = check_edgetpu(_graph(t, ops, [0], [6]))
    assert [op.on_tpu for op in report.ops] == [False, True, False, False, False]
    assert report.first_unmapped.index == 2 and report.first_unmapped.ops_before == 2
    assert report.ops[3].status is OpStatus.AFTER_CUT  # supported, but after the cut
    assert report.ops[0].supported and report.ops[4].supported  # the float I/O edges never cut
    assert report.num_segments == 1 and report.share_on_tpu == pytest.approx(0.2)
    rows = {(r.operator, r.status): r.count for r in report.table}
    assert rows[("CONV_2D", OpStatus.MAPPED.value)] == 1 and rows[("CONV_2D", OpStatus.AFTER_CUT.value)] == 1
    assert report.format_table().splitlines()[0].split() == ["Operator", "Count", "Status"]


def test_a_model_that_starts_with_an_unsupported_op_has_no_tpu_segment():
    t = [_tensor(0, (1, 8)), _tensor(1, (1, 8))]
    report = check_edgetpu(_graph(t, [_op_info(0, "GELU", [0], [1])], [0], [1]))
    assert report.num_on_tpu == 0 and report.num_segments == 0 and not report.fully_mapped


# ---- inputs and names ---------------------------------------------------------------------------


def test_inputs_batch_and_dynamic_dims_are_refused():
    from edge_export.config import InputSpec

    check_edgetpu_inputs([InputSpec((1, 3, 224, 224))])
    with pytest.raises(TargetError, match="batch 4"):
        check_edgetpu_inputs([InputSpec((4, 3, 224, 224))])
    with pytest.raises(TargetError, match="dynamic"):
        check_edgetpu_inputs([(1, -1, 16)])


def test_module_path_from_tensor_name():
    name = (
        "litert_torch._convert.to_channel_last_io.ChannelLastIOWrapper/pkg.ResNet_wrapped/"
        "torch.nn.modules.container.Sequential_layer1/pkg.BasicBlock_0/torch.nn.modules.conv.Conv2d_conv_a;2"
        ";;other/location;1"
    )
    assert module_path_from_tensor_name(name) == ("layer1.0.conv_a", "Conv2d")
    assert module_path_from_tensor_name("pkg.Model/torch.nn.modules.linear.Linear_head;") == ("head", "Linear")
    assert module_path_from_tensor_name("pkg.Model;3") == ("", "Model")
    assert module_path_from_tensor_name("serving_default_output_0_output") is None
    assert module_path_from_tensor_name("torch.export._trace._non_strict_export.<locals>.Wrapper;6") is None
