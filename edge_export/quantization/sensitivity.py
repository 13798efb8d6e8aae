"""Per-layer sensitivity: how much each quantizable operator alone costs the model's output.

    measure_sensitivity(float_bytes, calibration, samples, refs) -> tuple[LayerSensitivity, ...]

Both measures run on the flatbuffer backend (ai-edge-quantizer), whose recipes can be scoped to one
operator by a regex on its *scope* (its output tensor names joined by ";", plus a trailing ";"):

- ``only-quantized`` (the default, ``SENSITIVITY_METHOD``): the float model with only this operator
  quantized to int8 (its weights, its input and output activations). The output SQNR then measures
  the error this operator adds on its own, with nothing before it already degraded.
- ``only-float``: the int8 model with only this operator left in float. The SQNR gain over the int8
  model is what promoting this one operator alone would buy.

Which predicts the effect of promotions better was measured (benchmarks/sensitivity.py,
docs/BENCHMARKS.md section 16): promoting one operator alone buys almost nothing (its input is still the int8
tensor its int8 neighbour wrote, its output is requantized for the next int8 operator), so the
``only-float`` gains are a few tenths of a dB, inside the noise, and rank badly; ``only-quantized``
separates the operators by tens of dB and its order reaches a target with fewer promotions.

Activation ranges are calibrated once (min/max, floored like every flatbuffer-backend run) and
shared by every variant, so a variant costs one ``quantize`` (no calibration) and one run of the
samples. Operators that only move or select values (reshape, transpose, pad, pooling by max,
concatenation, ...) are not candidates: their quantization has to agree with their neighbours'
(quantizing a PADV2 apart from its max-pool breaks the pool's padding), and they add no error of
their own.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import QuantizeMode
from ..errors import QuantizationError, first_line
from ..flatbuffer import read_flatbuffer
from ..processes.library_output import quiet_libraries
from ..graph.provenance import operator_module
from ..output.serialize import json_field
from .budget import TimeBudget
from .calibration import CalibrationSet
from .constant_matmul_operands import quantize_constant_operands_per_tensor
from .discontinuous import keep_feeders_in_float
from .operator_scopes import LAYOUT_OPS, QuantizableOp, quantizable_ops
from .output_joins import find_output_joins, keep_output_joins_in_float
from .sigmoid_ranges import cut_sigmoid_input_ranges

__all__ = [
    "LAYOUT_OPS",
    "SENSITIVITY_METHOD",
    "SENSITIVITY_METHODS",
    "LayerSensitivity",
    "QuantizableOp",
    "RecipeQuantizer",
    "SensitivityReport",
    "measure_sensitivity",
    "quantizable_ops",
]

SENSITIVITY_METHODS = ("only-quantized", "only-float")
SENSITIVITY_METHOD = "only-quantized"

@dataclass(frozen=True)
class LayerSensitivity:
    """One operator's sensitivity, ranked: rank 1 is the operator that costs the most accuracy."""

    rank: int
    op_index: int
    opcode: str
    tensor: str
    module_path: str | None  # the PyTorch module it came from (provenance), None when unnamed
    module_type: str | None
    source: str | None  # file:line of the user's code, when known
    sqnr_db: float  # the output SQNR with this operator alone changed (see ``method``)
    gain_db: float | None = None  # only-float: SQNR gain over the int8 model

    @property
    def label(self) -> str:
        if self.module_path is None:
            return f"{self.opcode} #{self.op_index}"
        return f"{self.module_path or '<model>'} ({self.opcode})"


@dataclass(frozen=True)
class SensitivityReport:
    """The ranked operators and how they were measured."""

    method: str  # "only-quantized" | "only-float"
    layers: tuple[LayerSensitivity, ...]  # most sensitive first
    int8_sqnr_db: float | None  # every candidate quantized (the flatbuffer backend's int8 model)
    samples: int
    seconds: float = json_field(digits=3)
    overlay: str | None = None  # the Model Explorer node-data file written, if any
    notes: tuple[str, ...] = ()

    def top(self, n: int = 5) -> tuple[LayerSensitivity, ...]:
        return self.layers[:n]


class RecipeQuantizer:
    """ai-edge-quantizer over one float model with activation ranges calibrated once: each call of
    ``quantize`` builds a recipe (a base precision plus per-operator overrides) and applies it.

    Precisions: ``"int8"`` (int8 weights and activations), ``"int16"`` (int8 weights, int16
    activations: int16x8, still integer), ``"float"`` (left as it is).

    A recipe's model is built as ``quantize_flatbuffer`` builds the export's: the same rounded
    filters, sigmoid inputs cut to where the integer sigmoid still moves, and an output joined from
    parts of different ranges keeping its parts' scales (``part_scales``), so that the ranking and the
    search measure the models an export would write."""

    def __init__(
        self, float_bytes: bytes, calibration: CalibrationSet, *, observer: str = "minmax", verbose: bool = False, weight_rounding: bool = True,
        part_scales: bool = True, rounding: Any = None,
    ) -> None:
        from ai_edge_quantizer import quantizer as aeq
        from ai_edge_quantizer import recipe as aeq_recipe

        from . import flatbuffer_recipes as fr

        # The float model the flatbuffer backend calibrates (constants folded, divisions by a constant
        # written as products, infinities saturated): its int8 model is the one an export gets.
        self.float_bytes = fr.prepared_for_int8(bytes(float_bytes))
        self.float_model = read_flatbuffer(self.float_bytes, origin="the float model")
        self.verbose = verbose
        self.calibration, self.observer = calibration, observer  # for a rewritten model's own calibration
        # ``rounding``: the backend's (quantize_flatbuffer_and_rounding), for the same float model and samples
        self.rounding = (rounding if rounding is not None else fr.rounding_of(self.float_bytes, calibration)) if weight_rounding else None
        # calibrated with the rounded filters, as the backend calibrates: the ranges int8 computes
        calibrated = self._rounded_for("int8", {})
        with quiet_libraries(verbose):
            data = fr._signature_data(self.float_model, calibration)
            # int16x8 takes the same min/max as int8: one calibration serves every recipe.
            qz = aeq.Quantizer(bytearray(calibrated), aeq_recipe.static_wi8_ai8())
            import contextlib
            import io

            with contextlib.redirect_stderr(io.StringIO()) if not verbose else contextlib.nullcontext():
                qsvs, self.growth = fr._calibrate(qz, self.float_model, calibrated, data, observer)
        constants = {t.name for t in self.float_model.tensors if t.is_constant}
        # The int16 floor is the narrower one; int8 ranges get the int8 floor at quantize time.
        self.qsvs, _ = fr.floor_ranges(qsvs, QuantizeMode.INT8, constants)
        self.part_scales = part_scales
        self.joins = find_output_joins(self.float_model, self.qsvs) if part_scales else ()
        # the int16 ranges each model made here widened (int16_headroom.py), by the model's digest:
        # a search keeps one of many models, and the report names what that one's ranges got
        self.headroom_of: dict[str, tuple] = {}

    @classmethod
    def with_ranges(cls, float_bytes: bytes, like: RecipeQuantizer) -> RecipeQuantizer:
        """A quantizer over ``float_bytes`` that reuses ``like``'s calibrated ranges (keyed by tensor
        name, so a model whose tensors carry the same names and values gets the same ranges) instead
        of calibrating again."""
        made = cls.__new__(cls)
        made.float_bytes = bytes(float_bytes)
        made.float_model = read_flatbuffer(made.float_bytes, origin="the float model")
        made.verbose, made.calibration, made.observer, made.qsvs = like.verbose, like.calibration, like.observer, like.qsvs
        made.part_scales, made.growth = like.part_scales, like.growth
        # found again: the joins are named by operator index, which a rewritten model may shift
        made.joins = find_output_joins(made.float_model, made.qsvs) if like.part_scales else ()
        made.rounding = like.rounding  # found by filter name: a split operator's halves are not rounded again
        made.headroom_of = like.headroom_of
        return made

    def headroom_of_model(self, data: bytes) -> tuple:
        """The int16 ranges widened in ``data``, a model this quantizer (or one sharing its record) made."""
        return self.headroom_of.get(hashlib.sha256(data).hexdigest(), ())

    def quantize(self, base: str, overrides: Mapping[QuantizableOp, str] | None = None) -> bytes:
        from ai_edge_quantizer import quantizer as aeq
        from ai_edge_quantizer.algorithm_manager import AlgorithmName
        from ai_edge_quantizer.qtyping import TFLOperationName

        overrides = dict(overrides or {})
        try:
            with quiet_libraries(self.verbose):
                qz = aeq.Quantizer(bytearray(self._rounded_for(base, overrides)))
                kept_float: dict[QuantizableOp, str] = {}
                if base != "float":
                    qz.add_static_config(".*", TFLOperationName.ALL_SUPPORTED, _ACTIVATION_BITS[base], 8)
                    kept_float = dict.fromkeys(keep_feeders_in_float(qz, self.float_model), "float")  # as quantize_flatbuffer does
                for op, precision in overrides.items():
                    name = TFLOperationName(op.opcode)
                    if precision == "float":
                        qz.update_quantization_recipe(op.regex, name, algorithm_key=AlgorithmName.NO_QUANTIZE)
                    else:
                        qz.add_static_config(op.regex, name, _ACTIVATION_BITS[precision], 8)
                if base != "float":  # last, so that no override quantizes a join
                    kept_float.update(dict.fromkeys(keep_output_joins_in_float(qz, self.float_model, self.joins), "float"))
                quantize_constant_operands_per_tensor(qz, self.float_model, _ACTIVATION_BITS.get(base), {**kept_float, **overrides})
                if not qz.get_quantization_recipe():
                    return self.float_bytes
                ranges, headroom = self._ranges_and_headroom(base, overrides)
                variant = bytes(qz.quantize(ranges, enable_progress_report=False).quantized_model)
            # Verified here, so a recipe whose result is not a valid model (seen: quantizing only the
            # operator behind an output that another operator also reads left the signature naming
            # a tensor that is no longer an output) is a recipe that failed, not a corrupt input.
            read_flatbuffer(variant, origin="ai-edge-quantizer's result")
            if headroom:
                self.headroom_of[hashlib.sha256(variant).hexdigest()] = headroom
            return variant
        except Exception as exc:  # ai-edge-quantizer raises many kinds: all mean this recipe failed
            raise QuantizationError(
                f"ai-edge-quantizer could not apply a per-operator recipe ({base} with "
                f"{len(overrides)} operator(s) changed): {first_line(exc, with_type=True)}",
                "Run with --verbose to see ai-edge-quantizer's output, or use --mixed-precision off.",
            ) from exc


    def _ranges_and_headroom(self, base: str, overrides: Mapping[QuantizableOp, str]) -> tuple[dict[str, Any], tuple]:
        """The calibrated ranges with headroom for the tensors int16 operators write
        (int16_headroom.py), then sigmoid inputs cut (sigmoid_ranges.py) at int8's bound, or at
        int16's when any operator of the recipe has int16 activations: an int8 tensor cut at the
        wider bound only keeps a coarser step, where int16's cut at int8's would saturate an int16
        sigmoid at 0.002. Also the tensors widened (int16_headroom.RangeHeadroom)."""
        from .int16_headroom import int16_only_tensors, int16_operators, with_headroom

        precisions = ({base} | set(overrides.values())) - {"float"}
        if not precisions:
            return self.qsvs, ()
        mode = QuantizeMode.INT16X8 if "int16" in precisions else QuantizeMode.INT8
        if base == "int16":
            int16_ops = int16_operators(self.float_model) - {op.index for op, p in overrides.items() if p != "int16"}
        else:
            int16_ops = {op.index for op, p in overrides.items() if p == "int16"} & int16_operators(self.float_model)
        qsvs, headroom = self.qsvs, ()
        if int16_ops:
            qsvs, headroom = with_headroom(qsvs, int16_only_tensors(self.float_model, int16_ops), self.float_model, self.growth)
        return cut_sigmoid_input_ranges(self.float_model, qsvs, mode)[0], headroom

    def _rounded_for(self, base: str, overrides: Mapping[QuantizableOp, str]) -> bytes:
        """The float model with the rounded int8 filters of the operators this recipe quantizes
        (weight_rounding.py); an operator left float keeps its float weights."""
        from .weight_rounding import with_rounded_weights

        if self.rounding is None:
            return self.float_bytes
        if base == "float":
            quantized = {op.index for op, precision in overrides.items() if precision != "float"}
            keep = set(range(len(self.float_model.operators))) - quantized
        else:
            keep = {op.index for op, precision in overrides.items() if precision == "float"}
        return with_rounded_weights(self.float_bytes, self.rounding, keep=keep)


_ACTIVATION_BITS = {"int8": 8, "int16": 16}


def run_outputs(model_bytes: bytes, samples: Sequence[tuple[np.ndarray, ...]]) -> list[list[np.ndarray]]:
    """The flatbuffer's outputs on each sample (float), with the built-in kernels (what parity's
    quantization checks use)."""
    from ..runtime.interpreter import Resolver, TFLiteRunner

    runner = TFLiteRunner(read_flatbuffer(model_bytes, origin="a sensitivity variant"), resolver=Resolver.BUILTIN)
    return [runner.run(list(sample)) for sample in samples]


def parity_outputs(model_bytes: bytes, samples: Sequence[tuple[np.ndarray, ...]]) -> list[list[np.ndarray]]:
    """The flatbuffer's outputs on each sample as the export's parity computes them (the LiteRT
    interpreter with XNNPACK, ``targets.base.litert_runner``): whether a model meets the accuracy
    target is judged as validation will judge it. XNNPACK's int8 kernels round differently from the
    built-in ones: the zoo's ViT met 30 dB in the int16 search on the built-in kernels (30.3 dB) and
    failed validation (29.9 dB)."""
    from ..runtime.interpreter import Resolver, TFLiteRunner

    runner = TFLiteRunner(read_flatbuffer(model_bytes, origin="a mixed-precision candidate"), resolver=Resolver.XNNPACK)
    return [runner.run(list(sample)) for sample in samples]


def worst_sqnr(refs: list[list[np.ndarray]], outs: list[list[np.ndarray]]) -> float:
    """The lowest SQNR over the outputs and their parts (a detector's scores beside its boxes),
    each taken over all samples."""
    from .selection import worst_parity

    return worst_parity(refs, outs)[0]


def _provenance(ops: Sequence[QuantizableOp], module: Any) -> dict[int, tuple[str | None, str | None, str | None]]:
    """(module path, module type, source file:line) of each operator, from its tensor name."""
    found = {}
    for op in ops:
        ref = operator_module(op.tensor, op.opcode)
        if ref is None:
            found[op.index] = (None, None, None)
            continue
        found[op.index] = (ref.path, ref.type_name, source_line(module, ref.path) if module is not None else None)
    return found


def source_line(module: Any, module_path: str) -> str | None:
    """``file:line`` of the user's code for a module: the exported graph's stack trace when the
    model is a graph, else where the innermost user-defined class on the path is defined (a
    library class such as nn.Conv2d says nothing about the user's code, its parent block does)."""
    from ..graph.provenance import module_user_source

    path = module_path
    while True:
        try:
            found = module_user_source(module, path)
        except Exception:  # a path the module does not have (a wrapper's): no source, not an error
            found = None
        if found or not path:
            return found
        path = path.rsplit(".", 1)[0] if "." in path else ""


def measure_sensitivity(
    quantizer: RecipeQuantizer,
    samples: Sequence[tuple[np.ndarray, ...]],
    refs: list[list[np.ndarray]],
    *,
    method: str = SENSITIVITY_METHOD,
    module: Any = None,
    budget: TimeBudget | None = None,
) -> SensitivityReport:
    """Rank every quantizable operator by ``method`` (see the module docstring). With ``budget``
    (budget.TimeBudget), each operator is a step: once it is spent, the operators not yet measured
    are left out of the ranking, and the budget and the notes say how many.

    An SQNR that is NaN (the output with this operator changed is not a number) is not a
    measurement: the operator is ranked first with SQNR NaN (null in the JSON) and named in the
    notes; with ``only-quantized`` its int8 form alone breaks the output, so it is the first to
    promote (``mixed_precision.promotion_order`` never merges it with other operators)."""
    if method not in SENSITIVITY_METHODS:
        raise QuantizationError(f"Unknown sensitivity method '{method}'.", f"Use one of {', '.join(SENSITIVITY_METHODS)}.")
    budget = budget if budget is not None else TimeBudget(None)
    start = time.perf_counter()
    ops = quantizable_ops(quantizer.float_model)
    int8_sqnr = worst_sqnr(refs, run_outputs(quantizer.quantize("int8"), samples))
    where = _provenance(ops, module)
    measured: list[tuple[QuantizableOp, float, float | None]] = []
    notes = []
    for n, op in enumerate(ops):
        if not budget.allows(f"the sensitivity of {len(ops) - n} of {len(ops)} operators (left out of the ranking)"):
            notes.append(f"{len(ops) - n} of {len(ops)} operators not measured: the time budget was spent")
            break
        budget.step("Ranking operators by sensitivity", n, len(ops))
        try:
            if method == "only-quantized":
                variant = quantizer.quantize("float", {op: "int8"})
            else:
                variant = quantizer.quantize("int8", {op: "float"})
            sqnr = worst_sqnr(refs, run_outputs(variant, samples))
        except QuantizationError as exc:
            notes.append(f"{op.opcode} #{op.index} not measured: {first_line(exc)}")
            continue
        measured.append((op, sqnr, sqnr - int8_sqnr if method == "only-float" else None))
    # NaN never reaches a comparison (sorting with NaN keys gives an arbitrary order): its own key
    if method == "only-quantized":
        measured.sort(key=lambda m: (not math.isnan(m[1]), m[1] if not math.isnan(m[1]) else 0.0, m[0].index))
    else:  # biggest gain first; a NaN gain tells nothing and goes last
        measured.sort(key=lambda m: (math.isnan(m[2]), -m[2] if not math.isnan(m[2]) else 0.0, m[0].index))
    layers = tuple(
        LayerSensitivity(
            rank=i + 1, op_index=op.index, opcode=op.opcode, tensor=op.tensor,
            module_path=where[op.index][0], module_type=where[op.index][1], source=where[op.index][2],
            sqnr_db=round(sqnr, 3), gain_db=None if gain is None else round(gain, 3),
        )
        for i, (op, sqnr, gain) in enumerate(measured)
    )
    notes += [
        f"{layer.opcode} #{layer.op_index}{_in_module(layer.module_path)} not measured: with only it {'quantized' if method == 'only-quantized' else 'left in float'} "
        "the output is not a number (NaN)" + ("; ranked first, as its int8 form alone breaks the output" if method == "only-quantized" else "")
        for layer in layers if math.isnan(layer.sqnr_db)
    ]
    return SensitivityReport(
        method=method, layers=layers, int8_sqnr_db=round(int8_sqnr, 3), samples=len(samples),
        seconds=time.perf_counter() - start, notes=tuple(notes),
    )


def _in_module(path: str | None) -> str:
    if path is None:
        return ""
    return f" (in {path})" if path else " (in the top-level forward())"


def ops_by_index(quantizer: RecipeQuantizer) -> dict[int, QuantizableOp]:
    return {op.index: op for op in quantizable_ops(quantizer.float_model)}
