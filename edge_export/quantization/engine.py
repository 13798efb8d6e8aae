"""The selection engine: quantize_model runs the backends a request allows (candidates.py), keeps
one by the rules in selection.py, sets its I/O types and returns it with what was tried and why
(explanations.py)."""

from __future__ import annotations

from functools import partial
from typing import Any

from ..config import IODtype, QuantBackend, QuantizeMode
from ..errors import QuantizationError, UsageError
from ..flatbuffer import FlatbufferModel
from ..passes.flatbuffer import run_flatbuffer_passes, set_io_dtype_pass
from .budget import TimeBudget
from .candidates import BackendJob, run_backends
from .flatbuffer_recipes import rounding_applied
from .explanations import kept_reason, result_warnings
from .io_types import describe_io
from ..quantize_modes import mode_spec
from .request import QuantizationRequest
from .result import QuantizationResult
from .selection import BackendAttempt, check_integer

__all__ = ["backends_for", "quantize_model"]


def backends_for(mode: QuantizeMode | str, backend: QuantBackend) -> list[str]:
    """Backends to try, in order: the one asked for, or under ``auto`` the mode's own (the mode
    table's order: the cheaper flatbuffer recipe first). Raises UsageError for a backend that
    cannot do the mode."""
    spec = mode_spec(mode)
    if backend == QuantBackend.PT2E:
        if "pt2e" not in spec.backends:
            raise UsageError(
                f"--quant-backend pt2e cannot do --quantize {spec.name}: litert-torch's PT2E lowering "
                "has int8 weights and activations only.",
                "Use --quant-backend flatbuffer or auto.",
            )
        return ["pt2e"]
    if backend == QuantBackend.FLATBUFFER:
        return ["flatbuffer"]
    return list(spec.backends)


def quantize_model(
    module: Any,
    example_inputs: tuple,
    request: QuantizationRequest,
    *,
    float_model_bytes: bytes | None = None,
    budget: TimeBudget | None = None,
    pt2e_beside: Any = None,
) -> QuantizationResult:
    """Quantize ``module`` (eval mode, already wrapped for its final I/O layout) as ``request`` asks
    and return the flatbuffer with what was tried and why it was kept.

    ``float_model_bytes`` is the fp32 flatbuffer of the same module if the caller already has it
    (saves one conversion for the flatbuffer backend). With ``request.target``, ``auto`` stops at the
    first fully integer result that meets it (see selection.py); without, it measures every backend.
    Raises QuantizationError when every backend failed, UsageError for argument combinations that
    make no sense.

    Before any backend calibrates, the float model must convert, verify and run once in LiteRT
    (preconditions.py): when it does not, ConversionError (exit 3) in seconds. PT2E alone
    (``backend="pt2e"`` without ``float_model_bytes``) converts no float model and is not checked.
    ``budget`` (budget.TimeBudget) bounds the backends after the first model: once it is spent, the
    backends not yet run (or PT2E's unfinished calibration) are skipped and recorded in it.
    ``pt2e_beside`` (pt2e_beside.start_pt2e_beside, started by the caller before it converted the
    float model): PT2E's child process, used at PT2E's turn instead of running it here, and killed
    when PT2E is not needed.
    """
    from . import selection

    budget = budget if budget is not None else TimeBudget(None)
    _check_inputs(request, example_inputs)
    parity_set = request.parity_set
    names = backends_for(request.mode, request.backend)
    if "flatbuffer" in names or float_model_bytes is not None:
        float_model_bytes = _checked_float_model(module, example_inputs, float_model_bytes, parity_set[0], request)
    job = BackendJob(
        module, example_inputs, request, selection.reference_outputs(module, parity_set), float_model_bytes, budget,
        pt2e_beside,
    )
    skipped_before = len(budget.skipped)
    try:
        runs = run_backends(job, names)
    finally:
        if pt2e_beside is not None:
            pt2e_beside.cancel()  # not needed, or done: its child is gone either way
    best, reason = selection.choose_attempt(runs.attempts, request.require_full_integer)
    if best is None:
        raise QuantizationError(
            f"Every quantization backend failed for --quantize {request.mode.value}: {reason}.",
            "Run with --verbose for the libraries' output, or try --quantize dynamic-int8 or fp16.",
        )
    reason = kept_reason(job, runs, runs.attempts[best], reason, budget.skipped[skipped_before:])
    # a joined output stays float whatever io_dtype: one int8/uint8 tensor has one scale
    final = run_flatbuffer_passes(
        runs.products[best], [partial(set_io_dtype_pass, io_dtype=request.io_dtype)], origin="the quantized model"
    ).model
    return _result(job, final, runs.attempts, runs.attempts[best], reason, runs)


def _check_inputs(request: QuantizationRequest, example_inputs: tuple) -> None:
    if request.calibration.num_inputs != len(example_inputs):
        raise UsageError(
            f"The calibration samples have {request.calibration.num_inputs} inputs but the model takes "
            f"{len(example_inputs)}."
        )


def _checked_float_model(module, example_inputs, float_model_bytes, sample, request: QuantizationRequest) -> bytes:
    """The float flatbuffer (converted here when the caller has none), checked to verify and run:
    TraceError or ConversionError otherwise, before any backend calibrates (preconditions.py)."""
    from .preconditions import require_runnable_float_model

    if float_model_bytes is None:
        from ..conversion.litert import convert_module

        float_model_bytes = convert_module(module, tuple(example_inputs), strict=request.strict, verbose=request.verbose)
    require_runnable_float_model(float_model_bytes, sample)
    return float_model_bytes


def _result(
    job: BackendJob, final: FlatbufferModel, attempts: list[BackendAttempt], chosen: BackendAttempt, reason: str, runs: Any = None,
) -> QuantizationResult:
    flatbuffer = chosen.backend == "flatbuffer" and runs is not None  # what only the flatbuffer backend records
    check = check_integer(final, job.module)
    io_dtype: IODtype = job.request.io_dtype
    return QuantizationResult(
        model=final,
        mode=job.mode,
        backend=chosen.backend,
        recipe=chosen.recipe or "",
        observer=chosen.observer,
        attempts=tuple(attempts),
        reason=reason,
        fully_integer=check.fully_integer,
        integer_check=check,
        io=describe_io(final),
        io_dtype=io_dtype,
        calibration=job.calibration.summary(),
        sqnr_db=chosen.sqnr_db,
        cosine=chosen.cosine,
        warnings=result_warnings(job, check, chosen.backend, final),
        weight_rounding=rounding_applied(job.mode, job.request.weight_rounding, job.float_model_bytes) if chosen.backend == "flatbuffer" else None,
        rounding=runs.rounding if flatbuffer else None,
        int16_headroom=runs.int16_headroom if flatbuffer else (),
    )
