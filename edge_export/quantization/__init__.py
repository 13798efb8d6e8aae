"""Quantization: dynamic int8, full-integer int8 and int16x8, with two backends chosen by measurement.

    quantize_model(module, example_inputs, mode, calibration=...) -> QuantizationResult

Backends (``QuantBackend``): ``pt2e`` quantizes the exported PyTorch graph (pt2e.py); ``flatbuffer``
applies ai-edge-quantizer recipes to the converted float flatbuffer (flatbuffer_recipes.py);
``auto`` runs those that support the mode, the cheaper flatbuffer recipe first, and keeps one by
the rules in selection.py; it stops early when a result already meets the export's parity target
and is fully integer (``target``, a selection.ParityTarget), and for dynamic-int8 at the first that
works; PT2E's graph is simulated in PyTorch before it is lowered and not lowered when it cannot win
(and after its first 16 calibration samples, when they already show that, the rest is not run). The chosen
model's I/O types are then set (io_types.py) and it is checked for being fully integer, with every
float tensor and inner QUANTIZE/DEQUANTIZE mapped back to the PyTorch module it came from.
Calibration data loading and checking lives in calibration.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..config import InputSpec, IODtype, QuantBackend, QuantizeMode
from ..errors import EdgeExportError, QuantizationError, UsageError, first_line
from ..flatbuffer import FlatbufferModel
from ..processes.isolation import run_isolated
from ..passes.flatbuffer import (
    quantize_embedding_tables_pass,
    repair_signature_outputs_pass,
    run_flatbuffer_passes,
    set_io_dtype_pass,
    share_quantization_vectors_pass,
)
from ..output.serialize import json_field
from .budget import BudgetSection, TimeBudget, TimeBudgetSpent
from .calibration import DEFAULT_CALIBRATION_SAMPLES, DEFAULT_SYNTHETIC_SAMPLES, CalibrationSet, CalibrationSummary, load_calibration_data
from .synthetic_calibration import synthetic_calibration
from .flatbuffer_recipes import DEFAULT_FLATBUFFER_OBSERVER, FLATBUFFER_OBSERVERS, RECIPES
from .io_types import IOQuantInfo, describe_io, set_io_dtype
from .bias_saturation import SaturatedBias, saturated_biases
from .output_joins import JoinedOutput, joined_outputs
from .pt2e import DEFAULT_PT2E_OBSERVER, PT2E_OBSERVERS, pt2e_supports
from .selection import BackendAttempt, IntegerCheck, ParityTarget, check_integer, module_path_for

__all__ = [
    "DEFAULT_CALIBRATION_SAMPLES",
    "DEFAULT_SYNTHETIC_SAMPLES",
    "FLATBUFFER_OBSERVERS",
    "PARITY_SAMPLES",
    "PT2E_OBSERVERS",
    "BackendAttempt",
    "CalibrationSet",
    "IOQuantInfo",
    "InputSpec",
    "IntegerCheck",
    "ParityTarget",
    "QuantizationResult",
    "backends_for",
    "check_integer",
    "describe_io",
    "load_calibration_data",
    "module_path_for",
    "quantize_model",
    "set_io_dtype",
    "synthetic_calibration",
]

# Samples used to measure each backend's parity during selection (the first N calibration samples).
PARITY_SAMPLES = 16
_QUANTIZE_MODES = (QuantizeMode.DYNAMIC_INT8, QuantizeMode.INT8, QuantizeMode.INT16X8, QuantizeMode.INT4)


@dataclass(frozen=True)
class QuantizationResult:
    model: FlatbufferModel = field(repr=False)  # the chosen model, verified; its bytes are ``.data``
    mode: QuantizeMode
    backend: str  # "pt2e" | "flatbuffer"
    recipe: str  # ai-edge-quantizer recipe name, or the PT2E config used
    observer: str | None  # activation-range observer (None for dynamic-int8)
    attempts: tuple[BackendAttempt, ...]
    reason: str
    fully_integer: bool
    integer_check: IntegerCheck
    io: tuple[IOQuantInfo, ...]
    io_dtype: IODtype
    calibration: CalibrationSummary
    sqnr_db: float | None  # chosen model vs fp32 module, worst output, on calibration inputs
    cosine: float | None
    warnings: tuple[str, ...] = ()
    # --time-budget: the budget, the time used and what was not tried (set by the export, after mixed precision)
    time_budget: BudgetSection | None = json_field(default=None, omit_none=True)

    JSON_KEYS = (
        "mode", "backend", "recipe", "observer", "reason", "attempts", "fully_integer", "integer_check",
        "io_dtype", "io", "output_parts", "saturated_biases", "calibration", "calibration_parity", "size_bytes", "warnings",
        "time_budget",
    )

    @property
    def saturated_biases(self) -> tuple[SaturatedBias, ...]:
        """Operators whose integer bias was clipped at the int32 limits (bias_saturation.py)."""
        return saturated_biases(self.model)

    @property
    def output_parts(self) -> tuple[JoinedOutput, ...]:
        """Outputs joined in float from parts with their own scales (output_joins.py)."""
        return joined_outputs(self.model)

    @property
    def size_bytes(self) -> int:
        return self.model.size_bytes

    @property
    def calibrated_on_real_data(self) -> bool:
        return self.calibration.real_data

    @property
    def calibration_parity(self) -> CalibrationParity:
        return CalibrationParity(self.sqnr_db, self.cosine)


@dataclass(frozen=True)
class CalibrationParity:
    """The chosen model against the fp32 module on the calibration inputs (worst output)."""

    sqnr_db: float | None
    cosine: float | None


def backends_for(mode: QuantizeMode, backend: QuantBackend) -> list[str]:
    """Backends to try, in order. Raises UsageError for a backend that cannot do the mode."""
    if backend == QuantBackend.PT2E:
        if not pt2e_supports(mode):
            raise UsageError(
                f"--quant-backend pt2e cannot do --quantize {mode.value}: litert-torch's PT2E lowering "
                "has int8 weights and activations only.",
                "Use --quant-backend flatbuffer or auto.",
            )
        return ["pt2e"]
    if backend == QuantBackend.FLATBUFFER:
        return ["flatbuffer"]
    if mode == QuantizeMode.DYNAMIC_INT8:
        # Both backends emit the same dynamic-range kernels; parity differed by < 0.5 dB on the
        # models measured, and the flatbuffer recipe is 10-50x faster. PT2E is the fallback.
        return ["flatbuffer", "pt2e"]
    if mode == QuantizeMode.INT4:
        return ["flatbuffer"]  # only ai-edge-quantizer writes int4 weights
    # The flatbuffer recipe first: on the benchmark models it takes a fraction of PT2E's time (PT2E
    # exports, calibrates in PyTorch and lowers again), so a result that already meets the target
    # costs only that.
    return ["flatbuffer"] + (["pt2e"] if pt2e_supports(mode) else [])


# Modes where auto stops at the first backend that works instead of measuring all of them.
_FIRST_SUCCESS_MODES = (QuantizeMode.DYNAMIC_INT8,)


def _check_arguments(mode: QuantizeMode, io_dtype: IODtype, calibration: CalibrationSet, example_inputs) -> None:
    if mode not in _QUANTIZE_MODES:
        raise UsageError(
            f"quantize_model handles dynamic-int8, int8, int16x8 and int4, not {mode.value}.",
            "fp32 and fp16 are plain conversions (edge_export.conversion.litert).",
        )
    if io_dtype != IODtype.FLOAT32 and mode != QuantizeMode.INT8:
        raise UsageError(
            f"--io-dtype {io_dtype.value} applies to --quantize int8 only; {mode.value} models take and "
            "return float32.",
            "Drop --io-dtype, or use --quantize int8.",
        )
    if calibration.num_inputs != len(example_inputs):
        raise UsageError(
            f"The calibration samples have {calibration.num_inputs} inputs but the model takes "
            f"{len(example_inputs)}."
        )


def _pt2e_recipe_name(mode: QuantizeMode) -> str:
    kind = "dynamic" if mode == QuantizeMode.DYNAMIC_INT8 else "static"
    return f"pt2e_{kind}_per_channel_symmetric"


_CRASH_HINT = (
    "The crash is inside native code, not in your model: try the other --quant-backend (auto falls "
    "back by itself) or another --quantize mode."
)


def _checked_float_model(module, example_inputs, float_model_bytes, sample, strict: bool, verbose: bool) -> bytes:
    """The float flatbuffer (converted here when the caller has none), checked to verify and run:
    TraceError or ConversionError otherwise, before any backend calibrates (preconditions.py)."""
    from .preconditions import require_runnable_float_model

    if float_model_bytes is None:
        from ..conversion.litert import convert_module

        float_model_bytes = convert_module(module, tuple(example_inputs), strict=strict, verbose=verbose)
    require_runnable_float_model(float_model_bytes, sample)
    return float_model_bytes


def _pt2e_batch(budget: TimeBudget, index: int, total: int, *, stoppable: bool) -> None:
    """Before each PT2E calibration batch: progress, and a stop once the budget is spent (only when
    an earlier backend already made a model: the first model is always finished)."""
    if stoppable and budget.spent():
        raise TimeBudgetSpent(f"the rest of PT2E's calibration ({index} of {total} samples run, not lowered)")
    budget.step("Quantizing: PT2E calibration", index, total)


@dataclass(frozen=True)
class _BackendJob:
    """What every backend of one quantize_model call works from."""

    module: Any
    example_inputs: tuple
    mode: QuantizeMode
    backend: QuantBackend
    calibration: CalibrationSet
    parity_set: list
    refs: Any  # the float module's outputs on parity_set
    float_model_bytes: bytes | None
    pt2e_observer: str
    flatbuffer_observer: str
    strict: bool
    verbose: bool
    budget: TimeBudget
    beside: Any = None  # pt2e_beside.PT2EBeside: PT2E already forked (None: run here, when its turn comes)
    target: ParityTarget | None = None  # the export's parity target (selection.misses_target_anyway)
    part_scales: bool = True  # an output joined from parts of different ranges keeps their scales (output_joins.py)

    def recipe_and_observer(self, name: str) -> tuple[str, str | None]:
        recipe = RECIPES[self.mode] if name == "flatbuffer" else _pt2e_recipe_name(self.mode)
        if not self.mode.needs_calibration:
            return recipe, None
        return recipe, self.flatbuffer_observer if name == "flatbuffer" else self.pt2e_observer


@dataclass
class _BackendRuns:
    """What the backends made, one attempt (and its model, None when it failed) per backend run."""

    attempts: list[BackendAttempt] = field(default_factory=list)
    products: list[FlatbufferModel | None] = field(default_factory=list)
    screened_out: list[str] = field(default_factory=list)  # not run: an earlier result met the target
    not_lowered: Any = None  # selection.NotLowered: PT2E simulated, found unable to change the outcome

    @property
    def have_model(self) -> bool:
        return any(a.ok for a in self.attempts)


def quantize_model(
    module: Any,
    example_inputs: tuple,
    mode: QuantizeMode,
    *,
    calibration: CalibrationSet,
    backend: QuantBackend = QuantBackend.AUTO,
    io_dtype: IODtype = IODtype.FLOAT32,
    require_full_integer: bool = False,
    strict: bool = False,
    verbose: bool = False,
    float_model_bytes: bytes | None = None,
    pt2e_observer: str = DEFAULT_PT2E_OBSERVER,
    flatbuffer_observer: str = DEFAULT_FLATBUFFER_OBSERVER,
    parity_samples: int = PARITY_SAMPLES,
    target: ParityTarget | None = None,
    budget: TimeBudget | None = None,
    pt2e_beside: Any = None,
    part_scales: bool = True,
) -> QuantizationResult:
    """Quantize ``module`` (eval mode, already wrapped for its final I/O layout) and return the
    flatbuffer with what was tried and why it was kept.

    ``float_model_bytes`` is the fp32 flatbuffer of the same module if the caller already has it
    (saves one conversion for the flatbuffer backend). With ``target``, ``auto`` stops at the first
    fully integer result that meets it (see selection.py); without, it measures every backend. Raises QuantizationError when every backend
    failed, UsageError for argument combinations that make no sense.

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

    mode, backend, io_dtype = QuantizeMode(mode), QuantBackend(backend), IODtype(io_dtype)
    budget = budget if budget is not None else TimeBudget(None)
    _check_arguments(mode, io_dtype, calibration, example_inputs)
    parity_set = calibration.samples[: max(1, parity_samples)]
    names = backends_for(mode, backend)
    if "flatbuffer" in names or float_model_bytes is not None:
        float_model_bytes = _checked_float_model(module, example_inputs, float_model_bytes, parity_set[0], strict, verbose)
    job = _BackendJob(
        module, example_inputs, mode, backend, calibration, parity_set, selection.reference_outputs(module, parity_set),
        float_model_bytes, pt2e_observer, flatbuffer_observer, strict, verbose, budget, pt2e_beside, target,
        # a joined output stays float whatever io_dtype: one int8/uint8 tensor has one scale
        part_scales=part_scales,
    )
    skipped_before = len(budget.skipped)
    try:
        runs = _run_backends(job, names, target)
    finally:
        if pt2e_beside is not None:
            pt2e_beside.cancel()  # not needed, or done: its child is gone either way
    best, reason = selection.choose_attempt(runs.attempts, require_full_integer)
    if best is None:
        raise QuantizationError(
            f"Every quantization backend failed for --quantize {mode.value}: {reason}.",
            "Run with --verbose for the libraries' output, or try --quantize dynamic-int8 or fp16.",
        )
    reason = _kept_reason(job, runs, runs.attempts[best], reason, target, budget.skipped[skipped_before:])
    final = run_flatbuffer_passes(
        runs.products[best], [partial(set_io_dtype_pass, io_dtype=io_dtype)], origin="the quantized model"
    ).model
    return _result(job, final, runs.attempts, runs.attempts[best], reason, io_dtype)


def _run_backends(job: _BackendJob, names: list[str], target: ParityTarget | None) -> _BackendRuns:
    """Run the backends in order, skipping those an earlier result or the time budget makes moot."""
    runs = _BackendRuns()
    for step, name in enumerate(names):
        if job.mode in _FIRST_SUCCESS_MODES and runs.have_model:
            break
        if target is not None and any(target.met_by(a) for a in runs.attempts):
            runs.screened_out.append(name)
            continue
        if runs.have_model and not job.budget.allows(f"the {name} backend ({job.mode.value})"):
            continue
        job.budget.step(f"Quantizing: the {name} backend", step, len(names))
        _run_backend(job, name, runs)
    return runs


def _run_backend(job: _BackendJob, name: str, runs: _BackendRuns) -> None:
    """One backend: its model and measured attempt added to ``runs``, or its failure (which ends the
    call unless the backend is auto), or nothing when it was stopped or not lowered."""
    start = time.perf_counter()
    recipe, observer = job.recipe_and_observer(name)
    try:
        data = _pt2e_model(job, runs) if name == "pt2e" else _flatbuffer_model(job)
        if data is None:
            return
        candidate, sqnr, cosine = _measured_candidate(job, name, data)
        fully_integer = check_integer(candidate).fully_integer
    except TimeBudgetSpent as exc:  # PT2E stopped calibrating: the model kept is an earlier backend's
        job.budget.skip(job.budget.noted(str(exc)))
        return
    except EdgeExportError as exc:
        if job.backend != QuantBackend.AUTO:
            _raise_backend_failure(name, exc)
        runs.attempts.append(
            BackendAttempt(
                backend=name, ok=False, error=first_line(exc), seconds=time.perf_counter() - start,
                recipe=recipe, observer=observer,
            )
        )
        runs.products.append(None)
        return
    runs.attempts.append(
        BackendAttempt(
            backend=name, ok=True, fully_integer=fully_integer, sqnr_db=round(sqnr, 3),
            cosine=round(cosine, 6), seconds=time.perf_counter() - start, recipe=recipe,
            observer=observer, size_bytes=candidate.size_bytes,
        )
    )
    runs.products.append(candidate)


class PT2ECannotWin(QuantizationError):
    """Raised part-way through PT2E's calibration when its ranges so far, simulated, cannot beat a
    result already measured: the rest of it is not run."""

    def __init__(self, simulated_db: float, settled: BackendAttempt, samples_seen: int, total: int, why: str = "below") -> None:
        super().__init__("PT2E cannot beat an earlier result")
        self.simulated_db, self.settled, self.samples_seen, self.total = simulated_db, settled, samples_seen, total
        self.why = why


def _pt2e_model(job: _BackendJob, runs: _BackendRuns) -> bytes | None:
    """PT2E's quantized flatbuffer; None when auto's simulation shows it cannot beat an earlier
    attempt (it is then not lowered, and ``runs.not_lowered`` says why): looked at once after
    EARLY_LOOK_SAMPLES calibration samples, and again after all of them."""
    from . import pt2e, selection

    compete = job.backend == QuantBackend.AUTO and bool(runs.attempts)
    if job.beside is not None:
        return _pt2e_model_beside(job, runs, compete)
    try:
        converted, quantizer = pt2e.calibrate_pt2e(
            job.module, job.example_inputs, job.mode, job.calibration, observer=job.pt2e_observer, strict=job.strict,
            verbose=job.verbose, each_batch=partial(_pt2e_batch, job.budget, stoppable=runs.have_model),
            after_batch=partial(_early_look, job, runs.attempts) if compete else None,
        )
    except PT2ECannotWin as stop:
        runs.not_lowered = selection.NotLowered(stop.simulated_db, stop.settled, f"{stop.samples_seen} of {stop.total}", stop.why)
        return None
    if compete:
        simulated = pt2e.simulated_sqnr(converted, job.parity_set, job.refs)
        settled = None if simulated is None else selection.pt2e_settled(simulated, runs.attempts, selection.LOWERING_MARGIN_DB, job.target)
        if settled is not None:
            runs.not_lowered = selection.NotLowered(simulated, settled[0], None, settled[1])
            return None
    return pt2e.lower_pt2e(converted, quantizer, job.example_inputs, strict=job.strict, verbose=job.verbose)


def _pt2e_model_beside(job: _BackendJob, runs: _BackendRuns, compete: bool) -> bytes | None:
    """_pt2e_model's result, from the child pt2e_beside started: the same decisions on the same
    simulated SQNRs it reports."""
    from .selection import NotLowered

    outcome = job.beside.model(runs.attempts, job.budget, job.target, compete=compete, stoppable=runs.have_model)
    if isinstance(outcome, NotLowered):
        runs.not_lowered = outcome
        return None
    return outcome


def _early_look(job: _BackendJob, attempts: list[BackendAttempt], prepared: Any, done: int, total: int) -> None:
    """After EARLY_LOOK_SAMPLES of PT2E's calibration samples (when at least as many are left), its
    ranges so far are simulated on a few parity samples: PT2ECannotWin when they read more than
    EARLY_LOOK_MARGIN_DB below a fully integer result already measured (the simulated SQNR moved by at
    most 0.5 dB from there to the end of the calibration on the models measured)."""
    from . import pt2e, selection

    simulated = pt2e.early_look_sqnr(prepared, done, total, job.parity_set, job.refs)
    settled = None if simulated is None else selection.pt2e_settled(simulated, attempts, selection.EARLY_LOOK_MARGIN_DB, job.target)
    if settled is not None:
        raise PT2ECannotWin(simulated, settled[0], done, total, settled[1])


def _flatbuffer_model(job: _BackendJob) -> bytes:
    from . import flatbuffer_recipes

    # Calibration and transformations run LiteRT and ai-edge-quantizer's native code: in a
    # child process, so that a crash (int16x8 on a ViT aborted) is a failed backend.
    return run_isolated(
        flatbuffer_recipes.quantize_flatbuffer, job.float_model_bytes, job.mode, job.calibration,
        observer=job.flatbuffer_observer, verbose=job.verbose, part_scales=job.part_scales,
        stage=f"{job.mode.value} quantization", backend="ai-edge-quantizer (flatbuffer backend)",
        hint=_CRASH_HINT, preload=("ai_edge_quantizer", "ai_edge_quantizer.calibrator"),
    )


def _measured_candidate(job: _BackendJob, name: str, data: bytes) -> tuple[FlatbufferModel, float, float]:
    """A backend's bytes verified into a model (an edge: once, here), and its parity on the
    calibration inputs (SQNR, cosine), measured in a child process."""
    from . import selection

    candidate = run_flatbuffer_passes(
        data, [repair_signature_outputs_pass, quantize_embedding_tables_pass, share_quantization_vectors_pass],
        origin=f"the {name} {job.mode.value} candidate",
    ).model
    sqnr, cosine = run_isolated(
        selection.measure_parity, candidate, job.parity_set, job.refs,
        stage=f"parity run of the {name} {job.mode.value} candidate", backend="the LiteRT interpreter",
        hint=_CRASH_HINT,
    )
    return candidate, sqnr, cosine


def _raise_backend_failure(name: str, exc: EdgeExportError) -> None:
    """A backend the user chose failed: its own error, or a QuantizationError naming the other."""
    if isinstance(exc, (QuantizationError, UsageError)):
        raise exc
    other = "pt2e" if name == "flatbuffer" else "flatbuffer"
    raise QuantizationError(
        f"The {name} quantization backend did not produce a usable model: {first_line(exc)}",
        f"Try --quant-backend {other}, or auto (which falls back by itself).",
    ) from exc


def _kept_reason(
    job: _BackendJob, runs: _BackendRuns, chosen: BackendAttempt, reason: str, target: ParityTarget | None,
    skipped: list[str],
) -> str:
    """Why ``chosen`` was kept: the selection's reason, or the reason the other backends did not run."""
    mode = job.mode
    if mode == QuantizeMode.INT4:
        reason = "int4 weights come from ai-edge-quantizer only (the flatbuffer backend)"
    elif job.backend == QuantBackend.AUTO and mode in _FIRST_SUCCESS_MODES and len(runs.attempts) == 1:
        reason = (
            f"{chosen.backend} succeeded first; for {mode.value} both backends give the same "
            "dynamic-range kernels, so the other was not tried"
        )
    elif runs.screened_out and target is not None:
        reason = (
            f"{chosen.backend} ({chosen.sqnr_db:.1f} dB, fully integer) already meets the parity target "
            f"({target.describe()}, on the calibration inputs), so {', '.join(runs.screened_out)} was not tried "
            f"(--quant-backend {runs.screened_out[0]} runs it)"
        )
    elif runs.not_lowered is not None and len(runs.attempts) == 1:
        reason = _not_lowered_reason(runs.not_lowered, chosen, target)
    if skipped:
        reason += f"; not tried within the time budget ({job.budget.seconds:g} s): " + ", ".join(skipped)
    return reason


def _not_lowered_reason(not_lowered: Any, chosen: BackendAttempt, target: ParityTarget | None) -> str:
    from . import selection

    backend, simulated, part_way, why = not_lowered.backend, not_lowered.simulated_db, not_lowered.part_way, not_lowered.why
    if part_way is None:
        seen, margin, cut = "", selection.LOWERING_MARGIN_DB, "it was not lowered to a model"
    else:
        seen, margin = f" after {part_way} calibration samples", selection.EARLY_LOOK_MARGIN_DB
        cut = "the rest of its calibration was not run and it was not lowered to a model"
    if why == "target" and target is not None and target.min_sqnr_db is not None:
        judged = (
            f"less than {selection.FULL_INTEGER_PREFERENCE_DB:g} dB above it and more than {margin:g} dB below the "
            f"parity target ({target.min_sqnr_db:g} dB): neither model meets the target and PT2E could not change that"
        )
    else:
        judged = f"more than {margin:g} dB below"
    return (
        f"kept {chosen.backend} ({chosen.sqnr_db:.1f} dB, fully integer): {backend}'s quantized graph{seen}, "
        f"simulated in PyTorch, read {simulated:.1f} dB on the calibration inputs, {judged}, so {cut} "
        f"(--quant-backend {backend} runs it)"
    )


def _result(
    job: _BackendJob, final: FlatbufferModel, attempts: list[BackendAttempt], chosen: BackendAttempt, reason: str,
    io_dtype: IODtype,
) -> QuantizationResult:
    check = check_integer(final, job.module)
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
        warnings=_warnings(job, check) + _float_lstm_warnings(check, job.mode, chosen.backend, final) + _bias_warnings(final, job.calibration.real_data),
    )


def _float_lstm_warnings(check: IntegerCheck, mode: QuantizeMode, backend: str, final: FlatbufferModel) -> tuple[str, ...]:
    from .sequence_lstm_int8 import float_lstm_warnings

    return float_lstm_warnings(check, mode.value, str(getattr(backend, "value", backend)), tuple(final.op_counts))


def _bias_warnings(model: FlatbufferModel, real_data: bool) -> tuple[str, ...]:
    """A clipped int32 bias, with what helps: a trained network with real calibration data gets there
    through near-zero weight channels (EfficientNet-Lite0's depthwise convolutions: 28 operators), not
    vanishing activations, so asking it for real data again would send the user in a circle."""
    clipped = saturated_biases(model)
    if not clipped:
        return ()
    from ..output.text_safety import show_unsafe

    named = "; ".join(f"#{b.operator} {b.opcode} ({show_unsafe(b.tensor)}): {b.saturated} of {b.channels} channels" for b in clipped[:5])
    helps = ("these layers in float (--min-sqnr N raises the limiting ones on cpu), or retraining with "
             "those channels pruned or their biases folded into the next layer" if real_data else
             "real calibration data (--calibration-data) or a network whose activations do not vanish "
             "(trained, or BatchNorm statistics measured) avoids it, as do these layers in float where the "
             "target runs float operators")
    return (
        f"The integer bias of {len(clipped)} operator(s) is clipped at the int32 limit (bias / (input scale x "
        f"weight scale) overflows: tiny input activations, or channels whose weights are all near zero, "
        f"with a large bias), so their outputs are off by the bias cut: {named}. 16-bit activations make "
        f"it worse (a 256x finer input scale); {helps}.",
    )


def _warnings(job: _BackendJob, check: IntegerCheck) -> tuple[str, ...]:
    warnings = []
    if not job.calibration.real_data and job.mode.needs_calibration:
        warnings.append(
            "Activation ranges were calibrated on synthetic inputs, not real data: accuracy may be "
            "much worse than the parity numbers suggest. Pass --calibration-data."
        )
    if job.mode == QuantizeMode.INT8 and not check.fully_integer:
        where = ", ".join(m or "the top-level forward()" for m in check.float_modules[:5]) or "unnamed ops"
        opcodes = ", ".join(dict.fromkeys(op.opcode for op in check.float_operators))
        computing = f"; operators computing in float: {opcodes}" if opcodes else ""
        warnings.append(
            f"The int8 model is not fully integer: {len(check.float_tensors)} float tensor(s) and "
            f"{len(check.inner_quantize_ops)} inner QUANTIZE/DEQUANTIZE op(s) (in {where}){computing}."
        )
    return tuple(warnings)
