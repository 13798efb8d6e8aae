"""Flatbuffer backend: ai-edge-quantizer recipes applied to the converted float flatbuffer.

It sees the model after litert-torch lowered it, so it quantizes every op the LiteRT kernels can run
in integer (LayerNorm, softmax and batch matmul included), which PT2E's PyTorch-level annotator
leaves in float. Recipes per mode (the recipe names are in the mode table, modes.py):

    int8          static_wi8_ai8      per-channel int8 weights, int8 activations, int32 bias
    int16x8       static_wi8_ai16     int8 weights, int16 activations
    dynamic-int8  dynamic_wi8_afp32   int8 weights, float activations quantized at run time
    int4          dynamic_wi4_afp32   channelwise int4 weights (min/max), float activations quantized
                                      at run time. Measured alternatives (docs/BENCHMARKS.md section 15):
                                      weight-only int4 (same SQNR, a DEQUANTIZE per weight, larger),
                                      32-blockwise (no gain on the transformer's linears and it skips
                                      convolutions whose input channels are not a multiple of 32),
                                      the MSE and OCTAV weight algorithms (0.3-4 dB worse or within 0.5 dB)

Activation ranges ("observers", ``FLATBUFFER_OBSERVERS``): ai-edge-quantizer by default keeps a
moving average (factor 0.95) of each sample's min/max, so early samples weigh most and late
outliers are damped; ``minmax`` keeps the absolute extremes over all samples; ``percentile``
clips each tensor's range to the 0.01th/99.99th percentile of the values seen, which ignores rare
outliers at the cost of clipping them; ``mse`` shrinks each tensor's min/max range by the factor
that minimizes the mean squared quantization error of the values seen (clipping error against
rounding error, the search PT2E's histogram observer approximates; ``mse_range``).

We default to ``minmax``: the moving average clips hard and gets worse with more samples (digits CNN
int8 logits SQNR 18.1 dB vs 40.9 dB with min-max at 128 samples; 2-layer encoder 12.1 vs 30.8 dB
at 32), and the percentile gave no gain on the models measured
(benchmarks/quantization_calibration.py).

Every calibrated activation range is widened to at least ``MIN_SCALE`` per quantization step (the
float32 epsilon PyTorch's observers also floor their scales at). ai-edge-quantizer has no floor: a
tensor whose calibrated values are all (nearly) zero, such as a dead or vanishing layer in a randomly
initialised or badly calibrated network, got a scale of ~1e-9, and LiteRT then refuses the whole
model ("no_integer_overflow_from_quantization": a fused RELU6's bound 6/scale no longer fits int32).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import QuantizeMode
from ..errors import QuantizationError, first_line
from ..flatbuffer import FlatbufferModel, read_flatbuffer
from ..processes.library_output import quiet_libraries
from .calibration import CalibrationSet
from .constant_matmul_operands import quantize_constant_operands_per_tensor
from ..quantize_modes import mode_spec
from .discontinuous import keep_feeders_in_float
from .output_joins import find_output_joins, keep_output_joins_in_float
from .int16_headroom import RangeHeadroom, int16_only_tensors, int16_operators, with_headroom
from .sigmoid_ranges import cut_sigmoid_input_ranges
from .sequence_lstm_int8 import quantize_sequence_lstm_model, takes_sequence_lstm_model

__all__ = [
    "DEFAULT_FLATBUFFER_OBSERVER",
    "FLATBUFFER_OBSERVERS",
    "MIN_SCALE",
    "PERCENTILE",
    "floor_ranges",
    "mse_range",
    "QuantizedFlatbuffer",
    "quantize_flatbuffer",
    "quantize_flatbuffer_and_rounding",
    "quantized_flatbuffer",
    "recipe_name",
    "rounding_of",
]

FLATBUFFER_OBSERVERS = ("moving_average", "minmax", "percentile", "mse")
DEFAULT_FLATBUFFER_OBSERVER = "minmax"
PERCENTILE = 99.99
# Smallest activation scale kept (float32 epsilon, PyTorch observers' default eps).
MIN_SCALE = float(np.finfo(np.float32).eps)
# Values kept per tensor per sample for the percentile: bounds memory on large activations.
_PERCENTILE_SUBSAMPLE = 20000


def recipe_name(mode: QuantizeMode) -> str | None:
    """ai-edge-quantizer's recipe for ``mode`` (the mode table's); None when it has none."""
    return mode_spec(mode).flatbuffer_recipe


def _levels(mode: QuantizeMode | None) -> int | None:
    """Quantization steps across an activation's range (int8 asymmetric 255, int16 symmetric 65535);
    None for a mode whose activations stay float."""
    bits = mode_spec(mode).activation_bits if mode is not None else None
    return 2**bits - 1 if bits else None


def _recipe(mode: QuantizeMode) -> Any:
    from ai_edge_quantizer import recipe

    return getattr(recipe, recipe_name(mode))()


def _signature_data(float_model: FlatbufferModel, calibration: CalibrationSet) -> dict[str, list[dict]]:
    """ai-edge-quantizer's calibration format: {signature: [{input name: array}, ...]}."""
    from ..runtime.interpreter import Resolver, TFLiteRunner

    runner = TFLiteRunner(float_model, resolver=Resolver.BUILTIN)
    sigs = runner.interpreter.get_signature_list()
    key = next(iter(sigs)) if sigs else "serving_default"
    names = [t.name for t in runner.inputs]
    if len(names) != calibration.num_inputs:
        raise QuantizationError(
            f"The float model has {len(names)} inputs but the calibration samples have "
            f"{calibration.num_inputs}.",
            "Check that the calibration data matches --input-shape.",
        )
    # The converter narrows int64/float64 inputs to 32 bits: feed the samples in the model's dtypes.
    dtypes = [t.dtype for t in runner.inputs]
    return {
        key: [{n: np.asarray(a).astype(d, copy=False) for n, a, d in zip(names, sample, dtypes)} for sample in calibration.samples]
    }


# Factors the MSE search shrinks each end of the min/max range by (1.0: the end itself).
_MSE_FACTORS = np.geomspace(1.0, 0.05, 48)
# Most quantization steps the running-sum evaluation (``_SortedValues``) is used for.
_SORTED_MSE_MAX_LEVELS = 255


class _SortedValues:
    """Sorted values with running sums of v and v**2, so the quantization error of any range costs
    one binary search per quantization step instead of a pass over every value: each step's bin
    contributes sum((v - k*scale)**2) = S2 - 2*k*scale*S1 + n*(k*scale)**2 over the values that
    round to it. The sums are kept in extended precision (np.longdouble); the subtraction still
    cancels about (range / step)**2 of its digits, so this is used for int8 and int4 only (within
    1e-10 of ``_quantization_mse`` there, far below the search's 1e-9 tie margin; at int16 it
    would drift to 1e-7 and the per-value definition is kept).
    Values within one rounding error of a half-way point may go to either neighbouring step."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.sort(np.asarray(values, dtype=np.float64).ravel())
        wide = self.values.astype(np.longdouble)
        self.sum1 = np.concatenate([np.zeros(1, np.longdouble), np.cumsum(wide)])
        self.sum2 = np.concatenate([np.zeros(1, np.longdouble), np.cumsum(wide * wide)])

    def quantization_mse(self, lo: float, hi: float, levels: int) -> float:
        n = self.values.size
        scale = (hi - lo) / levels
        if scale <= 0:
            return float(self.sum2[-1] / n)
        zero_point = float(np.round(-lo / scale))
        # Integer steps k = round(v / scale), clipped to [-zero_point, levels - zero_point]; a value
        # goes to step k when it lies below the half-way point to k + 1.
        steps = np.arange(levels + 1, dtype=np.float64) - zero_point
        cuts = np.searchsorted(self.values, (steps[:-1] + 0.5) * scale)
        bounds = np.concatenate([[0], cuts, [n]])
        count = np.diff(bounds).astype(np.longdouble)
        s1 = self.sum1[bounds[1:]] - self.sum1[bounds[:-1]]
        s2 = self.sum2[bounds[1:]] - self.sum2[bounds[:-1]]
        level = steps.astype(np.longdouble) * np.longdouble(scale)
        return float(np.sum(s2 - 2 * level * s1 + count * level * level) / n)


def _quantization_mse(values: np.ndarray, lo: float, hi: float, levels: int) -> float:
    """The definition ``_SortedValues.quantization_mse`` computes faster (kept for the tests)."""
    scale = (hi - lo) / levels
    if scale <= 0:
        return float(np.mean(values**2))
    zero_point = np.round(-lo / scale)
    q = np.clip(np.round(values / scale) + zero_point, 0, levels)
    return float(np.mean(((q - zero_point) * scale - values) ** 2))


def mse_range(values: np.ndarray, lo: float, hi: float, levels: int = 255, *, per_value: bool = False) -> tuple[float, float]:
    """The range inside ``[lo, hi]`` (zero kept inside) whose ``levels``-step asymmetric
    quantization of ``values`` has the least mean squared error: each end shrunk by the factors in
    ``_MSE_FACTORS``, one end at a time (upper, lower, upper again), ties keeping the wider range.
    ``per_value`` evaluates each candidate value by value (the reference the sorted search is
    checked and timed against)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo <= 0 or values.size == 0:
        return lo, hi
    if levels <= _SORTED_MSE_MAX_LEVELS and not per_value:
        # Sorted once (O(n log n)); each of the 144 candidates then costs O(levels log n), not O(n).
        error = _SortedValues(values).quantization_mse
    else:
        def error(a: float, b: float, steps: int) -> float:
            return _quantization_mse(values, a, b, steps)
    best_lo, best_hi = lo, hi
    best_err = error(lo, hi, levels)
    for end in ("hi", "lo", "hi"):
        for f in _MSE_FACTORS:
            a, b = (best_lo, f * hi) if end == "hi" else (f * lo, best_hi)
            if b - a <= 0:
                continue
            err = error(a, b, levels)
            if err < best_err * (1 - 1e-9):
                best_lo, best_hi, best_err = a, b, err
    return best_lo, best_hi


def _percentile_ranges(
    float_model: FlatbufferModel, calibration: CalibrationSet, qsvs: dict[str, dict], percentile: float,
    mode: QuantizeMode | None = None, search: str = "percentile",
) -> dict[str, dict]:
    """Re-run the float model keeping every tensor and clip each calibrated range to percentiles
    (``search="mse"``: to the range of least quantization error, ``mse_range``)."""
    from ..runtime.interpreter import Resolver, TFLiteRunner

    runner = TFLiteRunner(float_model, resolver=Resolver.BUILTIN, preserve_all_tensors=True)
    by_name = {d["name"]: d["index"] for d in runner.interpreter.get_tensor_details()}
    wanted = {name: by_name[name] for name in qsvs if name in by_name}
    rng = np.random.default_rng(0)
    values: dict[str, list[np.ndarray]] = {name: [] for name in wanted}
    for sample in calibration.samples:
        runner.run(list(sample))
        for name, index in wanted.items():
            flat = np.asarray(runner.tensor(index), dtype=np.float32).ravel()
            # A max pool's padding is -inf in the tensor the runtime keeps (the calibrated min/max
            # leave it out): a percentile over it is NaN, which became a NaN scale (ResNet-18's stem).
            flat = flat[np.isfinite(flat)]
            if flat.size > _PERCENTILE_SUBSAMPLE:
                flat = rng.choice(flat, _PERCENTILE_SUBSAMPLE, replace=False)
            values[name].append(flat)
    result = dict(qsvs)
    for name, chunks in values.items():
        all_values = np.concatenate(chunks)
        old = qsvs[name]
        if all_values.size == 0:
            continue
        if search == "mse":
            lo, hi = mse_range(all_values, float(np.min(old["min"])), float(np.max(old["max"])), _levels(mode) or 255)
        else:
            lo = float(np.percentile(all_values, 100.0 - percentile))
            hi = float(np.percentile(all_values, percentile))
        # Never widen the min-max range, and keep zero inside it (quantized zero must be exact).
        lo = min(max(lo, float(np.min(old["min"]))), 0.0)
        hi = max(min(hi, float(np.max(old["max"]))), 0.0)
        result[name] = {
            **old,
            "min": np.full(np.shape(old["min"]), lo, dtype=np.float32),
            "max": np.full(np.shape(old["max"]), hi, dtype=np.float32),
        }
    return result


def floor_ranges(
    qsvs: dict[str, dict], mode: QuantizeMode, constant_names: frozenset[str] | set[str] = frozenset()
) -> tuple[dict, list[str]]:
    """Widen every activation range narrower than ``MIN_SCALE`` per step, keeping zero inside it.

    Returns the new QSVs and the names of the tensors widened. Constant tensors (weights) are left
    alone: their scales come from their values.
    """
    width = MIN_SCALE * _levels(mode) or 255
    result = dict(qsvs)
    widened = []
    for name, qsv in qsvs.items():
        if name in constant_names or not isinstance(qsv, dict) or "min" not in qsv or "max" not in qsv:
            continue
        lo = np.asarray(qsv["min"], dtype=np.float32)
        hi = np.asarray(qsv["max"], dtype=np.float32)
        deficit = width - (hi - lo)
        if not np.any(deficit > 0):
            continue
        deficit = np.maximum(deficit, 0.0)
        # Grow away from zero: a non-negative range grows upwards, a non-positive one downwards,
        # a range across zero on both sides.
        up = np.where(lo >= 0, deficit, np.where(hi <= 0, 0.0, deficit / 2))
        down = deficit - up
        result[name] = {**qsv, "min": (lo - down).astype(np.float32), "max": (hi + up).astype(np.float32)}
        widened.append(name)
    return result, widened


def _constant_tensor_names(float_model: FlatbufferModel) -> set[str]:
    return {t.name for t in float_model.tensors if t.is_constant}


def _calibrate(quantizer: Any, float_model: FlatbufferModel, float_bytes: bytes, data: dict, observer: str) -> tuple[dict, dict]:
    """Per-tensor ranges (percentile and mse narrow them afterwards), a normalization's RSQRT
    without the rows that are constant (normalization_ranges), a max pool's padding without its
    pad value (max_pool_padding); and, for min/max, each tensor's growth from half of the samples
    to all of them (int16_headroom: what an int16 tensor's range is widened by; {} otherwise)."""
    from .max_pool_padding import without_max_pool_padding
    from .normalization_ranges import without_constant_rows

    qsvs, growth = _split_min_max_ranges(quantizer, float_model, float_bytes, data, observer)
    samples = [list(sample.values()) for sample in next(iter(data.values()), [])]
    qsvs = without_constant_rows(float_model, samples, qsvs)[0]
    return without_max_pool_padding(float_model, qsvs)[0], growth


def _split_min_max_ranges(quantizer: Any, float_model: FlatbufferModel, float_bytes: bytes, data: dict, observer: str) -> tuple[dict, dict]:
    """_min_max_ranges, computed as the union of two halves of the samples (the same ranges) when
    the observer is min/max, and the growth between the halves (int16_headroom.growth_between)."""
    from .int16_headroom import HEADROOM_CAP, MIN_SPLIT_SAMPLES, growth_between, union_of

    if observer != "minmax":
        return _min_max_ranges(quantizer, float_model, float_bytes, data, observer), {}
    key, samples = next(iter(data.items()), (None, []))
    if len(samples) < MIN_SPLIT_SAMPLES:
        qsvs = _min_max_ranges(quantizer, float_model, float_bytes, data, observer)
        return qsvs, dict.fromkeys(qsvs, HEADROOM_CAP)
    halves = [_min_max_ranges(quantizer, float_model, float_bytes, {key: samples[i::2]}, observer) for i in (0, 1)]
    return union_of(*halves), growth_between(*halves)


def _min_max_ranges(quantizer: Any, float_model: FlatbufferModel, float_bytes: bytes, data: dict, observer: str) -> dict:
    """Per-tensor min/max over the calibration samples (or their moving average)."""
    if observer == "moving_average":
        return quantizer.calibrate(data, num_threads=2)
    # Quantizer.calibrate has no way to pick the QSV update; build its Calibrator the same way it
    # does, with the min/max update instead of the moving average.
    from ai_edge_quantizer import calibrator
    from ai_edge_quantizer.utils import qsv_utils

    if float_model.num_subgraphs > 1:  # the profiler reads one subgraph; the default mode follows calls
        calib = calibrator.Calibrator(float_bytes, num_threads=2, qsv_update_func=qsv_utils.min_max_update)
        calib.calibrate(data, quantizer._recipe_manager)
        return calib.get_model_qsvs()
    # LiteRT's profiler keeps each tensor's min/max in C++ as the model runs, where the default mode
    # copies every tensor back into Python after each sample: the same ranges, 1.5-4.6x faster on
    # the zoo (docs/BENCHMARKS.md 23.7).
    calib = calibrator.Calibrator(
        float_bytes, num_threads=2, mode=calibrator.CalibrationMode.CALIBRATION_PROFILER_BASED,
        qsv_update_func=qsv_utils.min_max_update,
    )
    calib.calibrate(data, quantizer._recipe_manager)
    return _tensor_shaped(calib.get_model_qsvs(), float_model)


def _tensor_shaped(qsvs: dict, float_model: FlatbufferModel) -> dict:
    """The profiler's ranges in the default mode's form, which the quantizer computes scales from:
    float32, one value kept per axis of the tensor (float64 bounds would round scales differently)."""
    ranks = {t.name: len(t.shape) for t in float_model.tensors}
    shaped = {}
    for name, qsv in qsvs.items():
        if name not in ranks:
            continue
        shape = (1,) * ranks[name]
        shaped[name] = {**qsv, "min": np.asarray(qsv["min"], np.float32).reshape(shape), "max": np.asarray(qsv["max"], np.float32).reshape(shape)}
    return shaped


def prepared_for_int8(float_bytes: bytes) -> bytes:
    """The float model an int8 recipe calibrates and quantizes, here and in sensitivity and mixed
    precision: operators of constants folded (a mask's LOG of a constant would compute -inf at run time),
    divisions by a constant written as products (an int8 divisor can land on its zero point:
    multiply_by_reciprocal_pass), ABS before a square dropped (it has no int8 recipe:
    drop_abs_before_square_pass), PRELU as RELU/MUL/MUL/SUB (it has no recipe: split_prelu_pass),
    then the constants' infinities saturated (see saturate_infinite_constants_pass)."""
    from ..passes.flatbuffer import (
        drop_abs_before_square_pass,
        fold_constant_operators_pass,
        multiply_by_reciprocal_pass,
        run_flatbuffer_passes,
        saturate_infinite_constants_pass,
        split_prelu_pass,
    )

    passes = [
        fold_constant_operators_pass, multiply_by_reciprocal_pass, drop_abs_before_square_pass, split_prelu_pass,
        saturate_infinite_constants_pass,
    ]
    result = run_flatbuffer_passes(float_bytes, passes, origin="the float model")
    return result.model_bytes if result.modified else float_bytes


def rounding_applied(mode: QuantizeMode, enabled: bool, float_bytes: bytes | None) -> str | None:
    """How quantize_flatbuffer rounds the int8 filters of ``mode``: "gptq", "nearest", or None when
    the mode has no calibrated int8 weights (or the sequence-LSTM path quantizes the model itself)."""
    spec = mode_spec(mode)
    if not (spec.calibrates and spec.activations) or float_bytes is None:
        return None
    if spec.activations == "int8" and takes_sequence_lstm_model(float_bytes):
        return None
    return "gptq" if enabled else "nearest"


def rounding_of(prepared_bytes: bytes, calibration: CalibrationSet) -> Any:
    """The WeightRounding (weight_rounding.py) of a float model as the int8 recipes calibrate it
    (``prepared_for_int8``): its filters rounded for their outputs; a step function's feeders, which
    stay float, keep their weights."""
    from .discontinuous import feeders_of_discontinuous_ops
    from .weight_rounding import round_weights

    float_model = read_flatbuffer(prepared_bytes, origin="the float model")
    keep = {op.index for op in feeders_of_discontinuous_ops(float_model)}
    return round_weights(prepared_bytes, calibration.samples, skip=keep)


def quantize_flatbuffer_and_rounding(float_bytes: bytes, mode: QuantizeMode, calibration: CalibrationSet, *,
                                     weight_rounding: bool = True, **options: Any) -> tuple[QuantizedFlatbuffer, Any]:
    """quantized_flatbuffer, and the WeightRounding it applied (None: nearest rounding, or a mode
    without calibrated int8 filters), so that the mixed-precision search reuses it instead of
    rounding again (about 50 s on a trained YOLO11n)."""
    rounding = None
    if weight_rounding and rounding_applied(mode, True, float_bytes) is not None:
        rounding = rounding_of(prepared_for_int8(float_bytes), calibration)
    return quantized_flatbuffer(float_bytes, mode, calibration, weight_rounding=weight_rounding, rounding=rounding, **options), rounding


def quantize_flatbuffer(float_bytes: bytes, mode: QuantizeMode, calibration: CalibrationSet, **options: Any) -> bytes:
    """Quantize a float flatbuffer with the recipe for ``mode``; the quantized bytes
    (quantized_flatbuffer's, without the record)."""
    return quantized_flatbuffer(float_bytes, mode, calibration, **options).data


@dataclass(frozen=True)
class QuantizedFlatbuffer:
    data: bytes
    int16_headroom: tuple[RangeHeadroom, ...] = ()  # int16 tensors given ranges wider than calibrated (int16_headroom.py)


def quantized_flatbuffer(
    float_bytes: bytes,
    mode: QuantizeMode,
    calibration: CalibrationSet,
    *,
    observer: str = DEFAULT_FLATBUFFER_OBSERVER,
    percentile: float = PERCENTILE,
    verbose: bool = False,
    part_scales: bool = True,
    weight_rounding: bool = True,
    rounding: Any = None,
) -> QuantizedFlatbuffer:
    """Quantize a float flatbuffer with the recipe for ``mode``; the quantized bytes and what was
    done to their ranges that the report names.
    ``part_scales``: an output joined from parts of very different ranges keeps each part's own
    scale (output_joins.py). ``weight_rounding``: int8 filters rounded for their layers' outputs
    on the calibration samples (weight_rounding.py), not each weight to its nearest step;
    ``rounding``: that rounding already computed for these float bytes (rounding_of), applied
    instead of computed again."""
    if recipe_name(mode) is None:
        raise QuantizationError(f"The flatbuffer backend has no recipe for --quantize {mode.value}.")
    if observer not in FLATBUFFER_OBSERVERS:
        raise QuantizationError(
            f"Unknown flatbuffer-backend observer '{observer}'.", f"Use one of {', '.join(FLATBUFFER_OBSERVERS)}."
        )
    if mode.needs_calibration:  # -inf in a constant (an additive mask) would set a scale of 1e36
        float_bytes = prepared_for_int8(float_bytes)
    if mode_spec(mode).activations == "int8" and takes_sequence_lstm_model(float_bytes):  # ai-edge-quantizer has no LSTM recipe
        return QuantizedFlatbuffer(quantize_sequence_lstm_model(float_bytes, calibration.samples))
    if weight_rounding and mode_spec(mode).calibrates and mode_spec(mode).activations:  # int8 weights, static
        from .weight_rounding import with_rounded_weights

        float_bytes = with_rounded_weights(float_bytes, rounding if rounding is not None else rounding_of(float_bytes, calibration))
    # The converter's bytes (an edge): read and verified once, for the calibration runs below.
    float_model = read_flatbuffer(float_bytes, origin="the float model") if mode.needs_calibration else None
    with quiet_libraries(verbose):
        data = _signature_data(float_model, calibration) if mode.needs_calibration else None
        try:
            from ai_edge_quantizer import quantizer as aeq

            qz = aeq.Quantizer(bytearray(float_bytes), _recipe(mode))
            if mode.needs_calibration:  # activations quantized: a step function's input stays float
                kept_float = keep_feeders_in_float(qz, float_model)
                quantize_constant_operands_per_tensor(qz, float_model, mode_spec(mode).activation_bits,
                                                      dict.fromkeys(kept_float, "float"))
            qsvs, headroom = None, ()
            if qz.need_calibration:
                float_model = float_model or read_flatbuffer(float_bytes, origin="the float model")
                # Its tqdm progress bar writes to sys.stderr, which may not be file descriptor 2.
                with contextlib.redirect_stderr(io.StringIO()) if not verbose else contextlib.nullcontext():
                    qsvs, growth = _calibrate(qz, float_model, float_bytes, data, observer)
                if observer in ("percentile", "mse"):
                    qsvs = _percentile_ranges(float_model, calibration, qsvs, percentile, mode, search=observer)
                qsvs, _ = floor_ranges(qsvs, mode, _constant_tensor_names(float_model))
                if mode_spec(mode).activations == "int16":  # every activation int16: headroom for each
                    qsvs, headroom = with_headroom(qsvs, int16_only_tensors(float_model, int16_operators(float_model)), float_model, growth)
                qsvs, _ = cut_sigmoid_input_ranges(float_model, qsvs, mode)
                if part_scales and _levels(mode) is not None:  # static int8/int16x8: one scale per tensor
                    keep_output_joins_in_float(qz, float_model, find_output_joins(float_model, qsvs))
                if not qsvs:  # every operator left float (a step function and its feeders): nothing to quantize
                    return QuantizedFlatbuffer(float_bytes)
            result = qz.quantize(qsvs, enable_progress_report=False)
            model = result.quantized_model
        except QuantizationError:
            raise
        except Exception as exc:  # ai-edge-quantizer raises many kinds (and runs LiteRT): all mean the recipe failed
            raise QuantizationError(
                f"ai-edge-quantizer could not apply recipe {recipe_name(mode)}: {first_line(exc, with_type=True)}",
                "Try --quant-backend pt2e, or run with --verbose to see ai-edge-quantizer's output.",
            ) from exc
    if model is None:
        raise QuantizationError(f"ai-edge-quantizer returned no model for recipe {recipe_name(mode)}.")
    return QuantizedFlatbuffer(bytes(model), headroom)
