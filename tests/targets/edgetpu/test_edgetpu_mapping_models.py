"""The checker and the rewrites on whole models built in code and exported through PT2E int8."""

from __future__ import annotations

import inspect

import json

import numpy as np
import pytest
import torch
from torch import nn

from edgetpu_helpers import cached_int8, export_int8
from edge_export.flatbuffer import read_flatbuffer
from edge_export.runtime.interpreter import TFLiteRunner
from edge_export.targets.edgetpu.checks import check_edgetpu, check_edgetpu_bytes
from edge_export.targets.edgetpu.mapping import OpStatus
from edge_export.targets.edgetpu.rewrites import prepare_module_for_edgetpu, reorder_for_edgetpu
from edgetpu_models import mobilenet_v2_like, random_batchnorm_stats, resnet_like, transformer_encoder_like
from edge_export.output.serialize import to_json_value

IMAGE = (1, 3, 32, 32)


def _prepared(module, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    prep = prepare_module_for_edgetpu(module, (x,))
    return prep, x


@pytest.mark.slow
def test_mobilenet_v2_like_maps_fully_in_one_segment():
    def build():
        prep, x = _prepared(random_batchnorm_stats(mobilenet_v2_like()), IMAGE)
        return prep.module, (x,)

    report = check_edgetpu_bytes(cached_int8("mbv2_prepared", build))
    assert report.fully_mapped
    assert report.share_on_tpu == 1.0 and report.num_segments == 1
    assert {row.status for row in report.table} == {OpStatus.MAPPED.value}
    ops = {r.operator for r in report.table}
    assert {"DEPTHWISE_CONV_2D", "CONV_2D", "ADD", "FULLY_CONNECTED"} <= ops
    assert ops & {"MEAN", "AVERAGE_POOL_2D"}  # the global average, on x/y
    json.dumps(to_json_value(report))  # the JSON report takes it as is


def test_resnet_like_plain_export_is_cut_early_at_the_maxpool_padding():
    report = check_edgetpu_bytes(cached_int8("resnet_plain", lambda: (random_batchnorm_stats(resnet_like()), (torch.randn(IMAGE),))))
    cut = report.first_unmapped
    assert cut is not None and cut.opcode == "PADV2"
    assert cut.module_path == "maxpool" and cut.module_type == "MaxPool2d"
    assert cut.ops_before <= 3 and report.share_on_tpu < 0.15
    assert any("MaxPool2d_maxpool" in n for n in cut.output_names)
    # Partition rule: everything after the cut is on the CPU, supported ops with the compiler's status.
    after = report.ops[cut.index + 1 :]
    assert not any(op.on_tpu for op in after)
    assert {op.status for op in after if op.supported} == {OpStatus.AFTER_CUT}
    # The residual ADDs after the shared ReLU are int8 with the product's PT2E recipe (it restores
    # the source functions the annotators match; plain PT2E left them in float), so only the cut
    # keeps them off the Edge TPU.
    adds = [op for op in after if op.opcode == "ADD"]
    assert adds and all(op.status is OpStatus.AFTER_CUT for op in adds)


def test_resnet_like_with_rewrites_maps_fully_and_computes_the_same():
    module = random_batchnorm_stats(resnet_like())
    prep, x = _prepared(module, IMAGE)
    kinds = {r.kind for r in prep.rewrites}
    assert {"maxpool-replicate-padding", "split-reused-activation"} <= kinds
    with torch.no_grad():
        assert torch.equal(prep.module(x), module(x))  # exact rewrites, not approximations
    assert isinstance(module.maxpool, nn.MaxPool2d)  # the caller's module is untouched

    data = cached_int8("resnet_prepared", lambda: (prep.module, (x,)))
    report = check_edgetpu_bytes(data)
    assert report.fully_mapped and report.share_on_tpu == 1.0 and report.num_segments == 1
    counts = read_flatbuffer(data).op_counts
    assert not {"PADV2", "DEQUANTIZE", "QUANTIZE"} & set(counts)


class _HardswishInTheMiddle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Sequential(*[nn.Sequential(nn.Conv2d(8 if i else 3, 8, 3, 1, 1), nn.ReLU()) for i in range(4)])
        self.act = nn.Hardswish()
        self.tail = nn.Sequential(*[nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1), nn.ReLU()) for i in range(4)])

    def forward(self, x):
        return self.tail(self.act(self.head(x)))


@pytest.mark.slow
def test_cut_in_the_middle_at_an_unsupported_activation_and_its_rewrite():
    x = torch.randn(1, 3, 16, 16)
    model = _HardswishInTheMiddle().eval()
    report = check_edgetpu_bytes(export_int8(model, (x,)), source_module=model)
    cut = report.first_unmapped
    assert cut is not None
    assert 0.3 <= cut.index / report.num_ops <= 0.7
    assert 0.3 <= report.share_on_tpu <= 0.7
    assert cut.opcode in ("HARD_SWISH", "DEQUANTIZE")

    prep = prepare_module_for_edgetpu(model, (x,))
    with torch.no_grad():
        assert torch.allclose(prep.module(x), model(x), atol=1e-5)
    fixed = check_edgetpu_bytes(export_int8(prep.module, (x,)))
    assert fixed.fully_mapped, fixed.summary()


class _MeanOverNCHWAxes(nn.Module):
    """x.mean((2, 3)) after convs: litert-torch transposes back to NCHW and reduces the last axes
    (the layout passes then reduce the NHWC map over x/y instead); ``over_channels`` averages over
    the channels, which the Edge TPU cannot reduce in any layout."""

    def __init__(self, over_channels: bool = False) -> None:
        super().__init__()
        self.over_channels = over_channels
        self.body = nn.Sequential(*[nn.Sequential(nn.Conv2d(8 if i else 3, 8, 3, 1, 1), nn.ReLU()) for i in range(6)])
        self.fc = nn.Linear(16 * 16 if over_channels else 8, 4)

    def forward(self, x):
        features = self.body(x)
        return self.fc(features.mean(1).flatten(1) if self.over_channels else features.mean((2, 3)))


def test_a_mean_over_nchw_spatial_axes_maps_once_reduced_over_x_y():
    model = _MeanOverNCHWAxes().eval()
    report = check_edgetpu_bytes(export_int8(model, (torch.randn(1, 3, 16, 16),)), source_module=model)
    assert report.first_unmapped is None or report.first_unmapped.opcode != "MEAN", report.summary()
    assert "TRANSPOSE" not in [op.opcode for op in report.ops][1:-1]


def test_cut_late_at_a_mean_over_non_xy_axes():
    model = _MeanOverNCHWAxes(over_channels=True).eval()
    report = check_edgetpu_bytes(export_int8(model, (torch.randn(1, 3, 16, 16),)), source_module=model)
    cut = report.first_unmapped
    assert cut is not None and cut.opcode == "MEAN" and cut.status is OpStatus.UNSPECIFIED
    assert "x/y" in cut.reason
    assert cut.index >= report.num_ops - 3 and report.share_on_tpu > 0.6  # the six convs
    # the aten call and the line of forward() that made it (operator_origins), in its row too
    lines, start = inspect.getsourcelines(_MeanOverNCHWAxes)
    call = f"{inspect.getsourcefile(_MeanOverNCHWAxes)}:{start + next(i for i, t in enumerate(lines) if 'features.mean(1)' in t)}"
    assert cut.module_type == "_MeanOverNCHWAxes" and (cut.aten, cut.source) == ("aten.mean", call)
    assert f"MEAN (from aten.mean) in module '<root>' (_MeanOverNCHWAxes), at {call}" in report.summary()
    row = report.ops[cut.index]
    assert (row.aten, row.source) == ("aten.mean", call)
    assert all(op.aten is None for op in report.ops if op.supported)


def test_transformer_cut_is_moved_late_by_reordering_and_explained():
    x = torch.randn(1, 16, 32)
    # litert-torch's plain recipe leaves the residual ADD in float, and its DEQUANTIZE is scheduled
    # right after the first operator: the case reordering fixes (edge-export's own recipe quantizes
    # that ADD, so its cut is at a rank-5 RESHAPE that no schedule moves).
    data = cached_int8("tx_plain", lambda: (transformer_encoder_like(), (x,)), annotation_fixes=False)
    before = check_edgetpu_bytes(data)
    assert not before.fully_mapped and before.first_unmapped is not None
    reordered, changed = reorder_for_edgetpu(read_flatbuffer(data))
    after = check_edgetpu(reordered)
    assert changed and after.num_on_tpu > before.num_on_tpu
    assert after.first_unmapped is not None and after.first_unmapped.reason
    # Same graph, different schedule: same outputs.
    a = TFLiteRunner(data).run([x.numpy()])[0]
    b = TFLiteRunner(reordered).run([x.numpy()])[0]
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [IMAGE])
def test_reorder_leaves_a_fully_mapped_model_alone(shape, small_cnn_int8):
    model = read_flatbuffer(small_cnn_int8)
    same, changed = reorder_for_edgetpu(model)
    assert not changed and same is model
