"""Rewrite reflect padding of sequences as MIRROR_PAD, and replicate padding as edge slices concatenated.

litert-torch builds LiteRT's MIRROR_PAD only for ``reflection_pad2d`` (and ``replication_pad2d``
by at most 1, as MIRROR_PAD's SYMMETRIC mode). A VAD's ``F.pad(x, (2, 2), mode="reflect")`` on
``[N, C, L]`` (``reflection_pad1d``) became ABS, LESS, SELECT and GATHER_ND index arithmetic, which
TFLite Micro cannot run ("no kernel for SELECT": ``--target micro`` exit 3); replicate padding by
more than 1 became GATHER_ND. Here a 1-D reflect pad is the 2-D one over a unit axis (``[N, C, 1,
L]``: MIRROR_PAD in REFLECT mode), and a replicate pad of any rank repeats the edge slice
(``x[..., :1]``) ``pad`` times in one CONCATENATION per padded axis: SLICE and CONCATENATION,
which every target runs, the Edge TPU included. Both move values only: the results are PyTorch's
bit for bit. Reflect padding of a 3-D volume (``reflection_pad3d``) is left as it is.
"""

from __future__ import annotations

from typing import Any

from .rewrites import FxRewrite, call_arguments, rewrite_calls

__all__ = ["reflect_pad_by_slices", "reflect_pad_sequence", "rewrite_reflect_replicate_pads_pass"]


def reflect_pad_sequence(x: Any, left: int, right: int) -> Any:
    """``F.pad(x, (left, right), mode="reflect")`` of ``[N, C, L]`` or ``[C, L]`` as a 2-D
    reflect pad of ``[N, C, 1, L]`` (litert-torch's MIRROR_PAD composite)."""
    import torch.nn.functional as F

    unbatched = x.dim() == 2
    four = x.unsqueeze(0).unsqueeze(2) if unbatched else x.unsqueeze(2)
    padded = F.pad(four, (left, right, 0, 0), mode="reflect").squeeze(2)
    return padded.squeeze(0) if unbatched else padded


def reflect_pad_by_slices(x: Any, pads: tuple[int, ...]) -> Any:
    """``F.pad(x, pads, mode="reflect")`` as one-wide SLICEs concatenated, last axis first: for a
    target without MIRROR_PAD (the Edge TPU's list has PAD, SLICE and CONCATENATION)."""
    import torch

    for axis in range(len(pads) // 2):
        before, after, dim = pads[2 * axis], pads[2 * axis + 1], x.dim() - 1 - axis
        if before or after:
            size = x.shape[dim]
            head = [x.narrow(dim, i, 1) for i in range(before, 0, -1)]
            tail = [x.narrow(dim, size - 1 - i, 1) for i in range(1, after + 1)]
            x = torch.cat([*head, x, *tail], dim=dim)
    return x


def _replicate_pad(x: Any, pads: tuple[int, ...]) -> Any:
    """``F.pad(x, pads, mode="replicate")`` as concatenations of the edge slices, last axis first."""
    import torch

    for axis in range(len(pads) // 2):
        before, after, dim = pads[2 * axis], pads[2 * axis + 1], x.dim() - 1 - axis
        if before or after:
            size = x.shape[dim]
            first, last = x.narrow(dim, 0, 1), x.narrow(dim, size - 1, 1)
            x = torch.cat([first] * before + [x] + [last] * after, dim=dim)
    return x


def _pad_call(node: Any) -> tuple[str, Any, tuple[int, ...]] | None:
    """(mode, input, pads in F.pad's order) of a reflect or replicate pad call, else None."""
    import torch

    aten = torch.ops.aten
    modes = {aten.reflection_pad1d.default: "reflect", aten.replication_pad1d.default: "replicate",
             aten.replication_pad2d.default: "replicate", aten.replication_pad3d.default: "replicate"}
    if node.target == aten.pad.default:
        kw = call_arguments(node)
        mode = kw.get("mode", "constant")
        return (mode, kw["self"], tuple(kw["pad"])) if mode in ("reflect", "replicate") else None
    if node.target in modes:
        kw = call_arguments(node)
        return modes[node.target], kw["self"], tuple(kw["padding"])
    return None


def _rewrite(node: Any) -> tuple[str, str] | None:
    found = _pad_call(node)
    val = getattr(found[1], "meta", {}).get("val") if found else None
    if found is None or val is None or not all(isinstance(p, int) and p >= 0 for p in found[2]):
        return None
    mode, x, pads = found
    if mode == "replicate" and len(pads) <= 2 * val.dim():
        node.target, node.args, node.kwargs = _replicate_pad, (x, pads), {}
        return "replicate pad as edge slices", "litert-torch lowers it to GATHER_ND (or MIRROR_PAD SYMMETRIC, by 1 only)"
    if mode == "reflect" and len(pads) == 2 and val.dim() in (2, 3):
        node.target, node.args, node.kwargs = reflect_pad_sequence, (x, *pads), {}
        return "reflect pad as MIRROR_PAD", "litert-torch lowers a 1-D reflect pad to SELECT and GATHER_ND index arithmetic"
    return None


def rewrite_reflect_replicate_pads_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """1-D reflect pads become a 2-D one (MIRROR_PAD), replicate pads concatenated edge slices.
    Changes the GraphModule in place; returns the rewrites made (empty: nothing changed)."""
    return rewrite_calls(gm, _rewrite)
