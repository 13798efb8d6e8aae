"""Whether the PyTorch model itself is stable on the parity inputs: PyTorch against PyTorch, with
every float input changed by one part in a million.

A model can amplify tiny differences so much that no export matches it: the zoo's random-weight
LeViT-128S moves to 5-12 dB SQNR under such a change on standard-normal inputs (PyTorch float32
against float64 reads 8 dB there), while every other zoo model keeps at least 84 dB
(docs/BENCHMARKS.md section 23.3). Its failed fp32 parity (14 dB) is then the model's, not the
conversion's; measured when parity fails, so the report can say so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..output.serialize import json_field

__all__ = [
    "PERTURBATION", "UNSTABLE_BELOW_DB", "OutputStability", "ReferenceStability", "perturbed_samples",
    "reference_stability",
]

PERTURBATION = 1e-6  # relative, per element: about 16 float32 rounding steps
# Below this the model's own output moves visibly: the zoo's well-conditioned models kept >= 84 dB.
UNSTABLE_BELOW_DB = 60.0


@dataclass(frozen=True)
class OutputStability:
    output: str
    sqnr_db: float | None = json_field(digits=2)  # PyTorch on perturbed inputs vs PyTorch; None: not a number


@dataclass(frozen=True)
class ReferenceStability:
    perturbation: float
    outputs: tuple[OutputStability, ...]

    JSON_KEYS = ("perturbation", "unstable", "outputs")

    @property
    def unstable(self) -> tuple[str, ...]:
        """The outputs that move below UNSTABLE_BELOW_DB (NaN counts: a NaN from a tiny change is unstable)."""
        return tuple(o.output for o in self.outputs if o.sqnr_db is None or o.sqnr_db < UNSTABLE_BELOW_DB)

    def note(self) -> str | None:
        """One sentence for the parity notes when the model itself is unstable, else None."""
        if not self.unstable:
            return None
        moved = ", ".join(
            f"{o.output} to {'NaN' if o.sqnr_db is None else f'{o.sqnr_db:.1f} dB'}"
            for o in self.outputs
            if o.output in self.unstable
        )
        return (
            f"the PyTorch model itself is unstable on these inputs: changing every float input by one part in "
            f"{round(1 / self.perturbation):,} moves {moved} (PyTorch against PyTorch), so no export can match it "
            "more closely; a parity failure here is the model's, not the conversion's. Untrained weights and "
            "inputs the model never sees are the usual causes: check parity on real inputs (a .pt2 whose example "
            "inputs are real, with --samples 1 for those alone)"
        )


def perturbed_samples(samples: Sequence[tuple], seed: int = 0) -> list[tuple] | None:
    """``samples`` with every float tensor scaled by (1 + PERTURBATION * N(0, 1)), elementwise and
    seeded; None when no input is float (nothing to change)."""
    import torch

    if not any(t.dtype.is_floating_point for sample in samples for t in sample):
        return None
    generator = torch.Generator().manual_seed(seed)
    return [tuple(_perturbed(t, generator) for t in sample) for sample in samples]


def reference_stability(
    references: Sequence[Sequence[np.ndarray]], moved: Sequence[Sequence[np.ndarray]], names: Sequence[str]
) -> ReferenceStability:
    """One SQNR per output over all samples: PyTorch on the perturbed samples (``moved``) against
    PyTorch on the samples (``references``), both flattened and ordered as ``names``."""
    from .metrics import sqnr_db

    results = []
    for k, name in enumerate(names):
        ref = np.concatenate([r[k].ravel() for r in references])
        out = np.concatenate([m[k].ravel() for m in moved])
        value = sqnr_db(ref, out) if ref.shape == out.shape else math.nan
        results.append(OutputStability(name, None if math.isnan(value) else value))
    return ReferenceStability(PERTURBATION, tuple(results))


def _perturbed(t: Any, generator: Any) -> Any:
    import torch

    if not t.dtype.is_floating_point:
        return t
    noise = torch.randn(t.shape, generator=generator, dtype=torch.float32).to(t.dtype)
    return t * (1 + PERTURBATION * noise)
