"""Each backend's candidate model: the backends run in order (``run_backends``), each one's model
made (the flatbuffer recipe in a child process, PT2E here or in the child pt2e_beside forked) and
its parity measured. PT2E competing in ``auto`` is simulated in PyTorch first and not lowered when
it cannot win, looked at once part-way through its calibration (the early look) and again at its
end; selection.py holds the rules, this module applies them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..config import QuantBackend, QuantizeMode
from ..errors import EdgeExportError, QuantizationError, UsageError, first_line
from ..flatbuffer import FlatbufferModel
from ..passes.flatbuffer import quantize_embedding_tables_pass, repair_signature_outputs_pass, run_flatbuffer_passes, share_quantization_vectors_pass
from ..processes.isolation import run_isolated
from .budget import TimeBudget, TimeBudgetSpent
from .calibration import CalibrationSet
from ..quantize_modes import mode_spec
from .request import QuantizationRequest
from .selection import BackendAttempt, check_integer

__all__ = ["BackendJob", "BackendRuns", "PT2ECannotWin", "run_backends"]

_CRASH_HINT = (
    "The crash is inside native code, not in your model: try the other --quant-backend (auto falls "
    "back by itself) or another --quantize mode."
)


def _pt2e_batch(budget: TimeBudget, index: int, total: int, *, stoppable: bool) -> None:
    """Before each PT2E calibration batch: progress, and a stop once the budget is spent (only when
    an earlier backend already made a model: the first model is always finished)."""
    if stoppable and budget.spent():
        raise TimeBudgetSpent(f"the rest of PT2E's calibration ({index} of {total} samples run, not lowered)")
    budget.step("Quantizing: PT2E calibration", index, total)


@dataclass(frozen=True)
class BackendJob:
    """What every backend of one quantize_model call works from."""

    module: Any
    example_inputs: tuple
    request: QuantizationRequest
    refs: Any  # the float module's outputs on the request's parity set
    float_model_bytes: bytes | None
    budget: TimeBudget
    beside: Any = None  # pt2e_beside.PT2EBeside: PT2E already forked (None: run here, when its turn comes)

    @property
    def mode(self) -> QuantizeMode:
        return self.request.mode

    @property
    def calibration(self) -> CalibrationSet:
        return self.request.calibration

    @property
    def parity_set(self) -> list:
        return self.request.parity_set

    def recipe_and_observer(self, name: str) -> tuple[str | None, str | None]:
        spec = mode_spec(self.mode)
        recipe = spec.flatbuffer_recipe if name == "flatbuffer" else spec.pt2e_recipe
        if not spec.calibrates:
            return recipe, None
        return recipe, self.request.flatbuffer_observer if name == "flatbuffer" else self.request.pt2e_observer


@dataclass
class BackendRuns:
    """What the backends made, one attempt (and its model, None when it failed) per backend run."""

    attempts: list[BackendAttempt] = field(default_factory=list)
    products: list[FlatbufferModel | None] = field(default_factory=list)
    screened_out: list[str] = field(default_factory=list)  # not run: an earlier result met the target
    not_lowered: Any = None  # selection.NotLowered: PT2E simulated, found unable to change the outcome
    rounding: Any = None  # the flatbuffer backend's WeightRounding (None: not run, or nearest rounding)
    int16_headroom: tuple = ()  # the flatbuffer backend's int16 ranges widened (int16_headroom.RangeHeadroom)

    @property
    def have_model(self) -> bool:
        return any(a.ok for a in self.attempts)


def run_backends(job: BackendJob, names: list[str]) -> BackendRuns:
    """Run the backends in order, skipping those an earlier result or the time budget makes moot."""
    runs, target = BackendRuns(), job.request.target
    for step, name in enumerate(names):
        if mode_spec(job.mode).first_success and runs.have_model:
            break
        if target is not None and any(target.met_by(a) for a in runs.attempts):
            runs.screened_out.append(name)
            continue
        if runs.have_model and not job.budget.allows(f"the {name} backend ({job.mode.value})"):
            continue
        job.budget.step(f"Quantizing: the {name} backend", step, len(names))
        _run_backend(job, name, runs)
    return runs


def _run_backend(job: BackendJob, name: str, runs: BackendRuns) -> None:
    """One backend: its model and measured attempt added to ``runs``, or its failure (which ends the
    call unless the backend is auto), or nothing when it was stopped or not lowered."""
    start = time.perf_counter()
    recipe, observer = job.recipe_and_observer(name)
    try:
        data = _pt2e_model(job, runs) if name == "pt2e" else _flatbuffer_model(job, runs)
        if data is None:
            return
        candidate, sqnr, cosine = _measured_candidate(job, name, data)
        fully_integer = check_integer(candidate).fully_integer
    except TimeBudgetSpent as exc:  # PT2E stopped calibrating: the model kept is an earlier backend's
        job.budget.skip(job.budget.noted(str(exc)))
        return
    except EdgeExportError as exc:
        if job.request.backend != QuantBackend.AUTO:
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


def _pt2e_model(job: BackendJob, runs: BackendRuns) -> bytes | None:
    """PT2E's quantized flatbuffer; None when auto's simulation shows it cannot beat an earlier
    attempt (it is then not lowered, and ``runs.not_lowered`` says why): looked at once after
    EARLY_LOOK_SAMPLES calibration samples, and again after all of them."""
    from . import pt2e, selection

    compete = job.request.backend == QuantBackend.AUTO and bool(runs.attempts)
    if job.beside is not None:
        return _pt2e_model_beside(job, runs, compete)
    try:
        converted, quantizer = pt2e.calibrate_pt2e(
            job.module, job.example_inputs, job.mode, job.calibration, observer=job.request.pt2e_observer, strict=job.request.strict,
            verbose=job.request.verbose, each_batch=partial(_pt2e_batch, job.budget, stoppable=runs.have_model),
            after_batch=partial(_early_look, job, runs.attempts) if compete else None,
        )
    except PT2ECannotWin as stop:
        runs.not_lowered = selection.NotLowered(stop.simulated_db, stop.settled, f"{stop.samples_seen} of {stop.total}", stop.why)
        return None
    if compete:
        simulated = pt2e.simulated_sqnr(converted, job.parity_set, job.refs)
        settled = None if simulated is None else selection.pt2e_settled(simulated, runs.attempts, selection.LOWERING_MARGIN_DB, job.request.target)
        if settled is not None:
            runs.not_lowered = selection.NotLowered(simulated, settled[0], None, settled[1])
            return None
    return pt2e.lower_pt2e(converted, quantizer, job.example_inputs, strict=job.request.strict, verbose=job.request.verbose)


def _pt2e_model_beside(job: BackendJob, runs: BackendRuns, compete: bool) -> bytes | None:
    """_pt2e_model's result, from the child pt2e_beside started: the same decisions on the same
    simulated SQNRs it reports."""
    from .selection import NotLowered

    outcome = job.beside.model(runs.attempts, job.budget, job.request.target, compete=compete, stoppable=runs.have_model)
    if isinstance(outcome, NotLowered):
        runs.not_lowered = outcome
        return None
    return outcome


def _early_look(job: BackendJob, attempts: list[BackendAttempt], prepared: Any, done: int, total: int) -> None:
    """After EARLY_LOOK_SAMPLES of PT2E's calibration samples (when at least as many are left), its
    ranges so far are simulated on a few parity samples: PT2ECannotWin when they read more than
    EARLY_LOOK_MARGIN_DB below a fully integer result already measured (the simulated SQNR moved by at
    most 0.5 dB from there to the end of the calibration on the models measured)."""
    from . import pt2e, selection

    simulated = pt2e.early_look_sqnr(prepared, done, total, job.parity_set, job.refs)
    settled = None if simulated is None else selection.pt2e_settled(simulated, attempts, selection.EARLY_LOOK_MARGIN_DB, job.request.target)
    if settled is not None:
        raise PT2ECannotWin(simulated, settled[0], done, total, settled[1])


def _flatbuffer_model(job: BackendJob, runs: BackendRuns) -> bytes:
    from . import flatbuffer_recipes

    # Calibration and transformations run LiteRT and ai-edge-quantizer's native code: in a
    # child process, so that a crash (int16x8 on a ViT aborted) is a failed backend.
    made, runs.rounding = run_isolated(
        flatbuffer_recipes.quantize_flatbuffer_and_rounding, job.float_model_bytes, job.mode, job.calibration,
        observer=job.request.flatbuffer_observer, verbose=job.request.verbose, part_scales=job.request.part_scales,
        weight_rounding=job.request.weight_rounding,
        stage=f"{job.mode.value} quantization", backend="ai-edge-quantizer (flatbuffer backend)",
        hint=_CRASH_HINT, preload=("ai_edge_quantizer", "ai_edge_quantizer.calibrator"),
    )
    runs.int16_headroom = made.int16_headroom
    return made.data


def _measured_candidate(job: BackendJob, name: str, data: bytes) -> tuple[FlatbufferModel, float, float]:
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

