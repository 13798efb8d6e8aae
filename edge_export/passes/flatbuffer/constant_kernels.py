"""numpy versions of the LiteRT kernels that ``fold_constant_operators_pass`` evaluates once when
converting, each written after the reference kernel it replaces (``tensorflow/lite/kernels``), so a
folded model computes what the unfolded one did. A kernel returns None for an input it does not cover
(a STRIDED_SLICE with an ellipsis, a CAST of a non-finite float to an integer...): the operator is
then left for the runtime.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["FLOAT_FUNCTIONS", "FLOAT_ARITHMETIC", "FLOAT_LINEAR_ALGEBRA", "STRUCTURAL_KERNELS", "evaluate"]

FLOAT_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "LOG": np.log, "EXP": np.exp, "NEG": np.negative, "SQRT": np.sqrt, "ABS": np.abs,
    "RSQRT": lambda v: 1.0 / np.sqrt(v), "SIN": np.sin, "COS": np.cos,
}
# float32 in, float32 out, as LiteRT's reference kernels compute them (FLOOR_DIV: floor(a / b))
FLOAT_ARITHMETIC: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide, "POW": np.power,
    "FLOOR_DIV": lambda a, b: np.floor(np.divide(a, b)),
}


def _cumsum(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray:
    x, axis = values[0], int(np.asarray(values[1]).reshape(-1)[0])
    reverse, exclusive = bool(getattr(options, "reverse", False)), bool(getattr(options, "exclusive", False))
    y = np.flip(x, axis) if reverse else x
    total = np.add.accumulate(y, axis=axis, dtype=x.dtype)  # sequential, in the tensor's type, as the kernel
    if exclusive:
        total = np.concatenate([np.zeros_like(np.take(total, [0], axis=axis)), np.delete(total, -1, axis=axis)], axis=axis)
    return np.flip(total, axis) if reverse else total


def _slice(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray:
    x, begin, size = values[0], np.asarray(values[1]).reshape(-1), np.asarray(values[2]).reshape(-1)
    index = tuple(slice(int(b), None if int(s) == -1 else int(b) + int(s)) for b, s in zip(begin, size))
    return x[index]


def _strided_slice(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray | None:
    """The plain form only: no ellipsis, no new axis, no offset (those are left to the runtime)."""
    if getattr(options, "ellipsisMask", 0) or getattr(options, "newAxisMask", 0) or getattr(options, "offset", False):
        return None
    x = values[0]
    begin, end, strides = (np.asarray(v).reshape(-1).tolist() for v in values[1:4])
    begin_mask, end_mask, shrink = (int(getattr(options, k, 0) or 0) for k in ("beginMask", "endMask", "shrinkAxisMask"))
    index: list[Any] = []
    for axis, (b, e, s) in enumerate(zip(begin, end, strides)):
        if s == 0:
            return None
        if shrink >> axis & 1:
            index.append(int(b))
            continue
        index.append(slice(None if begin_mask >> axis & 1 else int(b), None if end_mask >> axis & 1 else int(e), int(s)))
    return x[tuple(index)]


def _concatenation(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray | None:
    if getattr(options, "fusedActivationFunction", 0):
        return None
    return np.concatenate(values, axis=int(getattr(options, "axis", 0)))


def _nearest_source(size_in: int, size_out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """reference_ops::ResizeNearestNeighbor's GetNearestNeighbor, in float32 as the kernel."""
    scale = np.float32((size_in - 1) / (size_out - 1) if align_corners and size_out > 1 else size_in / size_out)
    position = (np.arange(size_out, dtype=np.float32) + np.float32(0.5 if half_pixel else 0.0)) * scale
    source = np.floor(position)
    if align_corners:  # TfLiteRound: half away from zero, and positions are >= 0
        source = source + (position - source >= np.float32(0.5))
    return np.clip(source.astype(np.int64), 0 if half_pixel else None, size_in - 1)


def _resize_nearest(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray | None:
    x = values[0]
    if x.ndim != 4 or len(shape) != 4 or min(*x.shape[1:3], *shape[1:3]) <= 0:
        return None
    align, half = bool(getattr(options, "alignCorners", False)), bool(getattr(options, "halfPixelCenters", False))
    rows = _nearest_source(x.shape[1], shape[1], align, half)
    cols = _nearest_source(x.shape[2], shape[2], align, half)
    return x[:, rows][:, :, cols]


def _cast(values: list[np.ndarray], options: Any, shape: list[int], dtype: np.dtype) -> np.ndarray | None:
    x = values[0]
    if x.dtype.kind == "f" and dtype.kind in "iu":  # static_cast of a float out of range is undefined
        info = np.iinfo(dtype)
        if not np.isfinite(x).all() or (x.size and (x.min() < info.min or x.max() > info.max)):
            return None
    return x.astype(dtype)


def _gather_nd(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray | None:
    params, indices = values[0], np.asarray(values[1]).astype(np.int64)
    depth = indices.shape[-1] if indices.ndim else 0
    if depth == 0 or depth > params.ndim or (indices < 0).any() or (indices >= np.asarray(params.shape[:depth])).any():
        return None  # the kernel refuses an index out of range at run time: keep that error where it is
    return params[tuple(np.moveaxis(indices, -1, 0))]


_ACTIVATIONS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: lambda v: v, 1: lambda v: np.maximum(v, 0), 2: lambda v: np.clip(v, -1, 1), 3: lambda v: np.clip(v, 0, 6),
}


def _fully_connected(values: list[np.ndarray | None], options: Any, shape: list[int]) -> np.ndarray | None:
    """y = x W^T + b over the last axis of x, then the fused activation; the output's static shape
    says whether the leading axes were kept (keep_num_dims) or flattened."""
    x, weights, bias = values[0], values[1], values[2] if len(values) > 2 else None
    activation = _ACTIVATIONS.get(int(getattr(options, "fusedActivationFunction", 0) or 0))
    if activation is None or getattr(options, "weightsFormat", 0) or weights is None or weights.ndim != 2 or x.size % weights.shape[1]:
        return None
    y = x.reshape(-1, weights.shape[1]).astype(np.float32) @ weights.T.astype(np.float32)
    if bias is not None:
        y = y + bias.astype(np.float32)
    return activation(y.astype(np.float32)).reshape(shape)


def _batch_matmul(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray:
    a, b = values[0].astype(np.float32), values[1].astype(np.float32)
    a = np.swapaxes(a, -1, -2) if getattr(options, "adjX", False) else a
    b = np.swapaxes(b, -1, -2) if getattr(options, "adjY", False) else b
    return np.matmul(a, b)


def _softmax(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray:
    x = values[0].astype(np.float32) * np.float32(getattr(options, "beta", 1.0) or 0.0)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _mean(values: list[np.ndarray], options: Any, shape: list[int]) -> np.ndarray | None:
    x, axes = values[0], np.asarray(values[1]).reshape(-1)
    if x.ndim == 0 or ((axes < -x.ndim) | (axes >= x.ndim)).any():
        return None
    axis = tuple(sorted({int(a) % x.ndim for a in axes}))
    return np.mean(x.astype(np.float32), axis=axis, keepdims=bool(getattr(options, "keepDims", False)), dtype=np.float32)


# float32 kernels of several inputs whose results equal LiteRT's up to float rounding (the order of
# a sum), not bit for bit: a folded decoder's first layer (DETR's queries start from zeros) reads
# within 1e-6 of the kernels.
FLOAT_LINEAR_ALGEBRA: dict[str, Callable[..., np.ndarray | None]] = {
    "FULLY_CONNECTED": _fully_connected, "BATCH_MATMUL": _batch_matmul, "SOFTMAX": _softmax, "MEAN": _mean,
    "SQUARED_DIFFERENCE": lambda values, options, shape: np.square(values[0].astype(np.float32) - values[1].astype(np.float32)),
}


STRUCTURAL_KERNELS: dict[str, Callable[..., np.ndarray | None]] = {
    "CUMSUM": _cumsum, "SLICE": _slice, "STRIDED_SLICE": _strided_slice, "CONCATENATION": _concatenation,
    "RESIZE_NEAREST_NEIGHBOR": _resize_nearest, "GATHER_ND": _gather_nd,
    "LOGICAL_AND": lambda values, options, shape: np.logical_and(values[0], values[1]),
    "LOGICAL_OR": lambda values, options, shape: np.logical_or(values[0], values[1]),
    "LOGICAL_NOT": lambda values, options, shape: np.logical_not(values[0]),
}


def evaluate(opcode: str, values: list[np.ndarray], options: Any, shape: list[int], dtype: np.dtype) -> np.ndarray | None:
    """The output of ``opcode`` on constant ``values``, or None where the kernel is not covered."""
    if opcode == "BROADCAST_TO":
        return np.broadcast_to(values[0], shape)
    if opcode == "SELECT_V2":
        return np.where(values[0], values[1], values[2])
    if opcode == "TRANSPOSE":
        return np.transpose(values[0], [int(p) for p in values[1]])
    if opcode == "CAST":
        return _cast(values, options, shape, dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # as the kernels: inf and NaN, no error
        if opcode in FLOAT_FUNCTIONS:  # log(0) is a mask's -inf
            return FLOAT_FUNCTIONS[opcode](values[0])
        if opcode in FLOAT_ARITHMETIC:
            return FLOAT_ARITHMETIC[opcode](values[0].astype(np.float32), values[1].astype(np.float32)).astype(np.float32)
        if opcode in FLOAT_LINEAR_ALGEBRA:
            return FLOAT_LINEAR_ALGEBRA[opcode](values, options, shape)
    if opcode in STRUCTURAL_KERNELS:
        return STRUCTURAL_KERNELS[opcode](values, options, shape)
    return values[0].reshape(shape)  # RESHAPE, EXPAND_DIMS, SQUEEZE: the output's static shape
