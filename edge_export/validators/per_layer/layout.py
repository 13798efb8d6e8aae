"""Layout: the ways to bring a flatbuffer tensor to the PyTorch shape.

The flatbuffer may hold NHWC where PyTorch holds NCHW, and may drop or add size-1 axes. Every axis
permutation of the flatbuffer tensor that gives the PyTorch shape is a candidate (identity first,
then channels-last to channels-first); matching uses "no candidate" to report a *shape mismatch*,
measurement picks one candidate per tensor (``measurement.choose_layouts``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

__all__ = ["apply_layout", "layout_candidates"]


def layout_candidates(tfl_shape: tuple[int, ...], torch_shape: tuple[int, ...]) -> list[tuple[str, Any]]:
    """Ways to turn a flatbuffer array into the PyTorch shape, most likely first."""
    if int(np.prod(tfl_shape, dtype=np.int64)) != int(np.prod(torch_shape, dtype=np.int64)):
        return []
    cands: list[tuple[str, Any]] = []

    def perms_for(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[int, ...]]:
        n = len(src)
        if n != len(dst) or n > 6:
            return []
        found = [p for p in itertools.permutations(range(n)) if tuple(src[i] for i in p) == dst]
        to_first = (0, n - 1, *range(1, n - 1)) if n >= 3 else None
        found.sort(key=lambda p: (p != tuple(range(n)), p != to_first))
        return found

    for p in perms_for(tfl_shape, torch_shape):
        cands.append((_perm_label(p), p))
    if not cands:
        # Size-1 axes differ ((5, 16) vs (1, 5, 16)): compare without them.
        sq_src = tuple(d for d in tfl_shape if d != 1)
        sq_dst = tuple(d for d in torch_shape if d != 1)
        for p in perms_for(sq_src, sq_dst):
            cands.append(("squeeze+" + _perm_label(p), ("squeeze", p)))
    return cands


def _perm_label(p: tuple[int, ...]) -> str:
    n = len(p)
    if p == tuple(range(n)):
        return "identity"
    if n == 4 and p == (0, 3, 1, 2):
        return "NHWC->NCHW"
    return "transpose" + str(tuple(p))


def apply_layout(arr: np.ndarray, how: Any, torch_shape: tuple[int, ...]) -> np.ndarray:
    """The flatbuffer array in the PyTorch layout, by one candidate of ``layout_candidates``."""
    if isinstance(how, tuple) and how and how[0] == "squeeze":
        arr = arr.reshape(tuple(d for d in arr.shape if d != 1))
        arr = np.transpose(arr, how[1])
        return arr.reshape(torch_shape)
    return np.transpose(arr, how)
