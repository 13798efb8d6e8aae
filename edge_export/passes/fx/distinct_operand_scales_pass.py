"""Move equal scales of a quantized add/sub/mul's two operands one float32 step apart (PT2E).

litert-torch could not lower a PT2E graph where they were equal.

LiteRT's converter pass tfl-optimize moves a reshape pair across a binary op:
``reshape(add(reshape(a), reshape(b)))`` becomes ``add(a, b)`` followed by the outer reshape, when
both operands have the same type. The new ADD takes its operands' quantized type for its result, so the
ADD's own output scale is lost and the outer RESHAPE then joins two scales, which its
same-scale rule refuses: "'tfl.reshape' op quantization parameters violate the same scale
constraint", and the PT2E lowering fails. Operands of the same type happen when two slices of one
tensor have the same calibrated range: ``(x[:, 0] + x[:, 1]) / 2`` in the Audio Spectrogram
Transformer's pooler, whose class and distillation tokens start equal (both zeros), and any
``x[:, 0] + x[:, 0]``.

Runs on the converted PT2E graph (quantize/dequantize pairs), before the lowering: when both
operands of an add, sub or mul are dequantized with equal parameters from two different quantize
nodes, the second quantize's scale (and its dequantize nodes') moves up by one float32 step (a
relative change of 1.2e-7, far below int8's rounding). Operands that read one quantize node (``y + y``) are left alone: they are one
tensor, and a different scale would need a requantize.
"""

from __future__ import annotations

from typing import Any

__all__ = ["distinct_operand_scales_pass"]


def _binary_targets() -> set:
    import torch

    aten = torch.ops.aten
    return {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor}


def _per_tensor_pair(node: Any) -> tuple[Any, Any] | None:
    """(quantize, dequantize) when ``node`` dequantizes the output of a per-tensor quantize."""
    import torch

    decomposed = torch.ops.quantized_decomposed
    if getattr(node, "target", None) != decomposed.dequantize_per_tensor.default:
        return None
    source = node.args[0]
    if getattr(source, "target", None) != decomposed.quantize_per_tensor.default:
        return None
    return source, node


def _next_float32_up(scale: float) -> float:
    import numpy as np

    return float(np.nextafter(np.float32(scale), np.float32(np.inf)))


def distinct_operand_scales_pass(graph_module: Any) -> int:
    """Move apart equal operand scales of quantized add/sub/mul nodes, in place; returns how many."""
    moved = 0
    targets = _binary_targets()
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node.target not in targets or len(node.args) < 2:
            continue
        first, second = _per_tensor_pair(node.args[0]), _per_tensor_pair(node.args[1])
        if first is None or second is None or first[0] is second[0]:
            continue
        if tuple(first[1].args[1:]) != tuple(second[1].args[1:]):
            continue
        readers = list(second[0].users)  # the quantize's dequantize nodes (one per user)
        if any(_per_tensor_pair(reader) is None for reader in readers):
            continue
        scale = _next_float32_up(second[1].args[1])
        for member in (second[0], *readers):
            member.args = (member.args[0], scale, *member.args[2:])
        moved += 1
    if moved:
        graph_module.recompile()
    return moved
