"""The prose of a quantization result: why the chosen backend was kept (and the others not run),
and the warnings about what the model computes (synthetic calibration, float left in an int8
model, a float LSTM, clipped int32 biases)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import QuantBackend, QuantizeMode
from ..flatbuffer import FlatbufferModel
from .bias_saturation import saturated_biases
from ..quantize_modes import mode_spec
from .selection import BackendAttempt, IntegerCheck, ParityTarget

if TYPE_CHECKING:
    from .candidates import BackendJob, BackendRuns

__all__ = ["bias_warnings", "kept_reason", "not_lowered_reason", "result_warnings"]


def kept_reason(job: BackendJob, runs: BackendRuns, chosen: BackendAttempt, reason: str, skipped: list[str]) -> str:
    """Why ``chosen`` was kept: the selection's reason, or the reason the other backends did not run."""
    mode, spec, target = job.mode, mode_spec(job.mode), job.request.target
    if spec.sole_backend_reason is not None:
        reason = spec.sole_backend_reason
    elif job.request.backend == QuantBackend.AUTO and spec.first_success and len(runs.attempts) == 1:
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
        reason = not_lowered_reason(runs.not_lowered, chosen, target)
    if skipped:
        reason += f"; not tried within the time budget ({job.budget.seconds:g} s): " + ", ".join(skipped)
    return reason


def not_lowered_reason(not_lowered: Any, chosen: BackendAttempt, target: ParityTarget | None) -> str:
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


def result_warnings(job: BackendJob, check: IntegerCheck, backend: str, final: FlatbufferModel) -> tuple[str, ...]:
    """Every warning of the chosen model ``final`` (made by ``backend``; ``check``: its integer check)."""
    return (
        _calibration_warnings(job, check) + _float_lstm_warnings(check, job.mode, backend, final)
        + bias_warnings(final, job.calibration.real_data)
    )


def _float_lstm_warnings(check: IntegerCheck, mode: QuantizeMode, backend: str, final: FlatbufferModel) -> tuple[str, ...]:
    from .sequence_lstm_int8 import float_lstm_warnings

    return float_lstm_warnings(check, mode.value, str(getattr(backend, "value", backend)), tuple(final.op_counts))


def bias_warnings(model: FlatbufferModel, real_data: bool) -> tuple[str, ...]:
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


def _calibration_warnings(job: BackendJob, check: IntegerCheck) -> tuple[str, ...]:
    """Synthetic calibration data, and float left in a mode that promises a fully integer model."""
    warnings, spec = [], mode_spec(job.mode)
    if not job.calibration.real_data and spec.calibrates:
        warnings.append(
            "Activation ranges were calibrated on synthetic inputs, not real data: accuracy may be "
            "much worse than the parity numbers suggest. Pass --calibration-data."
        )
    if spec.promises_full_integer and not check.fully_integer:
        where = ", ".join(m or "the top-level forward()" for m in check.float_modules[:5]) or "unnamed ops"
        opcodes = ", ".join(dict.fromkeys(op.opcode for op in check.float_operators))
        computing = f"; operators computing in float: {opcodes}" if opcodes else ""
        warnings.append(
            f"The {spec.name} model is not fully integer: {len(check.float_tensors)} float tensor(s) and "
            f"{len(check.inner_quantize_ops)} inner QUANTIZE/DEQUANTIZE op(s) (in {where}){computing}."
        )
    return tuple(warnings)
