"""Parity through more than one LiteRT runtime (``--runtime both``): the classic Interpreter and
LiteRT 2.x's CompiledModel, on the same parity samples, and where their outputs differ.

Both runtimes run the same flatbuffer with XNNPACK on the host, so they are expected to agree to the
last bit or nearly; a difference means one runtime's build or options computes the model differently
(a kernel, a fused op, a threading reduction order), which an app moving from one API to the other
would inherit. It is a finding of the report (``RuntimeComparison.findings``), never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from .parity import ParityResult

__all__ = ["RUNTIMES", "RuntimeDifference", "RuntimeComparison", "compare_runtimes", "check_runtime_option"]

RUNTIMES = ("interpreter", "compiled-model", "both")

# Float outputs: relative to the output's largest magnitude (XNNPACK may reorder a reduction between
# two runners; 1e-5 is a few float32 ulps over a sum of a few thousand terms).
_FLOAT_TOLERANCE = 1e-5


def check_runtime_option(value: str) -> str:
    from ..errors import UsageError

    if value not in RUNTIMES:
        raise UsageError(f"--runtime {value} is not known.", "Use --runtime interpreter, compiled-model or both.")
    return value


@dataclass(frozen=True)
class RuntimeDifference:
    """One output's largest difference between the two runtimes over all parity samples."""

    output: str
    max_abs_difference: float
    tolerance: float  # allowed: a relative float tolerance, or one quantization step
    identical: bool

    @property
    def agrees(self) -> bool:
        return self.max_abs_difference <= self.tolerance

    JSON_KEYS = ("output", "max_abs_difference", "tolerance", "identical", "agrees")


@dataclass(frozen=True)
class RuntimeComparison:
    """Parity of each runtime asked for against PyTorch, and (with two) how far apart they are."""

    requested: str  # --runtime
    results: tuple[ParityResult, ...]  # one per runtime, in the order they ran
    differences: tuple[RuntimeDifference, ...] = ()

    JSON_KEYS = ("requested", "agree", "findings", "results", "differences")

    @property
    def agree(self) -> bool | None:
        """None with one runtime; else whether every output agrees within its tolerance."""
        if len(self.results) < 2:
            return None
        return all(d.agrees for d in self.differences)

    def findings(self) -> list[str]:
        found = []
        for d in self.differences:
            if not d.agrees:
                found.append(
                    f"output '{d.output}' differs between {self.results[0].runtime} and {self.results[1].runtime} "
                    f"by up to {d.max_abs_difference:.3g} (tolerance {d.tolerance:.3g})"
                )
        for result in self.results:
            if not result.passed:
                found.append(f"parity failed through {result.runtime}")
        return found


def compare_runtimes(
    names: Sequence[str], first: Sequence[Sequence[np.ndarray]], second: Sequence[Sequence[np.ndarray]], scales: Sequence[float | None]
) -> tuple[RuntimeDifference, ...]:
    """Per output, the largest difference between two runtimes' outputs over the samples."""
    differences = []
    for i, name in enumerate(names):
        worst, magnitude, identical = 0.0, 0.0, True
        for a_sample, b_sample in zip(first, second):
            a, b = np.asarray(a_sample[i], dtype=np.float64), np.asarray(b_sample[i], dtype=np.float64)
            if a.shape != b.shape:
                worst, identical = float("inf"), False
                continue
            identical = identical and bool(np.array_equal(a, b))
            if a.size:
                worst = max(worst, float(np.nanmax(np.abs(a - b))))
                magnitude = max(magnitude, float(np.nanmax(np.abs(a))))
        scale = scales[i] if i < len(scales) else None
        tolerance = float(scale) if scale else _FLOAT_TOLERANCE * max(1.0, magnitude)
        differences.append(RuntimeDifference(name, worst, tolerance, identical))
    return tuple(differences)
