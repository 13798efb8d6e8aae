"""Drop an ``expand`` before an elementwise add, sub, mul or div that broadcasts to the same result.

``a * b.expand_as(a)`` computes what ``a * b`` computes when ``b`` broadcasts against ``a``: the
expand only materializes the broadcast. litert-torch lowers it to a BROADCAST_TO that its layout
rewrite can leave in a shape the MUL cannot take: MobileViTv2's linear self-attention
(``relu(value) * context_vector.expand_as(value)``, modeling_mobilevitv2.py) failed to convert with
"'tfl.mul' op operands don't have broadcast-compatible shapes" (exit 3). Without the expand, the
MUL broadcasts by itself, as LiteRT's kernels do, and the result is the same tensor, exactly.
Only an expand whose removal leaves the operation's output shape as it was is dropped.
"""

from __future__ import annotations

from typing import Any

from .rewrites import FxRewrite, node_location

__all__ = ["rewrite_expands_as_broadcasts_pass"]


def _binary_targets() -> set:
    import torch

    aten = torch.ops.aten
    return {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor}


def _shape(value: Any) -> tuple | None:
    """The static shape of an FX value (a node's recorded tensor), () for a Python number."""
    if isinstance(value, (int, float, bool)):
        return ()
    shape = getattr(getattr(value, "meta", {}).get("val"), "shape", None)
    return None if shape is None or not all(isinstance(d, int) for d in shape) else tuple(shape)


def _broadcast_alone(node: Any, position: int, source: Any) -> bool:
    """Whether ``node`` computes the same shape with ``source`` in place of its argument ``position``."""
    import torch

    shapes = [_shape(arg) for arg in node.args[:2]]
    shapes[position] = _shape(source)
    result = _shape(node)
    if result is None or any(s is None for s in shapes):
        return False
    try:
        return tuple(torch.broadcast_shapes(*shapes)) == result
    except RuntimeError:  # does not broadcast without the expand
        return False


def rewrite_expands_as_broadcasts_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """Elementwise operands that are expands of a tensor broadcasting to the same result read the
    tensor itself. Changes the GraphModule in place; returns the rewrites made (empty: nothing changed)."""
    import torch

    aten = torch.ops.aten
    expands, targets, rewrites = {aten.expand.default, aten.expand_as.default}, _binary_targets(), []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in targets or len(node.args) < 2:
            continue
        if node.args[0] is node.args[1]:  # x * x of one expand: the expand sets the result's shape
            continue
        for position in (0, 1):
            operand = node.args[position]
            if getattr(operand, "target", None) not in expands or not _broadcast_alone(node, position, operand.args[0]):
                continue
            node.replace_input_with(operand, operand.args[0])
            if not operand.users:
                gm.graph.erase_node(operand)
            rewrites.append(FxRewrite(
                *node_location(node), "expand dropped before an elementwise operation",
                "the operation broadcasts by itself; litert-torch's lowering of the expand can leave "
                "shapes it cannot broadcast",
            ))
    if rewrites:
        gm.graph.lint()
        gm.recompile()
    return tuple(rewrites)
