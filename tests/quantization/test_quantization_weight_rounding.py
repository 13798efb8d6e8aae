"""Int8 filters rounded for their layers' outputs (GPTQ with bias correction, weight_rounding.py).

The model reads smooth images (neighbouring pixels correlate, as in photos, spectrograms and a
trained network's feature maps), through a conv, a depthwise conv, a strided conv and a fully
connected layer: the kinds of operator rounded. int16x8 keeps the activations' error small, so what
is measured is the int8 weights'."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.config import QuantizeMode
from edge_export.quantization.calibration import CalibrationSet


class SmoothImageNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.down = nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.head = nn.Linear(24 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = torch.relu(self.depthwise(x))
        x = torch.relu(self.down(x))
        return self.head(x.flatten(1))


def _smooth_images(count: int, seed: int) -> list[tuple[np.ndarray]]:
    rng = np.random.default_rng(seed)
    noise = torch.from_numpy(rng.standard_normal((count, 3, 20, 20)).astype(np.float32))
    smooth = torch.nn.functional.avg_pool2d(noise, 5, stride=1)  # 16x16, neighbours share 80% of their sum
    return [(s[None].numpy() * 2.0,) for s in smooth]


@pytest.fixture(scope="module")
def converted():
    from edge_export.conversion.litert import convert_module

    net = SmoothImageNet().eval()
    calibration = CalibrationSet(_smooth_images(48, 1), "smooth images", True)
    held_out = _smooth_images(16, 2)
    with torch.no_grad():
        refs = [net(torch.from_numpy(x[0])).numpy() for x in held_out]
    return convert_module(net, (torch.from_numpy(held_out[0][0]),)), calibration, held_out, refs


def _sqnr(model_bytes: bytes, held_out, refs) -> float:
    from edge_export.runtime.interpreter import Resolver, TFLiteRunner

    runner = TFLiteRunner(model_bytes, resolver=Resolver.BUILTIN)
    ref = np.concatenate([r.ravel() for r in refs])
    out = np.concatenate([runner.run(list(x))[0].ravel() for x in held_out])
    return float(10 * np.log10((ref**2).sum() / ((ref - out) ** 2).sum()))


def _filters(model_bytes: bytes) -> dict[str, np.ndarray]:
    from edge_export.flatbuffer import read_model
    from edge_export.passes.flatbuffer.graph_edits import float32_constant

    model = read_model(model_bytes)
    sg = model.subgraphs[0]
    found = {}
    for op in sg.operators:
        if len(op.inputs) > 1 and op.inputs[1] >= 0:
            values = float32_constant(model, sg, int(op.inputs[1]))
            if values is not None and values.ndim >= 2:
                found[sg.tensors[op.inputs[1]].name.decode()] = values
    return found


def test_every_weighted_operator_is_rounded_onto_the_quantizers_own_grid(converted):
    """Conv, depthwise, strided conv and fully connected: each filter lands on ai-edge-quantizer's
    per-channel int8 grid (each channel's largest weight kept, so the same scale), so quantizing
    it again changes nothing; and on the calibration inputs the layer's output error is below
    nearest rounding's."""
    from edge_export.passes.flatbuffer.split_weights_pass import int8_per_channel
    from edge_export.quantization.weight_rounding import round_weights, with_rounded_weights

    fp32, calibration, _, _ = converted
    rounding = round_weights(fp32, calibration.samples)
    assert len(rounding.operators) == 4 and rounding.samples == 48
    *convs, head = rounding.operators
    for op in convs:
        assert op.error < op.nearest_error, op.filter_name
    # the fully connected head: 1,536 inputs seen in 48 rows, too few to round for (it would fit them)
    assert head.values.ndim == 2 and head.error == head.nearest_error
    assert rounding.gain_db() > 3.0
    rounded = _filters(with_rounded_weights(fp32, rounding))
    original = _filters(fp32)
    for name, values in rounded.items():
        axis = 3 if values.shape[0] == 1 and values.ndim == 4 else 0  # depthwise 1HWO, else OHWI / OI
        np.testing.assert_array_equal(int8_per_channel(values, axis), values, err_msg=name)
        assert not np.array_equal(values, original[name]), name  # the head too: nearest, on the grid


def test_rounded_weights_lift_the_held_out_sqnr_at_int16x8_and_int8(converted):
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    fp32, calibration, held_out, refs = converted
    measured = {}
    for mode in (QuantizeMode.INT16X8, QuantizeMode.INT8):
        for rounding in (False, True):
            model = quantize_flatbuffer(fp32, mode, calibration, weight_rounding=rounding)
            measured[mode, rounding] = _sqnr(model, held_out, refs)
    # measured: int16x8 43.7 -> 51.5 dB, int8 38.1 -> 40.4 dB (its activations' rounding then weighs more)
    assert measured[QuantizeMode.INT16X8, True] > measured[QuantizeMode.INT16X8, False] + 5.0, measured
    assert measured[QuantizeMode.INT8, True] > measured[QuantizeMode.INT8, False] + 1.0, measured


def test_operators_left_float_and_filters_rewritten_since_keep_their_weights(converted):
    """``keep`` (a search's float promotions) and a filter whose values changed after rounding was
    computed (a weight split's W_hi) are not overwritten; the other filters still are."""
    from edge_export.flatbuffer import read_model
    from edge_export.passes.flatbuffer.split_weights_pass import splittable_operators
    from edge_export.quantization.weight_rounding import round_weights, with_rounded_weights
    from edge_export.quantization.weight_splitting import split_float_model

    fp32, calibration, _, _ = converted
    rounding = round_weights(fp32, calibration.samples)
    first = rounding.operators[0]
    original = _filters(fp32)
    kept = _filters(with_rounded_weights(fp32, rounding, keep={first.op_index}))
    np.testing.assert_array_equal(kept[first.filter_name], original[first.filter_name])
    assert sum(not np.array_equal(kept[n], original[n]) for n in original) == len(original) - 1

    split = split_float_model(fp32, [splittable_operators(read_model(fp32))[0]])
    before, after = _filters(split), _filters(with_rounded_weights(split, rounding))
    halves = [n for n in before if n.endswith((";split_hi", ";split_lo"))]
    assert len(halves) == 2 and all(np.array_equal(before[n], after[n]) for n in halves)
    changed = [n for n in before if not np.array_equal(before[n], after[n])]
    assert sorted(changed) == sorted(op.filter_name for op in rounding.operators[1:])


def test_degenerate_inputs_stay_bounded_and_a_dead_channels_bias_fits_int32():
    """Inputs that are all zero or constant give a singular X^T X: the damping and the dead-column
    rule keep the rounding finite and on the grid. A channel whose weights are all zero but whose
    bias is not (a pruned channel, BatchNorm folded) would need 2**40 integer bias steps at
    ai-edge-quantizer's scale (1e-9 / 127) and be clipped at int32 (bias_saturation.py): its scale
    is raised by one weight on its quietest input (here an input that is always zero, so the output
    is unchanged), and the quantized model has no clipped bias, at int8 or int16x8."""
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.passes.flatbuffer.split_weights_pass import int8_per_channel
    from edge_export.quantization.bias_saturation import saturated_biases
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer
    from edge_export.quantization.weight_rounding import round_weights

    net = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3)).eval()
    with torch.no_grad():
        net[0].weight[1] = 0
        net[0].bias[1] = 0.8
    x = torch.zeros(1, 2, 8, 8)
    x[:, 0] = 1.0  # channel 0 constant, channel 1 always zero
    fp32 = convert_module(net, (x,))
    samples = [(x.numpy(),)] * 4
    rounding = round_weights(fp32, samples)
    for op in rounding.operators:
        assert np.all(np.isfinite(op.values)) and (op.bias is None or np.all(np.isfinite(op.bias)))
        np.testing.assert_array_equal(int8_per_channel(op.values, 0), op.values)
    conv = next(op for op in rounding.operators if op.values.ndim == 4)
    dead = conv.values[1]  # OHWI: [3, 3, 2]
    assert np.count_nonzero(dead) == 1 and np.count_nonzero(dead[..., 0]) == 0  # one weight, on the zero input
    calibration = CalibrationSet(samples, "constant", True)
    for mode in (QuantizeMode.INT8, QuantizeMode.INT16X8):
        nearest = read_flatbuffer(quantize_flatbuffer(fp32, mode, calibration, weight_rounding=False))
        rounded = read_flatbuffer(quantize_flatbuffer(fp32, mode, calibration))
        assert [b.saturated for b in saturated_biases(nearest)] == [1], mode
        assert saturated_biases(rounded) == (), mode


def test_a_layer_whose_float_inputs_overflow_is_left_to_the_quantizer():
    """Inputs that reach Inf in float (a layer scaling by 1e30) give an X^T X of Inf: that filter is
    not rounded here; the one after, whose inputs are finite, is."""
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization.weight_rounding import round_weights

    class Overflowing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = nn.Conv2d(2, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.second(torch.tanh(self.first(x * 1e30)))

    x = torch.randn(1, 2, 8, 8, generator=torch.Generator().manual_seed(0)) * 1e10
    fp32 = convert_module(Overflowing().eval(), (x,))
    rounding = round_weights(fp32, [(x.numpy(),)] * 4)
    assert len(rounding.operators) == 1 and np.all(np.isfinite(rounding.operators[0].values))


def test_a_filter_with_a_nan_weight_is_left_to_the_quantizer():
    """NaN in a filter (a broken checkpoint) makes nothing to round for: that filter is skipped,
    the others are rounded, and nothing NaN is written anywhere else."""
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization.weight_rounding import round_weights

    net = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1)).eval()
    x = torch.randn(1, 2, 8, 8, generator=torch.Generator().manual_seed(0))
    fp32 = convert_module(net, (x,))
    with torch.no_grad():
        net[2].weight[0, 0, 0, 0] = float("nan")
    broken = convert_module(net, (x,))
    assert len(round_weights(fp32, [(x.numpy(),)] * 4).operators) == 2
    (kept,) = round_weights(broken, [(x.numpy(),)] * 4).operators
    assert np.all(np.isfinite(kept.values)) and np.all(np.isfinite(kept.bias))


def _reference_gptq(weights, hessian, grid):
    """GPTQ column by column over the whole filter: what the blocked version must compute."""
    from edge_export.quantization import weight_rounding as wr

    groups, rows, d = weights.shape
    h = hessian.clone()
    diag = torch.diagonal(h, dim1=-2, dim2=-1)
    diag += torch.where(diag <= 0, 1.0, wr._DAMP * diag.mean(-1, keepdim=True).clamp_min(1e-30))
    perm = torch.argsort(torch.diagonal(h, dim1=-2, dim2=-1), dim=-1, descending=True)
    g = torch.arange(groups)[:, None, None]
    upper = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h[g, perm[:, :, None], perm[:, None, :]])), upper=True)
    w = weights.gather(2, perm[:, None, :].expand(groups, rows, d)).clone()
    anchor_at = torch.argsort(perm, dim=-1).gather(1, grid.anchor)
    q = torch.empty_like(w)
    for j in range(d):
        steps = torch.clamp(torch.round(w[:, :, j] / grid.scale), -127, 127)
        q[:, :, j] = torch.where((grid.steps != 0) & (anchor_at == j), grid.steps, steps) * grid.scale
        w[:, :, j + 1:] -= ((w[:, :, j] - q[:, :, j]) / upper[:, j, j][:, None])[:, :, None] * upper[:, None, j, j + 1:]
    return torch.empty_like(q).scatter_(2, perm[:, None, :].expand(groups, rows, d), q)


def test_blocked_gptq_rounds_as_the_column_by_column_update_does():
    """The lazy batch update (blocks of 128 columns, the rest updated once per block) is the same
    sums in another order: on 300 correlated inputs (two full blocks and a partial one) and 2 groups
    it picks the same int8 step for every weight but a handful at a rounding tie."""
    from edge_export.quantization import weight_rounding as wr

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2000, 300, generator=gen, dtype=torch.float64).cumsum(-1) / 10  # neighbours correlate
    hessian = x.mT @ x / x.shape[1]
    weights = torch.randn(2, 6, 300, generator=gen, dtype=torch.float64)
    quiet = torch.argmin(torch.diagonal(hessian, dim1=-2, dim2=-1), dim=-1)
    grid = wr._grid(weights, quiet, torch.zeros(2, 6, dtype=torch.float64))
    blocked, reference = wr._gptq(weights, hessian, grid), _reference_gptq(weights, hessian, grid)
    steps = lambda q: torch.round(q / grid.scale[..., None])  # noqa: E731
    assert (steps(blocked) != steps(reference)).sum() <= 3
    assert wr._output_error(weights, blocked, hessian) < 0.5 * wr._output_error(weights, wr._nearest(weights, grid), hessian)


@pytest.mark.parametrize("opcode, groups", [("CONV_2D", 1), ("CONV_2D", 2), ("DEPTHWISE_CONV_2D", 4)])
def test_patches_picked_before_the_copy_are_the_rows_of_the_full_copy(opcode, groups, monkeypatch):
    """With more patches than _ROWS_PER_SAMPLE (2 images of 48x48, strides 1 and 2), the rows picked
    before the transposed copy are the rows the full copy would give at the same random picks."""
    from types import SimpleNamespace

    from edge_export.quantization import weight_rounding as wr

    channels = 4
    per_group = 1 if opcode == "DEPTHWISE_CONV_2D" else channels // groups
    options = SimpleNamespace(strideH=1, strideW=2, dilationHFactor=1, dilationWFactor=1, padding=0)
    layer = wr._Layer(0, opcode, 0, 1, None, np.zeros((groups if opcode == "CONV_2D" else channels, 3, 9 * per_group)),
                      options, (3, 3))
    x = torch.randn(2, 48, 48, channels, generator=torch.Generator().manual_seed(1))
    picked = wr._patches(layer, x, np.random.default_rng(5))
    rows = wr._ROWS_PER_SAMPLE
    monkeypatch.setattr(wr, "_ROWS_PER_SAMPLE", 10**9)
    full = wr._patches(layer, x, None)  # every patch, copied whole
    rng = np.random.default_rng(5)
    assert full.shape[1] == 2 * 48 * 24 > rows
    expected = full[:, torch.from_numpy(np.sort(rng.choice(full.shape[1], rows, replace=False)))]
    torch.testing.assert_close(picked, expected, rtol=0, atol=0)
