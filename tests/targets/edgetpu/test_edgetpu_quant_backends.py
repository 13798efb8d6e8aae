"""The two quantization-backend fixes that make ExportedProgram models map onto the Edge TPU:
PT2E's add/cat annotators see non-strict graphs again, and the flatbuffer backend floors activation
scales so a (nearly) dead layer no longer makes LiteRT refuse the model."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edge_export.flatbuffer import read_flatbuffer
from edge_export.config import QuantizeMode
from edge_export.conversion.litert import convert_module
from edge_export.passes.fx import restore_source_functions_pass
from edge_export.quantization.calibration import CalibrationSet
from edge_export.quantization.flatbuffer_recipes import MIN_SCALE, floor_ranges, quantize_flatbuffer
from edge_export.quantization.pt2e import make_pt2e_quantizer, quantize_pt2e
from edge_export.quantization.selection import check_integer
from edge_export.runtime.interpreter import Resolver, TFLiteRunner
from edge_export.targets.edgetpu.checks import check_edgetpu_bytes


class _Residual(nn.Module):
    """conv-bn-relu6 then a residual add followed by a functional relu, as in MobileNetV2/ResNet."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8))
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.stem(x)
        y = torch.relu(y + self.body(y))
        return self.head(y + y)


def _exported_graph(module: nn.Module, shape=(1, 3, 8, 8)):
    """What the loader hands on for a .pt2: the ExportedProgram's GraphModule (non-strict export)."""
    torch.manual_seed(0)
    return torch.export.export(module.eval(), (torch.randn(shape),)).module()


def _calibration(shape, n=4, seed=0) -> CalibrationSet:
    rng = np.random.default_rng(seed)
    return CalibrationSet(tuple((rng.standard_normal(shape).astype(np.float32),) for _ in range(n)), "test", False)


def _add_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.add.Tensor]


def test_non_strict_graphs_lack_the_metadata_the_add_annotator_needs():
    gm = torch.export.export(_exported_graph(_Residual()), (torch.randn(1, 3, 8, 8),)).module()
    quantizer = make_pt2e_quantizer(QuantizeMode.INT8)
    plain = quantizer.annotate(_copy(gm))
    assert not any("quantization_annotation" in n.meta for n in _add_nodes(plain))

    assert restore_source_functions_pass(gm) > 0
    assert all(n.meta["source_fn_stack"][-1][1] is torch.add for n in _add_nodes(gm))
    assert restore_source_functions_pass(gm) == 0  # idempotent: nodes with metadata are left alone
    annotated = quantizer.annotate(gm)
    adds = _add_nodes(annotated)
    # Both adds get quantized inputs; the add+relu pattern puts the output spec on the relu.
    assert all(n.meta["quantization_annotation"].input_qspec_map for n in adds)
    relu = next(iter(adds[0].users))
    assert relu.target is torch.ops.aten.relu.default
    assert relu.meta["quantization_annotation"].output_qspec is not None
    assert adds[1].meta["quantization_annotation"].output_qspec is not None


def _copy(gm):
    import copy

    return copy.deepcopy(gm)


def test_pt2e_quantizes_residual_adds_of_an_exported_program_fully():
    gm = _exported_graph(_Residual())
    data = quantize_pt2e(gm, (torch.randn(1, 3, 8, 8),), QuantizeMode.INT8, _calibration((1, 3, 8, 8)), observer="minmax")
    check = check_integer(read_flatbuffer(data))
    assert check.fully_integer and not check.inner_quantize_ops
    report = check_edgetpu_bytes(data)
    # Float I/O keeps one QUANTIZE in and one DEQUANTIZE out at the edges; every op between maps.
    assert report.num_segments == 1
    assert all(op.on_tpu for op in report.ops if op.opcode in ("ADD", "CONV_2D"))


def test_floor_ranges_widens_only_collapsed_ranges_keeping_zero_inside():
    qsvs = {
        "dead": {"min": np.zeros((1, 1, 1, 1), np.float32), "max": np.full((1, 1, 1, 1), 1e-7, np.float32)},
        "negative": {"min": np.array([-1e-9], np.float32), "max": np.array([0.0], np.float32)},
        "across": {"min": np.array([-1e-9], np.float32), "max": np.array([1e-9], np.float32)},
        "healthy": {"min": np.array([-2.0], np.float32), "max": np.array([3.0], np.float32)},
        "weight": {"min": np.array([0.0], np.float32), "max": np.array([0.0], np.float32)},
    }
    floored, widened = floor_ranges(qsvs, QuantizeMode.INT8, {"weight"})
    width = 255 * MIN_SCALE
    assert sorted(widened) == ["across", "dead", "negative"]
    assert floored["dead"]["min"].item() == 0.0 and np.isclose(floored["dead"]["max"].item(), width)
    assert floored["negative"]["max"].item() == 0.0 and np.isclose(floored["negative"]["min"].item(), -width)
    assert np.isclose(floored["across"]["max"] - floored["across"]["min"], width).all()
    assert floored["across"]["min"].item() < 0 < floored["across"]["max"].item()
    assert floored["healthy"] is qsvs["healthy"] and floored["weight"] is qsvs["weight"]
    assert floored["dead"]["max"].shape == (1, 1, 1, 1)  # ai-edge-quantizer's shapes are kept


class _VanishingActivations(nn.Module):
    """A first conv with ~1e-9 weights: every later activation is ~1e-9 (a dead/vanishing layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1, bias=False)
        self.dw = nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False)
        self.act = nn.ReLU6()
        self.pw = nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            self.conv.weight.mul_(1e-9)

    def forward(self, x):
        return self.pw(self.act(self.dw(self.act(self.conv(x)))))


def test_flatbuffer_backend_model_with_a_vanishing_layer_loads_and_runs():
    torch.manual_seed(0)
    module = _VanishingActivations().eval()
    x = torch.randn(1, 3, 8, 8)
    float_bytes = convert_module(module, (x,))
    data = quantize_flatbuffer(float_bytes, QuantizeMode.INT8, _calibration((1, 3, 8, 8)))
    # Without the floor LiteRT refuses it: "no_integer_overflow_from_quantization" (RELU6 bound).
    runner = TFLiteRunner(data, resolver=Resolver.BUILTIN)
    (out,) = runner.run([x.numpy()])
    with torch.no_grad():
        ref = module(x).numpy()
    # The vanishing branch quantizes to zero; what is left is the last conv's bias, exactly.
    assert np.allclose(out, ref, atol=0.02 * float(np.abs(ref).max()) + 1e-6)
    assert check_integer(read_flatbuffer(data)).fully_integer
