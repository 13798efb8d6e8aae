"""``--range-algorithm``: one name for how activation ranges are set, mapped onto each backend's
observer (pt2e.py's PT2E_OBSERVERS, flatbuffer_recipes.py's FLATBUFFER_OBSERVERS).

    minmax      the extremes seen over all calibration samples (both backends)
    percentile  the 0.01th/99.99th percentiles of the values seen (both backends)
    mse         the range of least mean squared quantization error: PT2E's histogram observer (its
                own L2 search), and for the flatbuffer backend ``flatbuffer_recipes.mse_range``

Without the option each backend keeps its default, chosen by held-out parity
(benchmarks/quantization_ranges.py, docs/BENCHMARKS.md): min/max for the flatbuffer recipe and the
histogram (MSE) search for PT2E. Import-light: the API checks the name before any work.
"""

from __future__ import annotations

from ..config import QuantizeMode
from ..errors import UsageError

__all__ = ["RANGE_ALGORITHMS", "check_range_algorithm", "observers_for"]

# name -> (PT2E observer, flatbuffer-backend observer)
RANGE_ALGORITHMS: dict[str, tuple[str, str]] = {
    "minmax": ("minmax", "minmax"),
    "percentile": ("percentile", "percentile"),
    "mse": ("histogram", "mse"),
}


def check_range_algorithm(name: str, mode: QuantizeMode | None = None) -> None:
    if name not in RANGE_ALGORITHMS:
        raise UsageError(
            f"--range-algorithm {name} is not known.", f"Use one of: {', '.join(RANGE_ALGORITHMS)}."
        )
    if mode is not None and not QuantizeMode(mode).needs_calibration:
        raise UsageError(
            f"--range-algorithm sets activation ranges, which --quantize {QuantizeMode(mode).value} does not "
            "calibrate (only int8 and int16x8 do).",
            "Drop --range-algorithm, or use --quantize int8 or int16x8.",
        )


def observers_for(name: str | None) -> dict[str, str]:
    """quantize_model's observer arguments for ``name`` (none: each backend's default)."""
    if name is None:
        return {}
    pt2e_observer, flatbuffer_observer = RANGE_ALGORITHMS[name]
    return {"pt2e_observer": pt2e_observer, "flatbuffer_observer": flatbuffer_observer}
