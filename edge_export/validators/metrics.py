"""Numerical parity metrics between a reference array (PyTorch) and a candidate (LiteRT).

Each is a small pure function on numpy arrays with a test on arrays whose answer is known. They are
computed in float64 so that the metric itself adds no error. A metric that has no meaningful value
for its arrays raises ``NotComputable`` with the reason, instead of returning a number that could read
as a pass.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "max_abs_error",
    "mean_abs_error",
    "relative_l2_error",
    "cosine_similarity",
    "sqnr_db",
    "top1_agreement",
    "topk_agreement",
    "row_cosines",
    "worst_sample_cosine",
    "neighbour_agreement",
    "error_in_steps",
    "NotComputable",
    "NEIGHBOUR_TIE_TOLERANCE",
]

# SQNR of an exact match is infinite; JSON cannot hold inf, so reports cap it here.
SQNR_CAP_DB = 200.0

# Two neighbours whose PyTorch cosines differ by less than this are tied: either one agrees.
NEIGHBOUR_TIE_TOLERANCE = 1e-6


class NotComputable(ValueError):
    """The metric has no meaningful value for these arrays; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _pair(ref: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = np.asarray(ref, dtype=np.float64)
    o = np.asarray(out, dtype=np.float64)
    if r.shape != o.shape:
        raise ValueError(f"shape mismatch: reference {r.shape} vs output {o.shape}")
    return r, o


def max_abs_error(ref: np.ndarray, out: np.ndarray) -> float:
    r, o = _pair(ref, out)
    return float(np.max(np.abs(r - o))) if r.size else 0.0


def mean_abs_error(ref: np.ndarray, out: np.ndarray) -> float:
    r, o = _pair(ref, out)
    return float(np.mean(np.abs(r - o))) if r.size else 0.0


def relative_l2_error(ref: np.ndarray, out: np.ndarray) -> float:
    """||out - ref|| / ||ref||; 0 for an exact match, inf when ref is all zeros and out is not."""
    r, o = _pair(ref, out)
    num = float(np.linalg.norm((o - r).ravel()))
    den = float(np.linalg.norm(r.ravel()))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def cosine_similarity(ref: np.ndarray, out: np.ndarray) -> float:
    """Cosine of the flattened arrays; 1.0 when both are all zeros, 0.0 when only one is."""
    r, o = _pair(ref, out)
    nr, no = float(np.linalg.norm(r.ravel())), float(np.linalg.norm(o.ravel()))
    if nr == 0.0 and no == 0.0:
        return 1.0
    if nr == 0.0 or no == 0.0:
        return 0.0
    return float(np.clip(np.dot(r.ravel(), o.ravel()) / (nr * no), -1.0, 1.0))


def sqnr_db(ref: np.ndarray, out: np.ndarray) -> float:
    """10*log10(sum(ref^2) / sum((out-ref)^2)), capped at SQNR_CAP_DB for an exact match.

    NaN when either array holds NaN or Inf: not computable (a naive formula reads NaN noise as an
    exact match, 200 dB). NaN fails every ``>=`` gate; output parity never gets this far with such
    arrays (it reports them as not computable), other callers must not read NaN as a pass."""
    r, o = _pair(ref, out)
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(o))):
        return math.nan
    noise = float(np.sum((o - r) ** 2))
    signal = float(np.sum(r**2))
    if noise == 0.0:
        return SQNR_CAP_DB
    if signal == 0.0:
        return -SQNR_CAP_DB
    return float(min(SQNR_CAP_DB, 10.0 * math.log10(signal / noise)))


def _require_finite(r: np.ndarray, o: np.ndarray) -> None:
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(o))):
        raise NotComputable("the arrays hold NaN or Inf")


def _rows(r: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if r.ndim == 0:
        raise NotComputable("a scalar output has no last axis")
    return r.reshape(-1, r.shape[-1]), o.reshape(-1, o.shape[-1])


def topk_agreement(ref: np.ndarray, out: np.ndarray, k: int) -> float:
    """Fraction of rows (over the last axis, the classes) where PyTorch's top class is among the
    exported model's top ``k``. Ties count generously: a class is in the top k when fewer than k
    classes score strictly higher, and any class tied at PyTorch's top will do (quantized outputs
    often tie)."""
    r, o = _pair(ref, out)
    _require_finite(r, o)
    r2, o2 = _rows(r, o)
    if r2.shape[0] == 0:
        raise NotComputable("the output is empty")
    classes = r2.shape[1]
    if classes < 2:
        raise NotComputable(f"{classes} class along the last axis: agreement on it means nothing")
    if classes <= k:
        raise NotComputable(f"only {classes} classes along the last axis: every class is in the top {k}")
    at_top = r2 == r2.max(axis=1, keepdims=True)
    # the exported model's best score among PyTorch's top classes
    best = np.where(at_top, o2, -np.inf).max(axis=1, keepdims=True)
    higher = np.sum(o2 > best, axis=1)
    return float(np.mean(higher < k))


def top1_agreement(ref: np.ndarray, out: np.ndarray) -> float:
    """Fraction of rows whose argmax over the last axis agrees (ties counted as agreement)."""
    return topk_agreement(ref, out, 1)


def row_cosines(ref: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Cosine of each row over the last axis (one embedding vector per row); 1.0 where both rows
    are all zeros, 0.0 where only one is."""
    r, o = _pair(ref, out)
    _require_finite(r, o)
    r2, o2 = _rows(r, o)
    nr, no = np.linalg.norm(r2, axis=1), np.linalg.norm(o2, axis=1)
    dots = np.sum(r2 * o2, axis=1)
    both = (nr > 0) & (no > 0)
    cos = np.where(both, dots / np.where(both, nr * no, 1.0), np.where((nr == 0) & (no == 0), 1.0, 0.0))
    return np.clip(cos, -1.0, 1.0)


def worst_sample_cosine(ref: np.ndarray, out: np.ndarray) -> float:
    """The lowest per-row cosine: one bad sample is not hidden by a good mean."""
    cos = row_cosines(ref, out)
    if cos.size == 0:
        raise NotComputable("the output is empty")
    return float(np.min(cos))


def _nearest_neighbours(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of each row's nearest other row by cosine, and the full similarity matrix."""
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit = v / np.where(norms > 0, norms, 1.0)
    sim = unit @ unit.T
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1), sim


def neighbour_agreement(ref: np.ndarray, out: np.ndarray) -> float:
    """Over the rows (embedding vectors of all samples), the fraction whose nearest other row by
    cosine is the same in the exported model as in PyTorch: what retrieval and clustering see.

    A neighbour within NEIGHBOUR_TIE_TOLERANCE of PyTorch's nearest counts as the same. Needs at
    least 3 rows: with 2, each row's only other row is trivially its nearest, a pass by construction."""
    r, o = _pair(ref, out)
    _require_finite(r, o)
    r2, o2 = _rows(r, o)
    n = r2.shape[0]
    if n < 3:
        raise NotComputable(
            f"{n} embedding vector{'s' if n != 1 else ''} (samples × batch): nearest neighbours need "
            "at least 3, since with 2 each one's only neighbour is trivially the nearest"
        )
    ref_nn, ref_sim = _nearest_neighbours(r2)
    out_nn, _ = _nearest_neighbours(o2)
    rows = np.arange(n)
    same = ref_sim[rows, out_nn] >= ref_sim[rows, ref_nn] - NEIGHBOUR_TIE_TOLERANCE
    return float(np.mean(same))


def error_in_steps(ref: np.ndarray, out: np.ndarray, scale: float) -> float:
    """Max abs error expressed in output quantization steps (LSBs)."""
    if not scale:
        raise ValueError("scale must be non-zero")
    return max_abs_error(ref, out) / scale
