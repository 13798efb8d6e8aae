"""Which backend's model to keep, the fully-integer check, and the parity measured to decide.

``auto`` runs the backends that support the mode, cheapest first (the flatbuffer recipe takes seconds
where PT2E's export and lowering take tens of seconds), measures each result against the fp32 PyTorch
module on the calibration inputs, and stops early when a result already meets the caller's
``ParityTarget`` (the parity thresholds plus ``SCREEN_MARGIN_DB``) and is fully integer: nothing
better is needed, so the slower backend is not run. When PT2E does run, its quantized graph is first
simulated in PyTorch, and it is lowered (about half its time) only if the simulation is not more than
LOWERING_MARGIN_DB below a fully integer result already measured, i.e. only if it could be kept
(``lowering_not_needed``); the same test with EARLY_LOOK_MARGIN_DB after its first EARLY_LOOK_SAMPLES
calibration samples stops the calibration there. Either look also stops PT2E when its simulation reads
more than the margin below the parity target's SQNR and less than FULL_INTEGER_PREFERENCE_DB above a
fully integer result (``misses_target_anyway``): both models then fail the target, and PT2E could only
trade one failing model for another by under 1 dB. Otherwise, of every result, it keeps:
1. when a fully integer model is required (Edge TPU, microcontrollers): the fully integer result
   with the best parity; if none is fully integer, the best one, and the reason says so;
2. otherwise the result with the best parity (lowest SQNR over the outputs), except that a fully
   integer result is kept over a mixed-precision one that is better by at most
   FULL_INTEGER_PREFERENCE_DB: "int8" promises integer kernels, and 1 dB is within the noise of a
   calibration run (within 0.05 dB, then the backend tried first).
Every attempt is recorded (ok or not, error one-liner, fully integer, SQNR, cosine, seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import math
from typing import Any

import numpy as np

from ..flatbuffer import FlatbufferModel
from ..output.serialize import json_field

__all__ = [
    "FULL_INTEGER_PREFERENCE_DB",
    "EARLY_LOOK_MARGIN_DB",
    "EARLY_LOOK_SAMPLES",
    "LOWERING_MARGIN_DB",
    "PARITY_TIE_DB",
    "SCREEN_MARGIN_DB",
    "BackendAttempt",
    "FloatTensorEntry",
    "IntegerCheck",
    "ParityTarget",
    "QuantOpEntry",
    "check_integer",
    "choose_attempt",
    "lowering_not_needed",
    "misses_target_anyway",
    "pt2e_settled",
    "NotLowered",
    "measure_parity",
    "worst_parity",
    "module_path_for",
    "reference_outputs",
    "simulated_parity",
    "with_weights_dequantized_once",
]

PARITY_TIE_DB = 0.05
FULL_INTEGER_PREFERENCE_DB = 1.0
# Selection measures on (some of) the calibration inputs, on which a model reads better than on the
# held-out inputs parity is judged on: a result stops the search only this far above the target.
SCREEN_MARGIN_DB = 3.0
# PT2E's graph is simulated in PyTorch before it is lowered; the lowering (a second export and
# conversion, about 45% of PT2E's time) is skipped when the simulation reads this far below a fully
# integer result already measured (selection.lowering_not_needed).
LOWERING_MARGIN_DB = 0.5
# PT2E's ranges after its first EARLY_LOOK_SAMPLES calibration samples are simulated on
# EARLY_LOOK_PARITY_SAMPLES parity samples; reading EARLY_LOOK_MARGIN_DB below a fully integer result
# already measured, the rest of its calibration is not run. On the zoo's models the simulated SQNR
# after 16 samples was within 0.5 dB of the one after 128 (docs/BENCHMARKS.md section 23.2).
EARLY_LOOK_SAMPLES = 16
EARLY_LOOK_PARITY_SAMPLES = 4
EARLY_LOOK_MARGIN_DB = 1.5


@dataclass(frozen=True)
class BackendAttempt:
    backend: str  # "pt2e" | "flatbuffer"
    ok: bool
    error: str | None = None
    fully_integer: bool | None = None
    sqnr_db: float | None = None  # worst output, on the calibration inputs, vs the fp32 module
    cosine: float | None = None  # worst output
    seconds: float = json_field(default=0.0, digits=3)
    recipe: str | None = None
    observer: str | None = None
    size_bytes: int | None = None


@dataclass(frozen=True)
class ParityTarget:
    """The parity a result must reach for ``auto`` to keep it without trying the other backend
    (the export's thresholds; None: not gated, and with neither gated every backend is tried)."""

    min_sqnr_db: float | None = None
    min_cosine: float | None = None
    margin_db: float = SCREEN_MARGIN_DB

    def met_by(self, attempt: BackendAttempt) -> bool:
        if self.min_sqnr_db is None and self.min_cosine is None:
            return False
        if not (attempt.ok and attempt.fully_integer) or attempt.sqnr_db is None:
            return False
        if self.min_sqnr_db is not None and not attempt.sqnr_db >= self.min_sqnr_db + self.margin_db:
            return False  # written so that a NaN SQNR (output not a number) never meets it
        return self.min_cosine is None or (attempt.cosine is not None and attempt.cosine >= self.min_cosine)

    def describe(self) -> str:
        parts = []
        if self.min_sqnr_db is not None:
            parts.append(f">= {self.min_sqnr_db:g} dB + {self.margin_db:g} dB margin")
        if self.min_cosine is not None:
            parts.append(f"cosine >= {self.min_cosine:g}")
        return ", ".join(parts)


# ---- fully-integer check ----------------------------------------------------------------------


@dataclass(frozen=True)
class FloatTensorEntry:
    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    module: str | None  # PyTorch module path, e.g. "encoder.layers.0.norm1"; "" = the root's forward()
    producer: str | None  # opcode of the op writing it


@dataclass(frozen=True)
class QuantOpEntry:
    index: int
    opcode: str  # QUANTIZE | DEQUANTIZE (inner_quantize_ops); any opcode (float_operators)
    tensor: str  # the float side's tensor name
    module: str | None


@dataclass(frozen=True)
class IntegerCheck:
    fully_integer: bool
    float_tensors: tuple[FloatTensorEntry, ...]
    inner_quantize_ops: tuple[QuantOpEntry, ...]
    float_operators: tuple[QuantOpEntry, ...] = ()  # operators computing in float (FlatbufferModel.float_operators)

    JSON_KEYS = ("fully_integer", "float_tensors", "inner_quantize_ops", "float_operators", "float_modules")

    @property
    def float_modules(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for entry in (*self.float_tensors, *self.inner_quantize_ops, *self.float_operators):
            if entry.module is not None:
                seen.setdefault(entry.module, None)
        return tuple(seen)


def module_path_for(tensor_name: str, module: Any | None = None) -> str | None:
    """The dotted PyTorch module path a flatbuffer tensor came from ("" for the root module's own
    forward()), or None when the name carries no module. With ``module`` the path is resolved
    against its real submodules (so ModuleList names dropped from the stack come back); without it,
    the attribute names are joined."""
    from ..graph.provenance import scope_levels, tensor_scopes

    scopes = tensor_scopes(tensor_name)
    levels = scope_levels(scopes[0]) if scopes else None  # the first location is the op's own result
    if levels is None:
        return None
    fallback = ".".join(attr for _, attr in levels)
    if module is None or not hasattr(module, "named_modules") or not levels:
        return fallback
    named = [(path, type(m).__name__) for path, m in module.named_modules() if path]
    prefix = ""
    for cls, attr in levels:
        candidates = [
            path
            for path, type_name in named
            if type_name == cls
            and path.split(".")[-1] == attr
            and (not prefix or path.startswith(prefix + "."))
        ]
        if not candidates:
            return fallback
        prefix = min(candidates, key=len)
    return prefix


def _module_near(fb: FlatbufferModel, tensor_index: int, module: Any | None) -> str | None:
    """Module of a tensor, or, for the converter's unnamed glue tensors (e.g. the DEQUANTIZE feeding
    a float ADD), of the op that consumes it, else of the op that produces it."""
    found = module_path_for(fb.tensors[tensor_index].name, module)
    if found is not None:
        return found
    for op in fb.operators:
        if tensor_index in op.inputs:
            for out in op.outputs:
                found = module_path_for(fb.tensors[out].name, module)
                if found is not None:
                    return found
    producer = fb.producer_of(tensor_index)
    for i in producer.inputs if producer else ():
        if i >= 0:
            found = module_path_for(fb.tensors[i].name, module)
            if found is not None:
                return found
    return None


def check_integer(fb: FlatbufferModel, module: Any | None = None) -> IntegerCheck:
    floats = []
    for t in fb.float_tensors:
        producer = fb.producer_of(t.index)
        floats.append(
            FloatTensorEntry(
                index=t.index,
                name=t.name,
                dtype=t.dtype,
                shape=t.shape,
                module=_module_near(fb, t.index, module),
                producer=producer.opcode if producer else None,
            )
        )
    ops = []
    for op in fb.inner_quantize_ops:
        float_side = op.inputs[0] if op.opcode == "QUANTIZE" else op.outputs[0]
        name = fb.tensors[float_side].name
        ops.append(QuantOpEntry(op.index, op.opcode, name, _module_near(fb, float_side, module)))
    computing = []
    for op in fb.float_operators:
        if op.opcode in ("QUANTIZE", "DEQUANTIZE"):
            continue  # listed above as inner QUANTIZE/DEQUANTIZE
        tensor = next(i for i in (*op.outputs, *op.inputs) if i >= 0 and fb.tensors[i].is_float)
        computing.append(QuantOpEntry(op.index, op.opcode, fb.tensors[tensor].name, _module_near(fb, tensor, module)))
    return IntegerCheck(fb.is_fully_integer, tuple(floats), tuple(ops), tuple(computing))


# ---- parity on the calibration inputs ---------------------------------------------------------


def reference_outputs(module: Any, samples: Sequence[tuple[np.ndarray, ...]]) -> list[list[np.ndarray]]:
    """fp32 PyTorch outputs per sample, flattened to a list of arrays in forward()'s order."""
    import torch
    from torch.utils import _pytree

    refs = []
    with torch.no_grad():
        for sample in samples:
            out = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in sample))
            leaves = [x for x in _pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
            refs.append([x.detach().float().numpy() for x in leaves])
    return refs


def worst_parity(refs: list[list[np.ndarray]], outs: list[list[np.ndarray]]) -> tuple[float, float]:
    """(worst SQNR of an output or of one of its parts, worst output cosine)."""
    from ..validators.metrics import cosine_similarity
    from ..validators.output_parts import worst_sqnr_db

    n_out = min(len(refs[0]), len(outs[0]))
    sqnrs, cosines = [], []
    for k in range(n_out):
        ref, out = _stacked(refs, k), _stacked(outs, k)
        sqnrs.append(worst_sqnr_db(ref, out) if ref.shape == out.shape else worst_sqnr_db(ref.ravel(), out.ravel()))
        cosines.append(cosine_similarity(ref.ravel(), out.ravel()))
    return float(min(sqnrs, key=lambda v: -math.inf if math.isnan(v) else v)), float(min(cosines))


def _stacked(outputs: list[list[np.ndarray]], k: int) -> np.ndarray:
    """Output ``k`` of every sample, samples first (flat when their shapes differ)."""
    values = [np.asarray(o[k], dtype=np.float32) for o in outputs]
    if len({v.shape for v in values}) == 1:
        return np.stack(values)
    return np.concatenate([v.ravel() for v in values])


def measure_parity(
    model: FlatbufferModel, samples: Sequence[tuple[np.ndarray, ...]], refs: list[list[np.ndarray]]
) -> tuple[float, float]:
    """(worst-output SQNR dB, worst-output cosine) of the flatbuffer vs the reference outputs."""
    from ..runtime.interpreter import Resolver, TFLiteRunner

    runner = TFLiteRunner(model, resolver=Resolver.BUILTIN)
    return worst_parity(refs, [runner.run(list(sample)) for sample in samples])


def simulated_parity(
    quantized_graph: Any, samples: Sequence[tuple[np.ndarray, ...]], refs: list[list[np.ndarray]]
) -> tuple[float, float]:
    """As :func:`measure_parity`, for PT2E's converted graph run in PyTorch (quantize/dequantize
    pairs simulate the int8 rounding): a prediction of the lowered model's parity, without lowering."""
    return worst_parity(refs, reference_outputs(with_weights_dequantized_once(quantized_graph), samples))


def with_weights_dequantized_once(quantized_graph: Any) -> Any:
    """A copy of PT2E's converted graph (``fold_quantize=False``) whose weights' quantize ->
    dequantize chains are computed once, here, instead of at every forward; ``quantized_graph`` is
    left as it is (the lowering needs its chains). The same ops on the same constant tensors give the
    same values, so the outputs are identical; on ResNet-18 the per-forward weight rounding cost more
    than the convolutions."""
    import torch
    from torch import fx

    graph = fx.Graph()
    graph.output(graph.graph_copy(quantized_graph.graph, {}))
    copy = fx.GraphModule(quantized_graph, graph)  # shares the tensors and submodules
    # By name: the ops are registered by torchao, which is imported once PT2E has run.
    foldable = {
        f"quantized_decomposed.{op}.default"
        for op in ("quantize_per_channel", "dequantize_per_channel", "quantize_per_tensor", "dequantize_per_tensor")
    }
    values: dict[Any, Any] = {}
    for node in list(copy.graph.nodes):
        if node.op == "get_attr":
            values[node] = _attr(copy, node.target)
            continue
        if node.op != "call_function" or str(node.target) not in foldable:
            continue
        inputs = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, fx.Node)]
        if not inputs or not all(a in values for a in inputs):
            continue
        with torch.no_grad():
            value = node.target(*fx.node.map_arg(node.args, values.__getitem__),
                                **fx.node.map_arg(node.kwargs, values.__getitem__))
        name = f"_weight_once_{len(values)}"
        copy.register_buffer(name, value)
        with copy.graph.inserting_before(node):
            constant = copy.graph.get_attr(name)
        node.replace_all_uses_with(constant)
        copy.graph.erase_node(node)
        values[constant] = value
    copy.recompile()
    return copy


def _attr(module: Any, target: str) -> Any:
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def lowering_not_needed(
    simulated_sqnr_db: float, attempts: Sequence[BackendAttempt], margin_db: float = LOWERING_MARGIN_DB
) -> BackendAttempt | None:
    """The fully integer attempt that the PT2E result cannot beat by the choice rule, judged from its
    simulated SQNR (None: lower it and measure). Only a fully integer attempt settles it: a PT2E
    result may be fully integer where a mixed-precision one is not, and the choice rule prefers that.
    The simulation must read more than ``margin_db`` below: the lowered model read up to 0.3 dB
    better than its simulation on the benchmark models (LOWERING_MARGIN_DB); a look part-way through
    the calibration asks for EARLY_LOOK_MARGIN_DB."""
    settled = [a for a in attempts if a.ok and a.fully_integer and _measured(a.sqnr_db)]
    best = max(settled, key=lambda a: a.sqnr_db, default=None)
    if best is not None and simulated_sqnr_db < best.sqnr_db - margin_db:
        return best
    return None


@dataclass(frozen=True)
class NotLowered:
    """PT2E stopped because it cannot change the outcome (``pt2e_settled``): its simulated SQNR, the
    attempt kept instead, "16 of 128" when seen part-way through its calibration (else None), and
    why ("below" that attempt, or "target": misses_target_anyway)."""

    simulated_db: float
    settled: BackendAttempt
    part_way: str | None
    why: str = "below"
    backend: str = "pt2e"


def misses_target_anyway(
    simulated_sqnr_db: float, attempts: Sequence[BackendAttempt], target: ParityTarget | None, margin_db: float
) -> BackendAttempt | None:
    """The fully integer attempt kept when the PT2E result would read less than
    FULL_INTEGER_PREFERENCE_DB above it and more than ``margin_db`` below the parity target's SQNR
    (None: go on). Both models then fail the target, and PT2E could win only where its model ends
    fully integer, by under 1 dB: not worth the rest of its time (LeViT: 63 s for 0.5 dB at 2 dB)."""
    if target is None or target.min_sqnr_db is None:
        return None
    settled = [a for a in attempts if a.ok and a.fully_integer and _measured(a.sqnr_db)]
    best = max(settled, key=lambda a: a.sqnr_db, default=None)
    if best is None or not simulated_sqnr_db < target.min_sqnr_db - margin_db:  # NaN: go on
        return None
    return best if simulated_sqnr_db < best.sqnr_db + FULL_INTEGER_PREFERENCE_DB else None


def pt2e_settled(
    simulated_sqnr_db: float, attempts: Sequence[BackendAttempt], margin_db: float, target: ParityTarget | None
) -> tuple[BackendAttempt, str] | None:
    """Whether PT2E, simulated at ``simulated_sqnr_db``, is stopped: (the attempt kept, why:
    "below" it by more than ``margin_db`` (lowering_not_needed), or "target": misses_target_anyway)."""
    below = lowering_not_needed(simulated_sqnr_db, attempts, margin_db)
    if below is not None:
        return below, "below"
    anyway = misses_target_anyway(simulated_sqnr_db, attempts, target, margin_db)
    return None if anyway is None else (anyway, "target")


# ---- the choice -------------------------------------------------------------------------------


def _measured(sqnr_db: float | None) -> bool:
    """An SQNR that can be compared: not None, not NaN (an output that is not a number)."""
    return sqnr_db is not None and not math.isnan(sqnr_db)


def _tie_band(sqnr_db: float | None) -> float:
    """The SQNR quantized to the tie band, so that near-equal results fall back to integer-ness;
    an unmeasured or NaN SQNR ranks below every number, +-Inf stays itself (round() of an
    infinity raises)."""
    if not _measured(sqnr_db):
        return -math.inf
    return float(round(sqnr_db / PARITY_TIE_DB)) if math.isfinite(sqnr_db) else sqnr_db


def _sqnr_gap(better: float | None, other: float | None) -> float:
    """``better - other`` in dB, an unmeasured or NaN SQNR counting as -Inf and equal values
    (infinities too, where the difference would be NaN) as no gap."""
    x = better if _measured(better) else -math.inf
    y = other if _measured(other) else -math.inf
    return 0.0 if x == y else x - y


def _fmt(a: BackendAttempt) -> str:
    return f"{a.backend} ({a.sqnr_db:.1f} dB, {'fully integer' if a.fully_integer else 'mixed precision'})"


def choose_attempt(attempts: Sequence[BackendAttempt], require_full_integer: bool) -> tuple[int | None, str]:
    """Index of the attempt to keep (None when all failed) and the reason, in one sentence."""
    ok = [i for i, a in enumerate(attempts) if a.ok]
    failed = [a for a in attempts if not a.ok]
    failed_text = "; ".join(f"{a.backend} failed ({a.error})" for a in failed)
    if not ok:
        return None, failed_text or "no backend was tried"
    if len(ok) == 1:
        a = attempts[ok[0]]
        reason = f"{a.backend} was the only backend that produced a model"
        if len(attempts) == 1:
            reason = f"{a.backend} was the only backend tried"
        if failed_text:
            reason += f"; {failed_text}"
        if require_full_integer and not a.fully_integer:
            reason += "; it is not fully integer although the target needs it"
        return ok[0], reason

    def parity_key(i: int) -> tuple[float, int, int]:
        a = attempts[i]
        return (_tie_band(a.sqnr_db), 1 if a.fully_integer else 0, -i)

    pool = ok
    if require_full_integer:
        integer = [i for i in ok if attempts[i].fully_integer]
        if integer:
            pool = integer
    best = max(pool, key=parity_key)
    preferred_integer = False
    if not attempts[best].fully_integer:
        integer = [i for i in ok if attempts[i].fully_integer]
        if integer:
            alt = max(integer, key=parity_key)
            if _sqnr_gap(attempts[best].sqnr_db, attempts[alt].sqnr_db) <= FULL_INTEGER_PREFERENCE_DB:
                best, preferred_integer = alt, True
    others = [attempts[i] for i in ok if i != best]
    chosen = attempts[best]
    if require_full_integer and chosen.fully_integer and any(not a.fully_integer for a in others):
        reason = f"the target needs a fully integer model: kept {_fmt(chosen)} over " + ", ".join(
            _fmt(a) for a in others
        )
    elif preferred_integer:
        reason = (
            f"kept the fully integer {_fmt(chosen)}: the mixed-precision "
            + ", ".join(_fmt(a) for a in others)
            + f" is not better by more than {FULL_INTEGER_PREFERENCE_DB:g} dB"
        )
    elif require_full_integer and not chosen.fully_integer:
        reason = "no backend produced a fully integer model; kept the better parity: " + _fmt(chosen)
    else:
        reason = f"better parity on the calibration inputs: kept {_fmt(chosen)} over " + ", ".join(
            _fmt(a) for a in others
        )
    if failed_text:
        reason += f"; {failed_text}"
    return best, reason
