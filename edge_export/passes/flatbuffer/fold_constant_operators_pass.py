"""Fold operators whose inputs are all constants into a constant: BROADCAST_TO, SELECT_V2, RESHAPE,
TRANSPOSE, EXPAND_DIMS, SQUEEZE, SLICE, STRIDED_SLICE, CONCATENATION, GATHER_ND,
RESIZE_NEAREST_NEIGHBOR, CAST, CUMSUM and LOGICAL_AND/OR/NOT; LOG, EXP, NEG, SQRT, RSQRT, ABS, SIN,
COS of float constants; ADD, SUB, MUL, DIV, FLOOR_DIV, POW of float constants without a fused
activation; and FULLY_CONNECTED, BATCH_MATMUL, SOFTMAX, MEAN, SQUARED_DIFFERENCE of float constants.
The numpy kernels are in ``constant_kernels``.

The converter leaves such operators in the graph: a Hugging Face ViT's attention mask is a
BROADCAST_TO of a constant ``[1, 1, 197, 1]`` to ``[1, 1, 197, 197]`` and a SELECT_V2 of constants,
computed again at every run. Neither is on the GPU delegate's list, so each cuts the GPU partition
where it sits. Their value is known when converting: the pass computes it with numpy and makes the
output tensor a constant, up to ``max_bytes`` per tensor (folding trades flash for operators).
A mask written ``torch.tril(ones).log()`` in forward() is a SELECT_V2 and a LOG of constants,
computed at run time into -inf: folded, it is a constant that quantization can saturate
(``saturate_infinite_constants_pass``). DETR's sine position embedding divides by
``temperature ** (2 * (i // 2) / d)``, a POW of a MUL of a FLOOR_DIV of constants computed at every
run; folded, the divisor is a constant (see ``multiply_by_reciprocal_pass``). Its positions come
from a mask of ones resized (RESIZE_NEAREST_NEIGHBOR), CAST, summed (CUMSUM), sliced and put through
SIN and COS: none of those has an int8 recipe, so unfolded they kept the model partly float. Its
decoder's first self-attention reads only constants too (the queries start from zeros): int8
operators of constants alone computed zeros in LiteRT, and the model read 7 dB.

Operators writing a subgraph output, and quantized operators whose input and output scales differ,
are left alone; operators that compute new numbers fold only on unquantized tensors. Folded
operators can make the next ones all-constant: operators are in run order, so one sweep folds whole
chains. Tensors only the folded operators read are dropped from the model (``drop_unused_tensors``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .constant_kernels import FLOAT_ARITHMETIC, FLOAT_FUNCTIONS, FLOAT_LINEAR_ALGEBRA, STRUCTURAL_KERNELS, evaluate
from .model_graph import constant_value, drop_unused_tensors, numpy_dtype, opcode_name, same_quantization, set_constant

__all__ = ["fold_constant_operators_pass", "FOLDABLE_OPCODES"]

# the operators that compute float32 values from float32 constants (the rest move or select values, CAST and CUMSUM aside)
_FLOAT_OPCODES = (*FLOAT_FUNCTIONS, *FLOAT_ARITHMETIC, *FLOAT_LINEAR_ALGEBRA)
FOLDABLE_OPCODES = ("BROADCAST_TO", "SELECT_V2", "RESHAPE", "TRANSPOSE", "EXPAND_DIMS", "SQUEEZE", "CAST", *STRUCTURAL_KERNELS, *_FLOAT_OPCODES)
_DEFAULT_MAX_BYTES = 1 << 20


class _Unquantized:
    quantization = None


_UNQUANTIZED = _Unquantized()


def _plain_float_arithmetic(sg: Any, op: Any) -> bool:
    """Two unquantized float32 operands and no fused activation (a fused RELU would clip the value)."""
    operands = [sg.tensors[i] for i in op.inputs] if op.inputs is not None and len(op.inputs) == 2 else []
    if len(operands) != 2 or any(numpy_dtype(t) != np.float32 or not same_quantization(t, _UNQUANTIZED) for t in operands):
        return False
    return not getattr(op.builtinOptions, "fusedActivationFunction", 0)


def _data_inputs(opcode: str, op: Any) -> list[int]:
    """The inputs whose values the output carries (the ones that must share its type and scale)."""
    if opcode in ("CONCATENATION", "LOGICAL_AND", "LOGICAL_OR"):
        return list(op.inputs)
    return list(op.inputs[1:] if opcode == "SELECT_V2" else op.inputs[:1])


def _computes_values(opcode: str) -> bool:
    """Kernels that compute new numbers: only on unquantized tensors (a quantized CUMSUM would add zero points)."""
    return opcode in _FLOAT_OPCODES or opcode in ("CUMSUM", "CAST")


def _foldable(sg: Any, op: Any, opcode: str, dtype: np.dtype) -> bool:
    out = sg.tensors[op.outputs[0]]
    if _computes_values(opcode):
        operands = [sg.tensors[i] for i in op.inputs[:1]] if opcode == "CAST" else []
        if not all(same_quantization(t, _UNQUANTIZED) for t in (out, *operands)):
            return False
    if opcode != "CAST" and any(numpy_dtype(sg.tensors[i]) != dtype or not same_quantization(sg.tensors[i], out) for i in _data_inputs(opcode, op)):
        return False
    if opcode in _FLOAT_OPCODES and dtype != np.float32:
        return False
    if opcode in FLOAT_LINEAR_ALGEBRA:
        operands = op.inputs[:1] if opcode == "MEAN" else [i for i in op.inputs if i >= 0]
        return all(numpy_dtype(sg.tensors[i]) == np.float32 and same_quantization(sg.tensors[i], _UNQUANTIZED) for i in operands)
    return opcode not in FLOAT_ARITHMETIC or _plain_float_arithmetic(sg, op)


def _inputs_present(opcode: str, op: Any) -> bool:
    """Every input given, except a FULLY_CONNECTED's optional bias (-1)."""
    required = op.inputs[:2] if opcode == "FULLY_CONNECTED" else op.inputs
    return len(op.inputs) > 0 and all(i >= 0 for i in required)


def _folded(model: Any, sg: Any, op: Any, max_bytes: int, outputs: set[int]) -> np.ndarray | None:
    """The output value of ``op`` when it can be folded, else None."""
    opcode = opcode_name(model, op)
    if opcode not in FOLDABLE_OPCODES or len(op.outputs) != 1 or op.outputs[0] in outputs or op.inputs is None or not _inputs_present(opcode, op):
        return None
    out = sg.tensors[op.outputs[0]]
    dtype = numpy_dtype(out)
    shape = [int(d) for d in (out.shape if out.shape is not None else [])]
    if dtype is None or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > max_bytes or not _foldable(sg, op, opcode, dtype):
        return None
    values = [constant_value(model, sg, i) if i >= 0 else None for i in op.inputs]
    if any(v is None for v, i in zip(values, op.inputs) if i >= 0):
        return None
    try:
        value = evaluate(opcode, values, op.builtinOptions, shape, dtype)
    except (ValueError, IndexError, ArithmeticError, TypeError):  # shapes that do not broadcast, slice or
        return None  # reshape, values a kernel refuses: the runtime's own check reports them
    return value.astype(dtype) if value is not None and tuple(value.shape) == tuple(shape) else None


def fold_constant_operators_pass(model: Any, max_bytes: int = _DEFAULT_MAX_BYTES) -> bool:
    """Replace operators of the main subgraph whose inputs are constants by their constant output.

    Operators are in run order, so one sweep sees each operator after everything it reads was folded."""
    sg = model.subgraphs[0]
    outputs = set(sg.outputs if sg.outputs is not None else [])
    kept, folded = [], False
    for op in sg.operators:
        # an operator writing a variable (a fused LSTM's state reset) runs at every call: never a constant
        writes_variable = any(o >= 0 and sg.tensors[o].isVariable for o in op.outputs)
        value = None if writes_variable else _folded(model, sg, op, max_bytes, outputs)
        if value is None:
            kept.append(op)
            continue
        set_constant(model, sg, op.outputs[0], value)
        folded = True
    if folded:
        sg.operators = kept
        drop_unused_tensors(model)
    return folded
