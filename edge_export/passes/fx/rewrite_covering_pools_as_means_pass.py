"""Rewrite a pooling (1-D or 2-D) whose one window covers its whole input as a mean or amax.

Hugging Face's EfficientNet pools with ``nn.AvgPool2d(config.hidden_dim, ceil_mode=True)``: a
2560-wide window on a 7x7 map, one output per channel. litert-torch lowers it as written, a PAD to
the window's size (``[1, 2560, 2560, 2560]``, beyond what LiteRT can allocate) and an
AVERAGE_POOL_2D. When the single window starts at ``-padding`` and reaches past the input's end,
PyTorch's result is the input's sum over a divisor: ``divisor_override`` if given, else with
``count_include_pad`` the window clipped to the padded input (``min(k, H + 2p)`` per axis), else
``H * W`` (``aten/src/ATen/native/cpu/AvgPoolKernel.cpp``). So it is a MEAN over H and W, times
``H * W / divisor`` when that is not 1. A max pool pads with -inf, so its covering window is the
input's maximum (REDUCE_MAX), for dilation 1. ``nn.AdaptiveMaxPool2d(1)``, which litert-torch cannot
lower at all, is the same maximum.
"""

from __future__ import annotations

import operator
from typing import Any

from .rewrites import FxRewrite, call_arguments, rewrite_calls

__all__ = ["rewrite_covering_pools_as_means_pass", "covering_pool_scale"]


def _pair(value: Any, default: Any = None) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        value = default
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return (int(values[0]), int(values[-1]))


def _mean_pool(x: Any, scale: float, dims: tuple[int, ...] = (-2, -1)) -> Any:
    y = x.mean(dims, keepdim=True)
    return y if scale == 1.0 else y * scale


def _max_pool(x: Any, dims: tuple[int, ...] = (-2, -1)) -> Any:
    return x.amax(dims, keepdim=True)


def covering_pool_scale(size: tuple[int, int], kernel: tuple[int, int], padding: tuple[int, int],
                        count_include_pad: bool, divisor_override: int | None) -> float:
    """``H * W / divisor``: what turns the mean into PyTorch's average of one covering window."""
    (h, w), (kh, kw), (ph, pw) = size, kernel, padding
    if divisor_override:
        divisor = divisor_override
    elif count_include_pad:
        divisor = min(kh, h + 2 * ph) * min(kw, w + 2 * pw)
    else:
        divisor = h * w
    return h * w / divisor


def _covering(node: Any, kernel: tuple[int, int], padding: tuple[int, int], spatial: int) -> tuple[int, int] | None:
    """The input's (H, W) (a 1-D pooling's as (1, L)) when the node has one output window that
    covers all of it, else None."""
    x, out = node.args[0], node.meta.get("val")
    val = getattr(x, "meta", {}).get("val")
    if val is None or out is None or val.dim() not in (spatial + 1, spatial + 2) or any(int(d) != 1 for d in out.shape[-spatial:]):
        return None
    h, w = (int(val.shape[-2]), int(val.shape[-1])) if spatial == 2 else (1, int(val.shape[-1]))
    if kernel[0] >= h + padding[0] and kernel[1] >= w + padding[1]:
        return h, w
    return None


def _pooling(node: Any) -> tuple[bool, int] | None:
    """(is a max pool, spatial dimensions) of an avg/max pool call, or None."""
    import torch

    aten = torch.ops.aten
    kinds = {aten.avg_pool2d.default: (False, 2), aten.max_pool2d.default: (True, 2),
             aten.avg_pool1d.default: (False, 1), aten.max_pool1d.default: (True, 1)}
    return kinds.get(node.target)


def _global_max(x: Any, dims: tuple[int, ...]) -> tuple[Any]:
    return (x.amax(dims, keepdim=True),)  # the values; nothing reads the indices (checked)


def _adaptive_max_to_one(node: Any) -> tuple[str, str] | None:
    """``nn.AdaptiveMaxPool2d(1)`` (a global max pool): litert-torch has no lowering for
    ``adaptive_max_pool2d`` at all. Its indices output must be unread."""
    import torch

    if node.target != torch.ops.aten.adaptive_max_pool2d.default:
        return None
    kw = call_arguments(node)
    if set(_pair(kw["output_size"])) != {1}:
        return None
    if any(u.op != "call_function" or u.target is not operator.getitem for u in node.users):
        return None
    indices = [u for u in node.users if u.args[1:] == (1,)]
    if any(u.users for u in indices):
        return None
    for unread in indices:
        node.graph.erase_node(unread)
    node.target, node.args, node.kwargs = _global_max, (kw["self"], (-2, -1)), {}
    return "adaptive max pool to 1x1 as amax", "a global max pool: the input's maximum over H and W (REDUCE_MAX)"


def _rewrite(node: Any) -> tuple[str, str] | None:
    if (done := _adaptive_max_to_one(node)) is not None:
        return done
    kind = _pooling(node)
    if kind is None:
        return None
    is_max, spatial = kind
    kw = call_arguments(node)
    kernel, padding = _pair(kw["kernel_size"]), _pair(kw.get("padding"), 0)
    if spatial == 1:
        kernel, padding = (1, kernel[1]), (0, padding[1])
    size = _covering(node, kernel, padding, spatial)
    dims = (-2, -1) if spatial == 2 else (-1,)
    if size is None:
        return None
    if is_max:
        if set(_pair(kw.get("dilation"), 1)) != {1}:
            return None
        node.target, node.args, node.kwargs = _max_pool, (kw["self"], dims), {}
        return "max pool as amax", "its one window covers the input: the input's maximum (REDUCE_MAX)"
    scale = covering_pool_scale(size, kernel, padding, kw.get("count_include_pad", True), kw.get("divisor_override"))
    node.target, node.args, node.kwargs = _mean_pool, (kw["self"], scale, dims), {}
    window = "x".join(str(k) for k in kernel[2 - spatial:])
    extent = "x".join(str(d) for d in size[2 - spatial:])
    return "average pool as mean", f"its one {window} window covers the {extent} input: a MEAN, not a PAD to the window's size"


def rewrite_covering_pools_as_means_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """avg/max_pool1d and 2d calls with one window covering their input become mean / amax.

    Changes the GraphModule in place; returns the rewrites made (empty: nothing changed)."""
    return rewrite_calls(gm, _rewrite)
