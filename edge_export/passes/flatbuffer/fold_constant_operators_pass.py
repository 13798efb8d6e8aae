"""Fold operators whose inputs are all constants into a constant (BROADCAST_TO, SELECT_V2, RESHAPE,
TRANSPOSE, EXPAND_DIMS, SQUEEZE; LOG, EXP, NEG, SQRT, RSQRT, ABS of float constants; and ADD, SUB,
MUL, DIV, FLOOR_DIV, POW of float constants without a fused activation).

The converter leaves such operators in the graph: a Hugging Face ViT's attention mask is a
BROADCAST_TO of a constant ``[1, 1, 197, 1]`` to ``[1, 1, 197, 197]`` and a SELECT_V2 of constants,
computed again at every run. Neither is on the GPU delegate's list, so each cuts the GPU partition
where it sits. Their value is known when converting: the pass computes it with numpy and makes the
output tensor a constant, up to ``max_bytes`` per tensor (folding trades flash for operators).
A mask written ``torch.tril(ones).log()`` in forward() is a SELECT_V2 and a LOG of constants,
computed at run time into -inf: folded, it is a constant that quantization can saturate
(``saturate_infinite_constants_pass``). DETR's sine position embedding divides by
``temperature ** (2 * (i // 2) / d)``, a POW of a MUL of a FLOOR_DIV of constants computed at every
run; folded, the divisor is a constant (see ``multiply_by_reciprocal_pass``). Operators writing a subgraph output, and quantized
operators whose input and output scales differ, are left alone. Folded operators can make the next ones all-constant: the pass repeats
until nothing more folds (at most once per operator). Tensors only the folded operators read
are dropped from the model (``drop_unused_tensors``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model_graph import constant_value, drop_unused_tensors, numpy_dtype, opcode_name, same_quantization, set_constant

__all__ = ["fold_constant_operators_pass", "FOLDABLE_OPCODES"]

_FLOAT_FUNCTIONS = {
    "LOG": np.log, "EXP": np.exp, "NEG": np.negative, "SQRT": np.sqrt, "ABS": np.abs,
    "RSQRT": lambda v: 1.0 / np.sqrt(v),
}
# float32 in, float32 out, as LiteRT's reference kernels compute them (FLOOR_DIV: floor(a / b))
_FLOAT_ARITHMETIC = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide, "POW": np.power,
    "FLOOR_DIV": lambda a, b: np.floor(np.divide(a, b)),
}
FOLDABLE_OPCODES = ("BROADCAST_TO", "SELECT_V2", "RESHAPE", "TRANSPOSE", "EXPAND_DIMS", "SQUEEZE", *_FLOAT_FUNCTIONS, *_FLOAT_ARITHMETIC)
_DEFAULT_MAX_BYTES = 1 << 20


class _Unquantized:
    quantization = None


_UNQUANTIZED = _Unquantized()


def _evaluate(opcode: str, values: list[np.ndarray], out_shape: list[int]) -> np.ndarray:
    if opcode == "BROADCAST_TO":
        return np.broadcast_to(values[0], out_shape)
    if opcode == "SELECT_V2":
        return np.where(values[0], values[1], values[2])
    if opcode == "TRANSPOSE":
        return np.transpose(values[0], [int(p) for p in values[1]])
    if opcode in _FLOAT_FUNCTIONS:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # log(0) is the mask's -inf
            return _FLOAT_FUNCTIONS[opcode](values[0])
    if opcode in _FLOAT_ARITHMETIC:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # as the kernel: inf and NaN, no error
            return _FLOAT_ARITHMETIC[opcode](values[0].astype(np.float32), values[1].astype(np.float32)).astype(np.float32)
    return values[0].reshape(out_shape)  # RESHAPE, EXPAND_DIMS, SQUEEZE: the output's static shape


def _plain_float_arithmetic(sg: Any, op: Any) -> bool:
    """Two unquantized float32 operands and no fused activation (a fused RELU would clip the value)."""
    operands = [sg.tensors[i] for i in op.inputs] if op.inputs is not None and len(op.inputs) == 2 else []
    if len(operands) != 2 or any(numpy_dtype(t) != np.float32 or not same_quantization(t, _UNQUANTIZED) for t in operands):
        return False
    return not getattr(op.builtinOptions, "fusedActivationFunction", 0)


def _folded(model: Any, sg: Any, op: Any, max_bytes: int) -> np.ndarray | None:
    """The output value of ``op`` when it can be folded, else None."""
    opcode = opcode_name(model, op)
    if opcode not in FOLDABLE_OPCODES or len(op.outputs) != 1 or op.outputs[0] in set(sg.outputs):
        return None
    out = sg.tensors[op.outputs[0]]
    values = [constant_value(model, sg, i) for i in op.inputs]
    dtype = numpy_dtype(out)
    shape = [int(d) for d in (out.shape if out.shape is not None else [])]
    if any(v is None for v in values) or dtype is None or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > max_bytes:
        return None
    data_inputs = [sg.tensors[i] for i in (op.inputs[1:] if opcode == "SELECT_V2" else op.inputs[:1])]
    if any(numpy_dtype(t) != dtype or not same_quantization(t, out) for t in data_inputs):
        return None
    if opcode in (*_FLOAT_FUNCTIONS, *_FLOAT_ARITHMETIC) and (dtype != np.float32 or not same_quantization(out, _UNQUANTIZED)):
        return None
    if opcode in _FLOAT_ARITHMETIC and not _plain_float_arithmetic(sg, op):
        return None
    try:
        value = _evaluate(opcode, values, shape)
    except ValueError:  # shapes that do not broadcast or reshape: leave it to the runtime's own check
        return None
    return value.astype(dtype) if tuple(value.shape) == tuple(shape) else None


def fold_constant_operators_pass(model: Any, max_bytes: int = _DEFAULT_MAX_BYTES) -> bool:
    """Replace operators of the main subgraph whose inputs are constants by their constant output."""
    sg = model.subgraphs[0]
    inputs_of_folded: list[int] = []
    while True:
        for position, op in enumerate(sg.operators):
            value = _folded(model, sg, op, max_bytes)
            if value is not None:
                set_constant(model, sg, op.outputs[0], value)
                inputs_of_folded.extend(i for i in op.inputs if i >= 0)
                del sg.operators[position]
                break
        else:
            if inputs_of_folded:
                drop_unused_tensors(model)
            return bool(inputs_of_folded)
