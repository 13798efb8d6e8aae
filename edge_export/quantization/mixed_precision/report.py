"""What a mixed-precision search reports: its steps, the report in the export's JSON, and what
the isolated search hands back; the --mixed-precision option's values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import UsageError
from ...output.serialize import json_field
from ...quantize_modes import mode_spec
from ..promotion_steps import AccuracyTarget, PromotedLayer

__all__ = [
    "CLASSIFICATION_SEARCH_MARGIN_DB", "DEFAULT_SEARCH", "DEFAULT_SEARCH_MARGIN_DB", "MIXED_PRECISION_MODES", "MixedPrecisionReport", "MixedPrecisionSearch", "MixedPrecisionStep",
    "check_mixed_precision_option", "kept_int16_operators", "recipe_of",
]


MIXED_PRECISION_MODES = ("auto", "int16", "off")
# The search a plain --quantize int8 runs on cpu when its model misses the export's own gate
# (no --min-sqnr/--min-cosine/--min-top1, no --mixed-precision): int16 promotions only, to the gate
# plus DEFAULT_SEARCH_MARGIN_DB, since the search sees only the parity inputs and the model must
# still pass on data it did not see (a trained VAD, a text encoder: 6-18 dB at int8, issue 39).
DEFAULT_SEARCH = "default"
DEFAULT_SEARCH_MARGIN_DB = 5.0
# For an output declared a classifier (--output-kind, --labels, labelled calibration data) the
# default search aims at int16x8's gate, 30 dB: top-1 flips on ambiguous inputs well above the SQNR
# gate. EfficientNet-Lite0 kept at 25 dB (4 operators at int16) agreed with PyTorch on 0.906-0.938
# of its photo crops; at 30 dB (28 operators) on 0.953-0.969, like the int16x8 model's 0.969-0.979
# (docs/BENCHMARKS.md section 40).
CLASSIFICATION_SEARCH_MARGIN_DB = 10.0
# A target the user gave (--min-sqnr) is aimed at this far above it: the search measures on inputs
# that parity's verdict does not read (stages/samples.selection_samples), and a model chosen at the
# target exactly passes on other inputs about half of the time (a recurrent cell searched to 30 dB:
# 32.4 dB on its 8 selection inputs, 29.6 dB on parity's 8). As selection.SCREEN_MARGIN_DB.
SELECTION_MARGIN_DB = 3.0
# Both under the gate on the search's inputs, a model this much better than the int8 one is kept for
# parity to judge on its own: the random-weight YOLO11n's search read 9.6 dB on calibration crops
# (int8: -36.8 dB), and its model of that kind kept 0.979 of the held-out detections (section 44).
KEPT_GAIN_DB = 6.0
# With real data the search reads calibration samples, the quantizer's own: a model reads better there
# than on data it was not calibrated on (EfficientNet-Lite0: int8 21.2 dB there, 19.8 dB on held-out
# photos; its default search's model 30.2 dB there, 29.2 dB on parity's), so its target is this much higher.
CALIBRATED_INPUTS_MARGIN_DB = 1.5


def check_mixed_precision_option(value: str | None) -> None:
    if value is not None and value not in MIXED_PRECISION_MODES:
        raise UsageError(
            f"--mixed-precision {value} is not known.", f"Use one of {', '.join(MIXED_PRECISION_MODES)}."
        )


@dataclass(frozen=True)
class MixedPrecisionStep:
    promoted: int  # the prefix of the ranking promoted in this candidate
    sqnr_db: float
    cosine: float
    size_bytes: int
    met: bool
    latency_ms: float | None = json_field(default=None, digits=3)  # median host latency, when measured
    split_weights: int = 0  # weighted operators whose int8 weights were split (int16 only; weight_splitting.py)


@dataclass(frozen=True)
class MixedPrecisionReport:
    mode: str  # the --mixed-precision mode in force ("auto" | "int16"), or DEFAULT_SEARCH
    precision: str  # what operators were promoted to: "int16" | "float"
    target: AccuracyTarget
    met: bool
    reason: str
    int8_sqnr_db: float | None  # the plain int8 model (the one kept when none is needed)
    int8_cosine: float | None
    sqnr_db: float | None  # the model kept
    cosine: float | None
    promoted: tuple[PromotedLayer, ...] = ()
    steps: tuple[MixedPrecisionStep, ...] = ()
    int8_size_bytes: int | None = None
    size_bytes: int | None = None
    # median host latency (LiteRT CPU + XNNPACK, 1 thread) of the plain int8 model and the one kept
    int8_latency_ms: float | None = json_field(default=None, digits=3)
    latency_ms: float | None = json_field(default=None, digits=3)
    fully_integer: bool | None = None
    backend: str = "flatbuffer"
    seconds: float = json_field(default=0.0, digits=3)
    # the promotion order: "sensitivity" or "sensitivity, cheapest first within <band> dB (<cost>)"
    order: str = "sensitivity"
    latency_seconds: float = json_field(default=0.0, digits=3)  # of ``seconds``, spent timing prefixes


def default_search_kept(report: MixedPrecisionReport) -> bool:
    """A default search's model is kept when it meets its target; short of it, when the int8 model
    missed the export's own gate (the target less its margin) on the same inputs and the search's
    model reaches that gate or reads KEPT_GAIN_DB better: parity then judges it, on inputs the
    search did not read, as any model. An int8 model that passes the gate is kept over a slower one
    that misses the target too."""
    if report.met:
        return True
    gate, min_cosine = report.target.gate_sqnr_db(), report.target.min_cosine
    if _passes(report.int8_sqnr_db, report.int8_cosine, gate, min_cosine):
        return False
    return passes_gate(report) or far_better(report)


def passes_gate(report: MixedPrecisionReport) -> bool:
    """Whether the search's model reaches the export's own gate (its target less the margin)."""
    return _passes(report.sqnr_db, report.cosine, report.target.gate_sqnr_db(), report.target.min_cosine)


def far_better(report: MixedPrecisionReport) -> bool:
    """Whether the search's model reads at least KEPT_GAIN_DB above the int8 model (NaN: no)."""
    if report.sqnr_db is None or report.int8_sqnr_db is None:
        return False
    return bool(report.sqnr_db - report.int8_sqnr_db >= KEPT_GAIN_DB)


def _passes(sqnr: float | None, cosine: float | None, min_sqnr: float | None, min_cosine: float | None) -> bool:
    if min_sqnr is None or sqnr is None or not sqnr >= min_sqnr:
        return False
    return min_cosine is None or (cosine is not None and cosine >= min_cosine)


@dataclass(frozen=True)
class MixedPrecisionSearch:
    """What the isolated search hands back: the report and the model bytes kept (None: the model
    the export started from)."""

    report: MixedPrecisionReport
    model_bytes: bytes | None
    int8_bytes: bytes | None
    int16_headroom: tuple = ()  # the kept model's int16 ranges widened (int16_headroom.RangeHeadroom)


def kept_int16_operators(quant: Any, report: MixedPrecisionReport | None) -> bool:
    """Whether ``quant`` (the QuantizationResult an export keeps) is the mixed model with operators
    at int16 (int16x8 kernels), rather than the plain int8 model the search fell back to."""
    return report is not None and report.precision == "int16" and bool(report.promoted) and quant.recipe == recipe_of(report)


def recipe_of(report: MixedPrecisionReport) -> str:
    base = mode_spec("int8").flatbuffer_recipe  # the search quantizes int8 recipes, raising some operators
    raised = len({p.op_index for p in report.promoted})
    if not raised:
        return base
    split = sum(1 for p in report.promoted if p.precision != report.precision)
    return f"{base} + {raised} operator(s) at {report.precision}" + (f", {split} with split int8 weights" if split else "")
