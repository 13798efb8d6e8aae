"""The detections a sigmoid output can be expected to keep on the user's data, from few samples.

A detector's class scores, a multi-label tagger's labels and a voice-activity detector's frames are
read one value at a time: a value at or above the decision threshold (0.5, or --decision-threshold)
is a detection, and what an app loses is detections. Counting agreeing values says nothing there:
YOLO11n at int8 kept 0.933 of PyTorch's 119 (anchor, class) pairs above 0.25 on 24 held-out photos
and added 7, while 0.9999 of its 232,636 score values agreed (nearly all lie far below any threshold).
Eight parity samples hold few detections, so they are counted as the expected top-1 is
(expected_top1.py), from what few samples measure well and what the user's data says:

- the exported model's error in logit space, measured on the parity samples' values near the
  threshold (within BAND of its logit, where a detection can be won or lost), as a mean and a spread;
- how far PyTorch puts every value of every real sample (the held-out ones and the calibration data)
  from the threshold, in logits.

Taking the error as normal, a detection is lost with the chance that the error carries its logit
below the threshold, and a value below it is added with the chance that the error carries it above.
The expected positive agreement is expected detections kept / (PyTorch's detections + expected
detections added): the intersection over union of the two models' detections, 1 when every one
stays and none is added. A value within DECISION_TIE_MARGIN of the threshold is a tie (either side
agrees), as in probabilities.threshold_agreement.
"""

from __future__ import annotations

import math

import numpy as np

from .metrics import NotComputable
from .probabilities import DECISION_TIE_MARGIN, SIGMOID_THRESHOLD

__all__ = ["BAND", "MIN_BAND_VALUES", "expected_positive_agreement", "logit"]

# Values whose logit lies within this of the threshold's measure the error: a probability from
# about 1/50 to 1/2 around a threshold of 0.25 (e^-4 of the odds to e^4). Far below it, an int8
# output's step (1/256) is a large logit error that no decision there ever sees.
BAND = 4.0
# Fewer parity values than this near the threshold cannot give the error's spread.
MIN_BAND_VALUES = 16
# Probabilities are clipped this far inside (0, 1) before their logit: an int8 output's 0 is finite.
_EPSILON = 1e-6
_ERFC = np.frompyfunc(math.erfc, 1, 1)
# erfc(z) for z >= 6 is below 2e-17: a value that many spreads from the threshold does not cross it.
TAIL_CUTOFF = 6.0


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), with p clipped to [1e-6, 1 - 1e-6]."""
    q = np.clip(np.asarray(p, dtype=np.float64), _EPSILON, 1.0 - _EPSILON)
    return np.log(q) - np.log1p(-q)


def _error(ref: np.ndarray, out: np.ndarray, threshold: float) -> tuple[float, float]:
    """The mean and spread of the logit error on the values PyTorch puts within BAND of the threshold."""
    z_ref = logit(ref)
    near = np.abs(z_ref - float(logit(threshold))) <= BAND
    count = int(np.count_nonzero(near))
    if count < MIN_BAND_VALUES:
        raise NotComputable(
            f"{count} parity value(s) lie near the decision threshold {threshold:g} (at least {MIN_BAND_VALUES} "
            "measure the error there)"
        )
    error = logit(out)[near] - z_ref[near]
    return float(np.mean(error)), float(np.std(error))


def _normal_tail(x: np.ndarray) -> np.ndarray:
    """P(N(0, 1) > x), 0 beyond TAIL_CUTOFF spreads (bounded work over millions of values)."""
    z = np.asarray(x, dtype=np.float64) / math.sqrt(2.0)
    tails = np.zeros_like(z)
    near = z < TAIL_CUTOFF
    tails[near] = 0.5 * _ERFC(z[near]).astype(np.float64)
    return tails


def expected_positive_agreement(
    ref: np.ndarray, out: np.ndarray, real: np.ndarray, threshold: float = SIGMOID_THRESHOLD
) -> float:
    """``ref``/``out``: PyTorch's and the exported model's probabilities on the parity samples (any
    shape); ``real``: PyTorch's probabilities on every real sample. The expected intersection over
    union of the two models' detections (values >= ``threshold``) on the real samples."""
    r, o, values = (np.asarray(a, dtype=np.float64).ravel() for a in (ref, out, real))
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(o)) and np.all(np.isfinite(values))):
        raise NotComputable("the arrays hold NaN or Inf")
    if values.size == 0:
        raise NotComputable("no real samples to take PyTorch's detections from")
    decided = values[np.abs(values - threshold) > DECISION_TIE_MARGIN]
    margin = logit(decided) - float(logit(threshold))
    positive = decided >= threshold
    detections = int(np.count_nonzero(positive))
    if detections == 0:
        raise NotComputable(f"PyTorch puts no value at or above {threshold:g} on the real samples: nothing to keep")
    mean, spread = _error(r, o, threshold)
    spread = max(spread, 1e-12)  # an exact model: every crossing is a step function of the mean
    lost = _normal_tail((margin[positive] + mean) / spread)  # P(margin + error < 0)
    added = _normal_tail(-(margin[~positive] + mean) / spread)  # P(margin + error >= 0)
    kept = detections - float(lost.sum())
    return float(kept / (detections + float(added.sum())))
