"""Rewrite an exported graph's aten calls into ones that lower to Edge TPU operators.

The graph-level twin of ``targets/edgetpu_rewrites.prepare_module_for_edgetpu`` (an
ExportedProgram's GraphModule has no submodules to swap, and functional calls in forward() are only
visible in the traced graph): max_pool2d padding as replicate padding, a global spatial mean as an
average pool, hardswish/hardsigmoid through relu6, GELU and SiLU through sigmoid, reflect padding
as SLICE + CONCATENATION (no MIRROR_PAD on the Edge TPU). Returns a
rewritten copy and the rewrites applied (its ``rewrites`` say whether anything changed).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ...graph.applied_rewrites import AppliedRewrite, EdgeTPUPreparation

__all__ = ["rewrite_ops_for_edgetpu_pass"]




def _replicate_pad_max_pool2d(x: Any, kernel_size: Any, stride: Any, padding: Any) -> Any:
    """max_pool2d with edge-replicating padding (SLICE + CONCATENATION instead of PADV2); the same
    values as -inf padding whenever padding < kernel size (see ReplicatePadMaxPool2d)."""
    import torch

    h, w = padding
    if h:
        x = torch.cat([x[:, :, :1]] * h + [x] + [x[:, :, -1:]] * h, dim=2)
    if w:
        x = torch.cat([x[:, :, :, :1]] * w + [x] + [x[:, :, :, -1:]] * w, dim=3)
    return torch.nn.functional.max_pool2d(x, kernel_size, stride or kernel_size, 0)


def _hardswish(x: Any) -> Any:
    import torch.nn.functional as F

    return x * F.hardtanh(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)


def _hardsigmoid(x: Any) -> Any:
    import torch.nn.functional as F

    return F.hardtanh(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)


def _gelu_sigmoid(x: Any, approximate: str = "none") -> Any:
    import torch

    return x * torch.sigmoid((x + 0.044715 * (x * x * x)) * (2.0 * math.sqrt(2.0 / math.pi)))


def _silu(x: Any) -> Any:
    import torch

    return x * torch.sigmoid(x)


def _spatial_mean(x: Any, keepdim: bool) -> Any:
    """Global average over H, W as AVERAGE_POOL_2D (+ RESHAPE): a MEAN over the NCHW axes 2, 3 is not
    an x/y reduction once the converter has moved the tensor, and the Edge TPU rejects it."""
    import torch.nn.functional as F

    y = F.avg_pool2d(x, (int(x.shape[2]), int(x.shape[3])))
    return y if keepdim else y.flatten(2).squeeze(2)


def _node_module_path(node: Any) -> str:
    from ...graph.provenance import node_module

    found = node_module(node)
    if found is None:
        return f"forward() ({node.name})"
    return found.path or node.name


def _is_global_spatial(node: Any) -> bool:
    """mean(x, [2, 3]) on a 4-D NCHW tensor with a known shape."""
    x = node.args[0]
    val = getattr(x, "meta", {}).get("val")
    if val is None or val.dim() != 4:
        return False
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None:
        return False
    return sorted(int(d) % 4 for d in dims) == [2, 3] and node.kwargs.get("dtype") is None


def _reflect_pad_for_edgetpu(node: Any) -> AppliedRewrite | None:
    """A reflect pad (aten.pad, or the device-graph pass's 1-D form) as SLICEs concatenated: MIRROR_PAD
    is not on the Edge TPU's list."""
    import torch

    from .rewrite_reflect_replicate_pads_pass import reflect_pad_by_slices, reflect_pad_sequence

    if node.target is reflect_pad_sequence:
        x, pads = node.args[0], tuple(node.args[1:3])
    elif node.target is torch.ops.aten.pad.default and (node.args[2:3] or (node.kwargs.get("mode"),))[0] == "reflect":
        x, pads = node.args[0], tuple(node.args[1])
    else:
        return None
    node.target, node.args, node.kwargs = reflect_pad_by_slices, (x, pads), {}
    return AppliedRewrite(_node_module_path(node), "reflect-pad-as-slices", "MIRROR_PAD is not supported")


def rewrite_ops_for_edgetpu_pass(module: Any) -> EdgeTPUPreparation:
    """The same rewrites as for an nn.Module, as an FX pass over the aten calls. Each replaced node
    keeps its metadata so the flatbuffer's tensor names still carry the module path."""
    import torch

    aten = torch.ops.aten
    gm = copy.deepcopy(module)
    rewrites: list[AppliedRewrite] = []
    activations = {
        aten.hardswish.default: (_hardswish, "hardswish-as-relu6", "HARD_SWISH is not supported"),
        aten.hardsigmoid.default: (_hardsigmoid, "hardsigmoid-as-relu6", "hardsigmoid is not supported"),
        aten.gelu.default: (
            _gelu_sigmoid,
            "gelu-as-sigmoid",
            "GELU is not supported and PT2E leaves it in float (tanh form, error < 1e-3)",
        ),
        aten.silu.default: (_silu, "silu-as-sigmoid", "SiLU is written as LOGISTIC + MUL"),
    }
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.max_pool2d.default:
            args = list(node.args) + [None] * (6 - len(node.args))
            x, kernel, stride, padding, dilation, ceil_mode = args[:6]
            padding = list(padding or [0, 0])
            padding = padding * 2 if len(padding) == 1 else padding
            dilation = list(dilation or [1, 1])
            if any(padding) and not ceil_mode and all(d == 1 for d in dilation):
                node.target = _replicate_pad_max_pool2d
                node.args = (x, kernel, stride, tuple(padding))
                node.kwargs = {}
                rewrites.append(
                    AppliedRewrite(
                        _node_module_path(node),
                        "maxpool-replicate-padding",
                        "max_pool2d padding lowers to PADV2 (-inf), not supported",
                    )
                )
        elif node.target is aten.mean.dim and _is_global_spatial(node):
            # (adaptive_avg_pool2d is left alone: it already lowers to an x/y MEAN, and PT2E's
            # annotator for it insists on seeing the original op)
            keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
            node.target = _spatial_mean
            node.args = (node.args[0], keepdim)
            node.kwargs = {}
            rewrites.append(
                AppliedRewrite(
                    _node_module_path(node),
                    "global-mean-as-avgpool",
                    "a mean over H, W lowers to MEAN on non-x/y axes; AVERAGE_POOL_2D maps",
                )
            )
        elif (padded := _reflect_pad_for_edgetpu(node)) is not None:
            rewrites.append(padded)
        elif node.target in activations:
            fn, kind, why = activations[node.target]
            node.target = fn
            node.args = node.args[:1]
            node.kwargs = {}
            rewrites.append(AppliedRewrite(_node_module_path(node), kind, why))
    gm.graph.lint()
    gm.recompile()
    return EdgeTPUPreparation(module=gm, rewrites=tuple(rewrites))
