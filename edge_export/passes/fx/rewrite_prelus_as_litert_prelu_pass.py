"""Rewrite ``nn.PReLU`` / ``F.prelu`` as LiteRT's PRELU operator instead of RELU, MUL, MUL and SUB.

litert-torch decomposes ``aten.prelu`` into ``relu(x) - w * relu(-x)``: four operators, and in a
fully integer model four roundings with a SUB of two differently scaled halves (a face detector's
PReLUs came out at 15.7-16.1 dB on ``--target edgetpu`` and ``micro``), while PT2E left it float.
LiteRT, TFLite Micro, the GPU delegate and the Edge TPU all run PRELU (int8 with one alpha scale),
so every target gets it: ``edge_export.prelu`` (``prelu_operator.py``) lowers to ``tfl.prelu``.
PRELU's alpha broadcasts against the trailing dimensions, so a per-channel PReLU on ``[N, C, ...]``
moves C last around it; litert-torch's layout pass keeps convolutions NHWC, and the two moves cancel
against its transposes. Float results are PyTorch's to the last bit (the same product ``w * x``).
"""

from __future__ import annotations

from typing import Any

from .rewrites import FxRewrite, call_arguments, node_location

__all__ = ["rewrite_prelus_as_litert_prelu_pass"]


def _prelu_channels_last(x: Any, weight: Any, rank: int) -> Any:
    """PyTorch's prelu (alpha along dim 1, or one alpha) as PRELU on a channels-last view."""
    from .prelu_operator import prelu_operator

    if rank == 2:  # [N, C]: C is already last
        return prelu_operator()(x, weight)
    alpha = weight.reshape([1] * (rank - 2) + [-1])
    return prelu_operator()(x.movedim(1, -1), alpha).movedim(-1, 1)


def _shape(value: Any) -> tuple | None:
    shape = getattr(getattr(value, "meta", {}).get("val"), "shape", None)
    return None if shape is None or not all(isinstance(d, int) for d in shape) else tuple(shape)


def _rewrite(node: Any) -> bool:
    """Point one prelu call at the PRELU form; False (unchanged) when its shapes are not static
    or alpha does not match PyTorch's channel dimension."""
    kw = call_arguments(node)
    x_shape, w_shape = _shape(kw["self"]), _shape(kw["weight"])
    if x_shape is None or w_shape is None or len(x_shape) < 2 or len(w_shape) != 1:
        return False
    if w_shape[0] not in (1, x_shape[1]):
        return False
    # one alpha moves channels last too: litert-torch's layout pass then cancels the moves
    node.target, node.args, node.kwargs = _prelu_channels_last, (kw["self"], kw["weight"], len(x_shape)), {}
    return True


def rewrite_prelus_as_litert_prelu_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """prelu calls with static shapes become ``edge_export.prelu`` (LiteRT's PRELU). Changes the
    GraphModule in place; returns the rewrites made (empty: nothing changed)."""
    import torch

    aten = torch.ops.aten
    targets, rewrites = {aten.prelu.default, aten._prelu_kernel.default}, []
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in targets and _rewrite(node):
            rewrites.append(FxRewrite(
                *node_location(node), "prelu as PRELU",
                "litert-torch decomposes it into RELU, MUL, MUL and SUB; every target runs PRELU",
            ))
    if rewrites:
        gm.graph.lint()
        gm.recompile()
    return tuple(rewrites)
