"""Rewrite ``F.unfold``/``F.fold`` over non-overlapping patches as reshapes and a transpose.

With the stride equal to the kernel, no padding, no dilation and a size the kernel divides,
``unfold`` (aten.im2col) only regroups the pixels of each patch and ``fold`` (aten.col2im) puts them
back: no two patches share a pixel, so nothing is summed. litert-torch lowers col2im to a
STABLEHLO_SCATTER that LiteRT cannot run ("Only update, Add, Multiply, Maximum and Minimum
operations are currently supported for stablehlo.scatter"): MobileViTv2 converted, then failed to
load (exit 3). Written as RESHAPE, TRANSPOSE, RESHAPE, the same values land in the same places,
exactly. Overlapping, padded or dilated patches are left as they are.
"""

from __future__ import annotations

from typing import Any

from .rewrites import FxRewrite, call_arguments, node_location

__all__ = ["rewrite_patch_folds_as_reshapes_pass"]


def _unfold_patches(x: Any, kh: int, kw: int) -> Any:
    """aten.im2col of [N, C, H, W] with stride = kernel: [N, C*kh*kw, (H/kh)*(W/kw)]. N and C stay
    in front, merged, so the TRANSPOSE is 5-D (TFLite Micro's takes at most 5)."""
    n, c, h, w = x.shape
    patches = x.reshape(n * c, h // kh, kh, w // kw, kw).permute(0, 2, 4, 1, 3)
    return patches.reshape(n, c * kh * kw, (h // kh) * (w // kw))


def _fold_patches(x: Any, h: int, w: int, kh: int, kw: int) -> Any:
    """aten.col2im of [N, C*kh*kw, L] into [N, C, h, w] with stride = kernel (no overlap)."""
    n, ckk, _ = x.shape
    c = ckk // (kh * kw)
    pixels = x.reshape(n * c, kh, kw, h // kh, w // kw).permute(0, 3, 1, 4, 2)
    return pixels.reshape(n, c, h, w)


def _non_overlapping(kernel: Any, dilation: Any, padding: Any, stride: Any) -> tuple[int, int] | None:
    """(kh, kw) when the patches tile their input without overlap, gaps or padding."""
    if list(stride) != list(kernel) or list(dilation) != [1, 1] or list(padding) != [0, 0]:
        return None
    return int(kernel[0]), int(kernel[1])


def _shape(node: Any) -> tuple | None:
    shape = getattr(getattr(node, "meta", {}).get("val"), "shape", None)
    return None if shape is None or not all(isinstance(d, int) for d in shape) else tuple(shape)


def _rewrite_unfold(node: Any) -> bool:
    arguments = call_arguments(node)
    patch = _non_overlapping(arguments["kernel_size"], arguments["dilation"], arguments["padding"], arguments["stride"])
    shape = _shape(arguments["self"])
    if patch is None or shape is None or len(shape) != 4 or shape[2] % patch[0] or shape[3] % patch[1]:
        return False
    node.target, node.args, node.kwargs = _unfold_patches, (arguments["self"], *patch), {}
    return True


def _rewrite_fold(node: Any) -> bool:
    arguments = call_arguments(node)
    patch = _non_overlapping(arguments["kernel_size"], arguments["dilation"], arguments["padding"], arguments["stride"])
    shape, size = _shape(arguments["self"]), [int(s) for s in arguments["output_size"]]
    if patch is None or shape is None or len(shape) != 3 or size[0] % patch[0] or size[1] % patch[1]:
        return False
    node.target, node.args, node.kwargs = _fold_patches, (arguments["self"], *size, *patch), {}
    return True


def rewrite_patch_folds_as_reshapes_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """im2col/col2im calls over non-overlapping patches become reshapes and a transpose. Changes the
    GraphModule in place; returns the rewrites made (empty: nothing changed)."""
    import torch

    aten = torch.ops.aten
    kinds = {aten.im2col.default: (_rewrite_unfold, "unfold as reshapes"), aten.col2im.default: (_rewrite_fold, "fold as reshapes")}
    rewrites = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in kinds:
            continue
        rewrite, kind = kinds[node.target]
        if rewrite(node):
            rewrites.append(FxRewrite(*node_location(node), kind, "non-overlapping patches; LiteRT cannot run the scatter litert-torch lowers fold to"))
    if rewrites:
        gm.graph.lint()
        gm.recompile()
    return tuple(rewrites)
