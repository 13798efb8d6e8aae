"""The export's entry: the sensitivity ranking and the mixed-precision search run in a child
process (child_run.py), and the mixed model, when one is kept, finished into the QuantizationResult."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from ...errors import QuantizationError, first_line
from ..budget import TimeBudget
from ..promotion_steps import AccuracyTarget
from ..sensitivity import SensitivityReport
from .child_run import run_in_child, untried
from .report import DEFAULT_SEARCH, MixedPrecisionReport, default_search_kept, passes_gate, recipe_of

__all__ = ["SENSITIVITY_SAMPLES", "int16_ready", "run_sensitivity_and_mixed_precision"]

SENSITIVITY_SAMPLES = 8  # calibration samples the ranking is measured on


def int16_ready(float_bytes: bytes) -> bytes:
    """The float model with the operators ai-edge-quantizer cannot raise to int16 written as ones it
    can (SQUARED_DIFFERENCE as SUB and MUL, the same float values): what an int16 search starts from."""
    from ...passes.flatbuffer import run_flatbuffer_passes, split_squared_difference_pass

    return run_flatbuffer_passes(float_bytes, [split_squared_difference_pass], origin="the float model for int16").model.data


def _finished_mixed_model(model_bytes: bytes, io_dtype: Any) -> Any:
    """The search's model with what every quantized candidate gets (integer embedding tables, shared
    quantization vectors), then the export's I/O type."""
    from ...passes.flatbuffer import quantize_embedding_tables_pass, run_flatbuffer_passes, set_io_dtype_pass, share_quantization_vectors_pass

    origin = "the mixed-precision model"
    shared = run_flatbuffer_passes(model_bytes, [quantize_embedding_tables_pass, share_quantization_vectors_pass], origin=origin).model
    return run_flatbuffer_passes(shared, [partial(set_io_dtype_pass, io_dtype=io_dtype)], origin=origin).model


def _not_integer_warning(report: MixedPrecisionReport, check: Any) -> str:
    """Why the mixed model is not fully integer: its float promotions, or (at int16, whose
    operators are integer) the operators computing in float that integer_check names."""
    if report.precision == "float":
        return f"Mixed precision left {len(report.promoted)} operator(s) in float: the model is not fully integer."
    opcodes = ", ".join(dict.fromkeys(op.opcode for op in check.float_operators)) or "none; float tensors only"
    return (
        f"Mixed precision raised {len({p.op_index for p in report.promoted})} operator(s) to int16, but the model is not fully "
        f"integer: operators computing in float: {opcodes} (see integer_check)."
    )


def run_sensitivity_and_mixed_precision(
    base: Any,
    *,
    float_bytes: bytes,
    export_module: Any,
    calibration: Any,
    heldout: Sequence[tuple[np.ndarray, ...]],
    want_sensitivity: bool,
    search_mode: str | None,
    precision: str,
    target: AccuracyTarget,
    io_dtype: Any,
    source_module: Any = None,
    verbose: bool = False,
    measure_latency: bool = True,
    budget: TimeBudget | None = None,
    int16_first: bool = False,
    weight_rounding: bool = True,
    part_scales: bool = True,
    rounding: Any = None,
    int16_opcodes: frozenset[str] | None = None,
) -> tuple[Any, SensitivityReport | None, MixedPrecisionReport | None]:
    """The sensitivity ranking (``want_sensitivity``) and, when ``search_mode`` is set and the
    quantized model ``base`` (a QuantizationResult) misses ``target`` on ``heldout``, the search
    (``measure_latency``: time every measured prefix on this CPU), within ``budget`` (what it left
    untried is added to it; its progress reaches ``budget.on_progress``); ``int16_first``: at float,
    int16 activations are tried first (search_mixed_precision); ``weight_rounding``: the int8 filters
    are rounded for their outputs (weight_rounding.py), as the backend rounded them; ``part_scales``: a
    joined output's parts keep their scales (output_joins.py), as in the backend's model; ``rounding``:
    the backend's WeightRounding of the same float model, reused (None: computed here); ``int16_opcodes``: the
    operators the target runs at int16 (None: any), the others kept int8. Returns the QuantizationResult to
    keep (``base`` unless a mixed model replaced it)."""
    budget = budget if budget is not None else TimeBudget(None)
    from ...config import IODtype
    from ...processes.isolation import run_isolated
    from ..selection import reference_outputs

    if not budget.allows(untried(want_sensitivity, search_mode)):
        return base, None, None  # spent before anything here started: not even the references
    int16_first = int16_first and precision == "float"
    float_bytes = int16_ready(float_bytes) if search_mode is not None and (precision == "int16" or int16_first) else float_bytes
    ranking_samples = list(calibration.samples[:SENSITIVITY_SAMPLES])
    ranking_refs = reference_outputs(export_module, ranking_samples)
    heldout_refs = reference_outputs(export_module, heldout) if heldout else []
    child = partial(
        run_isolated, run_in_child, float_bytes, calibration, ranking_samples, ranking_refs, list(heldout), heldout_refs,
        module=source_module, want_sensitivity=want_sensitivity, precision=precision,
        target=target, verbose=verbose,
        int8_io=io_dtype in (IODtype.INT8, IODtype.UINT8),
        measure_latency=measure_latency, budget=budget, int16_first=int16_first, weight_rounding=weight_rounding, part_scales=part_scales,
        rounding=rounding, int16_opcodes=int16_opcodes,
        progress=budget.on_progress,
        stage="sensitivity and mixed precision", backend="ai-edge-quantizer (flatbuffer backend)",
        hint="Run with --mixed-precision off (and without --sensitivity) to export the plain int8 model.",
        preload=("ai_edge_quantizer", "ai_edge_quantizer.calibrator"),
    )
    base_bytes = base.model.data if search_mode is not None and base is not None else None
    try:
        sensitivity, search, skipped = child(search_mode=search_mode, base_model_bytes=base_bytes)
    except QuantizationError as exc:
        if search_mode != DEFAULT_SEARCH:
            raise
        # the search nobody asked for failed: the int8 model asked for is kept, and the report says so
        base = replace(base, warnings=(*base.warnings, f"The default mixed-precision search could not run ({first_line(exc)}); the int8 model is kept."))
        if not want_sensitivity:
            return base, None, None
        sensitivity, search, skipped = child(search_mode=None, base_model_bytes=None)
    budget.extend(skipped)
    if search is None:
        return base, sensitivity, None
    quant, report = _kept_model(base, search, io_dtype, export_module)
    return quant, sensitivity, report


def _kept_model(base: Any, search: Any, io_dtype: Any, export_module: Any) -> tuple[Any, MixedPrecisionReport]:
    """The QuantizationResult to keep after a search: the mixed model, finished and checked, or
    ``base`` with the reason it was not kept."""
    from ..io_types import describe_io
    from ..selection import check_integer

    report = search.report
    if search.model_bytes is None:
        return base, report
    if report.mode == DEFAULT_SEARCH and not default_search_kept(report):
        # not asked for: a slower model that still misses is no better than the int8 one asked for
        return base, replace(report, reason=report.reason + "; not kept: the target was missed, so the plain int8 model is kept")
    if report.mode == DEFAULT_SEARCH and not report.met:
        gate = report.target.gate_sqnr_db()
        why = (f"it meets the export's own gate ({gate:g} dB), which the int8 model missed" if passes_gate(report)
               else f"both miss the export's own gate ({gate:g} dB), and it reads "
               f"{report.sqnr_db - report.int8_sqnr_db:.1f} dB above the int8 model; parity judges it on its own inputs")
        report = replace(report, reason=report.reason + f"; kept: {why}")
    try:
        final = _finished_mixed_model(search.model_bytes, io_dtype)
    except Exception as exc:  # a pass that cannot apply to the mixed model: keep the int8 one, say why
        return base, replace(report, reason=report.reason + f"; not kept: {first_line(exc)}", met=False)
    check = check_integer(final, export_module)
    report = replace(report, fully_integer=check.fully_integer)
    if not check.fully_integer and report.precision == "float":
        report = replace(report, reason=report.reason + "; the promoted operators run in float, so the model is not fully integer")
    warnings = tuple(w for w in base.warnings if "not fully integer" not in w)
    if not check.fully_integer:
        warnings += (_not_integer_warning(report, check),)
    quant = replace(
        base, model=final, backend="flatbuffer",
        recipe=recipe_of(report),
        reason=base.reason + f"; mixed precision: {report.reason}",
        fully_integer=check.fully_integer, integer_check=check, io=describe_io(final),
        sqnr_db=None, cosine=None, warnings=warnings, int16_headroom=search.int16_headroom,
    )
    if quant.size_bytes <= 0:
        raise QuantizationError("The mixed-precision model is empty.")
    return quant, report
