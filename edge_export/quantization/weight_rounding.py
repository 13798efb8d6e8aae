"""Int8 weights rounded for what the layer computes, not weight by weight.

    rounding = round_weights(float_bytes, samples)       # once per float model and calibration set
    float_bytes = with_rounded_weights(float_bytes, rounding, keep={op indices left float})

Rounding each weight to its nearest int8 step (what ai-edge-quantizer does) leaves errors that add
up along a filter: on the trained YOLO11n of the benchmark, per-channel int8 weights alone, every
activation float, take the class scores to 12.4 dB (docs/BENCHMARKS.md 36). Here, for each CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED with a constant float filter, the filter is rounded column by
column, each column's rounding error pushed onto the columns not yet rounded in proportion to how
the layer's inputs correlate (GPTQ: Frantar et al. 2022, the inverse Hessian ``(X^T X)^-1`` of the
layer's inputs X on the calibration samples, largest-variance columns first), and the bias then
takes the mean output shift that is left ((W - Q) E[x]: bias correction, Nagel et al. 2019).

The rounded filter lies on ai-edge-quantizer's per-channel int8 grid (scale = max|w| / 127 per
output channel; each channel's largest weight keeps its step, so the quantizer computes the same
scale and quantizing it again is lossless): this is a rewrite of the FLOAT model's constants, before
ai-edge-quantizer, and the quantizer needs nothing new.

One exception to "the same scale": a channel whose integer bias would not fit int32 at that scale
(bias / (input scale x weight scale); a channel whose weights are all about zero, BatchNorm having
folded a near-zero gamma into them, with a bias of -1.85 in the trained YOLO11n's attention, needs
2**40 steps and is clipped: quantization/bias_saturation.py) gets the least scale at which it fits
at int16 input scales with room to spare, pinned by one weight on the channel's quietest input (least
E[x^2]; its mean goes into the bias). On the trained YOLO11n at int16x8 that one channel took the
class scores from 25 to 14 dB.

A filter keeps nearest rounding (on that grid, with the bias correction) when its inputs were seen
in fewer than 2 rows per input on the calibration samples (a fully connected layer over a few hundred
crops: GPTQ would fit those samples), or when GPTQ's rounding is no better on them (the damping).

Operators left float (a search's float promotions, a step function's feeders) and filters that a
later rewrite changed (a weight split's ``W_hi``) keep their own weights: a rounded filter is written
only where the tensor still holds the float values it was computed from (``source`` digest).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..passes.flatbuffer.graph_edits import float32_constant

__all__ = ["RoundedOperator", "WeightRounding", "round_weights", "with_rounded_weights"]

# opcode -> the filter's output-channel axis (TFLite layouts: OHWI, 1HWO, OI)
_OPCODES = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}
_MAX_SAMPLES = 64  # calibration samples whose inputs are gathered (the rest add little to X^T X)
_ROWS_PER_SAMPLE = 2048  # input rows (im2col patches) kept per sample and operator, chosen at random
_DAMP = 0.01  # of the mean diagonal, added to X^T X: an input never seen is not trusted to be zero
# Input rows per filter input below which a filter keeps nearest rounding (and the bias correction):
# fewer rows than inputs leave X^T X singular, and GPTQ then fits the calibration samples, not the
# layer (MTCNN's R-Net, 576 inputs to a fully connected layer and 256 crops: 22.6 -> 19.8 dB held out).
_MIN_ROWS_PER_INPUT = 2
# X^T X held at once (float64); more operators are gathered in several runs of the float model, each
# a pass over the samples (CRAFT's VGG body holds 1.2 GB: at 1 GiB it took two, 45 s of its 228 s)
_STATS_BYTES = 2 << 30
_BLOCK = 128  # columns rounded together before the rest of the filter takes their errors
# Inputs per output a filter may have to be rounded here (ResNet's 3x3x512; its X^T X is 170 MB and
# costs O(d^3)); a wider one (a fully connected layer over a flattened feature map) keeps nearest rounding.
_MAX_INPUTS = 4608
_MIN_BOUND = 1e-9  # ai-edge-quantizer's floor on a channel's max |w|
_BIAS_HEADROOM = 4.0  # an integer bias kept under a quarter of the int32 limit: ranges shift after calibration


@dataclass(frozen=True)
class RoundedOperator:
    op_index: int  # in the model it was rounded for
    filter_name: str
    source: str  # digest of the float filter it was computed from
    values: np.ndarray  # float32, on the per-channel int8 grid
    bias_index: int | None  # the bias tensor (None: the operator has none, no correction)
    bias: np.ndarray | None
    nearest_error: float  # sum of squared output errors on the calibration rows: nearest rounding
    error: float  # the same, kept rounding


@dataclass(frozen=True)
class WeightRounding:
    operators: tuple[RoundedOperator, ...]
    samples: int
    seconds: float

    def gain_db(self) -> float | None:
        """The calibration rows' output error of nearest rounding over the kept one, in dB, summed
        over the operators (None when nothing was rounded)."""
        nearest = sum(op.nearest_error for op in self.operators)
        kept = sum(op.error for op in self.operators)
        return None if not self.operators or kept <= 0 or nearest <= 0 else float(10 * np.log10(nearest / kept))


@dataclass(frozen=True)
class _Layer:
    """One operator to round: its filter as [groups, rows per group, inputs per row] and how to
    turn its input tensor into rows of the same inputs."""

    op_index: int
    opcode: str
    input_index: int
    filter_index: int
    bias_index: int | None
    weights: np.ndarray  # [G, O, d] float64
    options: Any
    kernel: tuple[int, int]  # (kh, kw); (1, 1) for FULLY_CONNECTED


def _digest(values: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(values, dtype=np.float32).tobytes()).hexdigest()


def _grouped(opcode: str, filt: np.ndarray, in_channels: int) -> np.ndarray | None:
    """The filter as [G, O, d] rows over the inputs each output reads (im2col order kh, kw, c)."""
    if opcode == "FULLY_CONNECTED":
        return filt.reshape(1, filt.shape[0], -1) if filt.ndim == 2 else None
    if opcode == "DEPTHWISE_CONV_2D":  # [1, kh, kw, C*M]: output c*M+m reads input channel c
        if filt.ndim != 4 or in_channels <= 0 or filt.shape[3] % in_channels:
            return None
        mult = filt.shape[3] // in_channels
        return filt.reshape(-1, in_channels, mult).transpose(1, 2, 0)
    if filt.ndim != 4 or in_channels % filt.shape[3]:  # CONV_2D: OHWI, groups = C_in / I
        return None
    groups = in_channels // filt.shape[3]
    if filt.shape[0] % groups:
        return None
    return filt.reshape(groups, filt.shape[0] // groups, -1)


def _layers(model: Any, skip: Collection[int]) -> list[_Layer]:
    """The main subgraph's operators whose filter can be rounded here: a float constant that only
    this operator reads, through a buffer no other tensor holds, and a float input of known shape."""
    from ..passes.flatbuffer.graph_edits import opcode_name

    sg = model.subgraphs[0]
    readers: dict[int, int] = {}
    for op in sg.operators or ():
        for t in op.inputs if op.inputs is not None else ():
            readers[int(t)] = readers.get(int(t), 0) + 1
    holders: dict[int, int] = {}
    for tensor in sg.tensors:
        holders[tensor.buffer] = holders.get(tensor.buffer, 0) + 1
    found = []
    for index, op in enumerate(sg.operators or ()):
        opcode = opcode_name(model, op)
        if opcode not in _OPCODES or index in skip or op.inputs is None or len(op.inputs) < 2:
            continue
        layer = _layer(model, sg, index, op, opcode, readers, holders)
        if layer is not None:
            found.append(layer)
    return found


def _layer(model: Any, sg: Any, index: int, op: Any, opcode: str, readers: dict, holders: dict) -> _Layer | None:
    inputs = [int(t) for t in op.inputs]
    filt = float32_constant(model, sg, inputs[1])
    if filt is None or readers.get(inputs[1]) != 1 or holders.get(sg.tensors[inputs[1]].buffer) != 1:
        return None
    if not np.all(np.isfinite(filt)):  # NaN/Inf weights: nothing to round for; the quantizer reports them
        return None
    if float32_constant(model, sg, inputs[0]) is not None:  # a constant input: nothing to calibrate on
        return None
    bias = inputs[2] if len(inputs) > 2 and inputs[2] >= 0 else None
    bias_values = float32_constant(model, sg, bias) if bias is not None else None
    if bias is not None and (bias_values is None or not np.all(np.isfinite(bias_values)) or readers.get(bias) != 1
                             or holders.get(sg.tensors[bias].buffer) != 1):
        return None
    shape = list(sg.tensors[inputs[0]].shape)
    grouped = _grouped(opcode, filt, int(shape[-1]) if shape else 0)
    if grouped is None or (opcode != "FULLY_CONNECTED" and len(shape) != 4):
        return None
    groups, _, d = grouped.shape
    if d > _MAX_INPUTS or 8 * groups * d * d > _STATS_BYTES:
        return None
    kernel = (1, 1) if opcode == "FULLY_CONNECTED" else (int(filt.shape[1]), int(filt.shape[2]))
    return _Layer(index, opcode, inputs[0], inputs[1], bias, grouped.astype(np.float64), op.builtinOptions, kernel)


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _rows(layer: _Layer, x: np.ndarray, rng: np.random.Generator) -> Any:
    """The layer's input as rows [G, n, d] in the filter's column order, at most _ROWS_PER_SAMPLE."""
    import torch

    _, _, d = layer.weights.shape
    if layer.opcode == "FULLY_CONNECTED":
        rows = torch.from_numpy(np.asarray(x, np.float32).reshape(-1, d))[None]
        if rows.shape[1] > _ROWS_PER_SAMPLE:
            rows = rows[:, _picked(rows.shape[1], rng)]
        return rows
    return _patches(layer, torch.from_numpy(np.asarray(x, np.float32)), rng)


def _picked(count: int, rng: np.random.Generator) -> Any:
    import torch

    return torch.from_numpy(np.sort(rng.choice(count, _ROWS_PER_SAMPLE, replace=False)))


def _patches(layer: _Layer, x: Any, rng: np.random.Generator) -> Any:
    """im2col of an NHWC input for the layer's kernel, as [G, rows, kh*kw*Cg] (kh, kw, c order):
    all N*L patches, or _ROWS_PER_SAMPLE of them picked before the transposed copy is made (a
    full copy of a 64-channel 256x256 input's patches is 150 MB per sample)."""
    import torch

    opts = layer.options
    groups, _, d = layer.weights.shape
    n, _, _, channels = x.shape
    kh, kw = layer.kernel
    stride, dilation = (opts.strideH, opts.strideW), (opts.dilationHFactor or 1, opts.dilationWFactor or 1)
    x = x.permute(0, 3, 1, 2)
    if opts.padding == 0:  # SAME
        top, bottom = _same_padding(x.shape[2], kh, stride[0], dilation[0])
        left, right = _same_padding(x.shape[3], kw, stride[1], dilation[1])
        x = torch.nn.functional.pad(x, (left, right, top, bottom))
    cols = torch.nn.functional.unfold(x, (kh, kw), dilation=dilation, stride=stride)  # [N, C*kh*kw, L]
    cg = channels // groups
    cols = cols.view(n, groups, cg, kh * kw, -1).permute(1, 0, 4, 3, 2)  # [G, N, L, khkw, Cg]
    count = n * cols.shape[2]
    if count <= _ROWS_PER_SAMPLE:
        return cols.reshape(groups, -1, kh * kw * cg)
    pick = _picked(count, rng)
    return cols[:, pick // cols.shape[2], pick % cols.shape[2]].reshape(groups, -1, kh * kw * cg)


@dataclass(frozen=True)
class _Statistics:
    """A layer's inputs on the calibration samples: E[x x^T] [G, d, d], E[x] [G, d], max |x|."""

    outer: Any
    mean: Any
    bound: float
    rows: int


def _input_statistics(runner: Any, layers: Sequence[_Layer], samples: Sequence[tuple]) -> list[_Statistics]:
    stats = [_Moments() for _ in layers]
    rng = np.random.default_rng(0)
    for sample in samples:
        runner.run(list(sample))
        for layer, moments in zip(layers, stats):
            x = runner.tensor(layer.input_index)
            moments.bound = max(moments.bound, float(np.max(np.abs(x))) if x.size else 0.0)
            moments.add(_rows(layer, x, rng))
    return [moments.result() for moments in stats]


class _Moments:
    """Running sums of x x^T and x over rows, the rows of several samples multiplied together
    (a fully connected layer's one row per sample would otherwise cost a d x d product each)."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.held = 0
        self.count = 0
        self.outer: Any = None
        self.total: Any = None
        self.bound = 0.0

    def add(self, rows: Any) -> None:
        self.pending.append(rows)
        self.held += rows.shape[1]
        if self.held >= _ROWS_PER_SAMPLE:
            self._flush()

    def _flush(self) -> None:
        import torch

        if not self.pending:
            return
        rows = torch.cat(self.pending, dim=1)
        # float32 products of a few thousand rows, summed in float64
        outer = torch.bmm(rows.transpose(1, 2), rows).double()
        total = rows.double().sum(1)
        self.outer = outer if self.outer is None else self.outer.add_(outer)
        self.total = total if self.total is None else self.total.add_(total)
        self.count += rows.shape[1]
        self.pending, self.held = [], 0

    def result(self) -> _Statistics:
        self._flush()
        return _Statistics(self.outer / max(self.count, 1), self.total / max(self.count, 1), self.bound, self.count)


@dataclass(frozen=True)
class _Grid:
    """Each row's int8 grid: its scale, the column that sets it (anchor) and that column's step."""

    scale: Any  # [G, O] float64
    anchor: Any  # [G, O] column index
    steps: Any  # [G, O] the anchor's step (+-127; 0: a zero row, nothing pinned)


def _grid(weights: Any, quiet: Any, needed: Any) -> _Grid:
    """ai-edge-quantizer's per-channel scale (max|w| / 127, in float32 as split_weights_pass.
    int8_per_channel computes it), raised to ``needed`` where the integer bias would overflow at
    that scale. The anchor keeps its step, so the quantizer computes the same scale again: the
    largest |w|, or where the scale was raised, the row's quietest input (``quiet``: least E[x^2]),
    whose weight then sets the new scale at the least cost (the bias takes its mean)."""
    import torch

    bound = weights.abs().amax(-1).float().clamp_min(_MIN_BOUND)
    scale = (bound / 127.0).double()
    raised = needed > scale
    scale = torch.where(raised, needed, scale)
    anchor = torch.where(raised, quiet[:, None].expand_as(raised), weights.abs().argmax(-1))
    sign = torch.sign(weights.gather(2, anchor[..., None])[..., 0])
    sign = torch.where(raised & (sign == 0), 1.0, sign)
    live = raised | (weights.abs().amax(-1) >= _MIN_BOUND)
    return _Grid(scale, anchor, torch.where(live, sign * 127, 0.0))


def _gptq(weights: Any, hessian: Any, grid: _Grid) -> Any:
    """GPTQ over [G, O, d] weights on ``grid``: columns in order of decreasing input energy, each
    rounded and its error spread over the columns after it by the Cholesky factor of the damped
    inverse Hessian. Returns the rounded weights (float64, on the grid)."""
    import torch

    groups, rows, d = weights.shape
    scale = grid.scale
    h = hessian.clone()
    diag = torch.diagonal(h, dim1=-2, dim2=-1)
    dead = diag <= 0
    diag += torch.where(dead, 1.0, _DAMP * diag.mean(-1, keepdim=True).clamp_min(1e-30))
    perm = torch.argsort(torch.diagonal(h, dim1=-2, dim2=-1), dim=-1, descending=True)
    g = torch.arange(groups)[:, None, None]
    h = h[g, perm[:, :, None], perm[:, None, :]]
    # H^-1 from the inverse of its Cholesky factor: torch.cholesky_inverse ran 20x slower on 2
    # threads than on 1 when the cores were busy (2048 inputs: 6 s against 0.3 s)
    lower_inv = torch.linalg.solve_triangular(torch.linalg.cholesky(h), torch.eye(d, dtype=h.dtype).expand_as(h), upper=False)
    upper = torch.linalg.cholesky(lower_inv.mT @ lower_inv, upper=True)
    w = weights.gather(2, perm[:, None, :].expand(groups, rows, d)).clone()
    anchor_at = torch.argsort(perm, dim=-1).gather(1, grid.anchor)  # [G, O]: the anchor's permuted column
    q = torch.empty_like(w)
    for start in range(0, d, _BLOCK):
        _gptq_block(w, q, upper, grid, anchor_at, start, min(start + _BLOCK, d))
    out = torch.empty_like(q)
    out.scatter_(2, perm[:, None, :].expand(groups, rows, d), q)
    return out


def _gptq_block(w: Any, q: Any, upper: Any, grid: _Grid, anchor_at: Any, start: int, end: int) -> None:
    """Columns start..end rounded in turn, each error spread over the block's later columns; then the
    block's errors over every column after it in one product (GPTQ's lazy batch update: the same
    sums, but one matrix product per block instead of a pass over the whole filter per column)."""
    import torch

    block = w[:, :, start:end]  # a view: updated in place
    errors = torch.empty_like(block)
    pinned = grid.steps != 0
    for i in range(end - start):
        j = start + i
        steps = torch.clamp(torch.round(block[:, :, i] / grid.scale), -127, 127)
        steps = torch.where(pinned & (anchor_at == j), grid.steps, steps)
        q[:, :, j] = steps * grid.scale
        errors[:, :, i] = (block[:, :, i] - q[:, :, j]) / upper[:, j, j][:, None]
        block[:, :, i + 1:] -= errors[:, :, i, None] * upper[:, None, j, j + 1:end]
    if end < w.shape[2]:
        w[:, :, end:] -= errors @ upper[:, start:end, end:]


def _nearest(weights: Any, grid: _Grid) -> Any:
    import torch

    steps = torch.clamp(torch.round(weights / grid.scale[..., None]), -127, 127)
    pinned = (grid.steps != 0)[..., None] & (torch.arange(weights.shape[-1]) == grid.anchor[..., None])
    return torch.where(pinned, grid.steps[..., None], steps) * grid.scale[..., None]


def _output_error(weights: Any, rounded: Any, hessian: Any) -> float:
    """Mean squared output error per row on the calibration inputs: sum of (W-Q) H (W-Q)^T."""
    diff = weights - rounded
    return float((diff @ hessian * diff).sum())


def _needed_scale(bias: np.ndarray | None, input_bound: float, shape: tuple[int, int]) -> Any:
    """Per row, the least weight scale at which the integer bias fits int32 with room to spare
    (_BIAS_HEADROOM), for the finest input scale a recipe gives this input: int16's, max|x| / 32767
    (int8's is coarser). A dead channel (weights all about zero) with a bias otherwise needs 2**40
    steps and is clipped (quantization/bias_saturation.py)."""
    import torch

    if bias is None or input_bound <= 0:
        return torch.zeros(shape, dtype=torch.float64)
    input_scale = input_bound / 32767.0
    needed = np.abs(bias.astype(np.float64)) * _BIAS_HEADROOM / (input_scale * float(2**31 - 1))
    return torch.from_numpy(needed).reshape(shape)


def _rounded(layer: _Layer, model: Any, stats: _Statistics) -> RoundedOperator | None:
    """The layer's rounded filter and corrected bias; None when its inputs overflowed in float
    (Inf in X^T X): it is left to the quantizer's own rounding."""
    import torch

    if not (torch.isfinite(stats.outer).all() and torch.isfinite(stats.mean).all()):
        return None
    sg = model.subgraphs[0]
    weights = torch.from_numpy(layer.weights)
    bias = float32_constant(model, sg, layer.bias_index) if layer.bias_index is not None else None
    quiet = torch.argmin(torch.diagonal(stats.outer, dim1=-2, dim2=-1), dim=-1)
    grid = _grid(weights, quiet, _needed_scale(bias, stats.bound, tuple(weights.shape[:2])))
    nearest = _nearest(weights, grid)
    centred = stats.outer - stats.mean[:, :, None] * stats.mean[:, None, :]  # what bias correction leaves: the covariance
    error = nearest_error = _output_error(weights, nearest, centred)
    kept = nearest
    if stats.rows >= _MIN_ROWS_PER_INPUT * weights.shape[-1]:
        try:
            gptq = _gptq(weights, stats.outer, grid)
        except RuntimeError:  # a Cholesky factor the damping did not make exist: nearest it is
            gptq = None
        gptq_error = _output_error(weights, gptq, centred) if gptq is not None else float("inf")
        if gptq_error <= nearest_error:
            kept, error = gptq, gptq_error
    filt = float32_constant(model, sg, layer.filter_index)
    values = _ungrouped(layer.opcode, kept.float().numpy(), filt.shape)
    if bias is not None:
        shift = torch.einsum("god,gd->go", weights - kept, stats.mean).reshape(-1).numpy()
        bias = (bias.astype(np.float64) + shift).astype(np.float32)
    name = sg.tensors[layer.filter_index].name
    return RoundedOperator(
        layer.op_index, name.decode() if isinstance(name, bytes) else str(name), _digest(filt), values,
        layer.bias_index, bias, nearest_error, error,
    )


def _ungrouped(opcode: str, grouped: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Inverse of ``_grouped``: [G, O, d] back to the filter's layout."""
    if opcode == "DEPTHWISE_CONV_2D":
        return np.ascontiguousarray(grouped.transpose(2, 0, 1)).reshape(shape).astype(np.float32)
    return grouped.reshape(shape).astype(np.float32)


def _chunks(layers: Sequence[_Layer]) -> list[list[_Layer]]:
    """Layers in groups whose statistics fit in _STATS_BYTES together."""
    chunks: list[list[_Layer]] = [[]]
    held = 0
    for layer in layers:
        groups, _, d = layer.weights.shape
        size = 8 * groups * d * d
        if chunks[-1] and held + size > _STATS_BYTES:
            chunks.append([])
            held = 0
        chunks[-1].append(layer)
        held += size
    return chunks


def round_weights(float_bytes: bytes, samples: Sequence[tuple], *, skip: Collection[int] = ()) -> WeightRounding:
    """Round the filters of ``float_bytes`` (a float flatbuffer, as the int8 recipes calibrate it)
    for their outputs on ``samples`` (float inputs). ``skip``: operator indices left alone."""
    import torch

    from ..flatbuffer import read_flatbuffer
    from ..flatbuffer.pack import read_model
    from ..runtime.interpreter import Resolver, TFLiteRunner

    start = time.perf_counter()
    model = read_model(float_bytes)
    layers = _layers(model, skip)
    used = list(samples)[:_MAX_SAMPLES]
    if not layers or not used:
        return WeightRounding((), len(used), time.perf_counter() - start)
    # two threads, as the calibrator runs (flatbuffer_recipes): one left CRAFT's float model at 1.4 s a sample
    runner = TFLiteRunner(read_flatbuffer(float_bytes, origin="the float model"), resolver=Resolver.BUILTIN,
                          preserve_all_tensors=True, num_threads=2)
    rounded = []
    with torch.no_grad():
        for chunk in _chunks(layers):
            for layer, stats in zip(chunk, _input_statistics(runner, chunk, used)):
                found = _rounded(layer, model, stats)
                if found is not None:
                    rounded.append(found)
    return WeightRounding(tuple(rounded), len(used), time.perf_counter() - start)


def with_rounded_weights(float_bytes: bytes, rounding: WeightRounding, *, keep: Collection[int] = ()) -> bytes:
    """``float_bytes`` with the rounded filters and corrected biases written in, except for the
    operators in ``keep`` (indices in ``float_bytes``: left float) and filters no longer holding the
    values they were rounded from. Filters are found by tensor name, so a model with operators
    inserted (a weight split) gets the rest. The same bytes when nothing changes."""
    from ..passes.flatbuffer import run_flatbuffer_passes

    if not rounding.operators:
        return float_bytes
    write = partial(_write_rounded, by_name={op.filter_name: op for op in rounding.operators}, keep=frozenset(keep))
    result = run_flatbuffer_passes(float_bytes, [write], origin="the float model with rounded weights")
    return result.model.data if result.modified_by else float_bytes


def _write_rounded(model: Any, by_name: dict[str, RoundedOperator], keep: frozenset[int]) -> bool:
    sg = model.subgraphs[0]
    changed = False
    for index, op in enumerate(sg.operators or ()):
        if index in keep or op.inputs is None or len(op.inputs) < 2 or op.inputs[1] < 0:
            continue
        name = sg.tensors[int(op.inputs[1])].name
        rounded = by_name.get(name.decode() if isinstance(name, bytes) else str(name))
        filt = float32_constant(model, sg, int(op.inputs[1])) if rounded is not None else None
        if filt is None or filt.shape != rounded.values.shape or _digest(filt) != rounded.source:
            continue
        _set_buffer(model, sg, int(op.inputs[1]), rounded.values)
        if rounded.bias is not None and len(op.inputs) > 2 and op.inputs[2] >= 0:
            _set_buffer(model, sg, int(op.inputs[2]), rounded.bias)
        changed = True
    return changed


def _set_buffer(model: Any, sg: Any, index: int, values: np.ndarray) -> None:
    model.buffers[sg.tensors[index].buffer].data = np.frombuffer(np.ascontiguousarray(values, dtype=np.float32).tobytes(), dtype=np.uint8)
