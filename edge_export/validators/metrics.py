"""Numerical parity metrics between a reference array (PyTorch) and a candidate (LiteRT).

Each is a small pure function on numpy arrays with a test on arrays whose answer is known. They are
computed in float64 so that the metric itself adds no error.
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
    "looks_like_logits",
    "error_in_steps",
]

# SQNR of an exact match is infinite; JSON cannot hold inf, so reports cap it here.
SQNR_CAP_DB = 200.0


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
    """10*log10(sum(ref^2) / sum((out-ref)^2)), capped at SQNR_CAP_DB for an exact match."""
    r, o = _pair(ref, out)
    noise = float(np.sum((o - r) ** 2))
    signal = float(np.sum(r**2))
    if noise == 0.0:
        return SQNR_CAP_DB
    if signal == 0.0:
        return -SQNR_CAP_DB
    return float(min(SQNR_CAP_DB, 10.0 * math.log10(signal / noise)))


def looks_like_logits(shape: tuple[int, ...]) -> bool:
    """A [batch, classes] (or [classes]) output with at least 2 classes is treated as class scores."""
    if len(shape) == 1:
        return shape[0] >= 2
    return len(shape) == 2 and shape[-1] >= 2


def top1_agreement(ref: np.ndarray, out: np.ndarray) -> float:
    """Fraction of rows whose argmax over the last axis agrees."""
    r, o = _pair(ref, out)
    r2 = r.reshape(-1, r.shape[-1])
    o2 = o.reshape(-1, o.shape[-1])
    if r2.shape[0] == 0:
        return 1.0
    return float(np.mean(np.argmax(r2, axis=-1) == np.argmax(o2, axis=-1)))


def error_in_steps(ref: np.ndarray, out: np.ndarray, scale: float) -> float:
    """Max abs error expressed in output quantization steps (LSBs)."""
    if not scale:
        raise ValueError("scale must be non-zero")
    return max_abs_error(ref, out) / scale
