"""The GPU precision check of ``--target gpu``: parity again with float16 storage, the delegate's default.

The LiteRT GPU delegate computes in float16 unless the app forces float32 (the Interpreter API's
``GpuDelegate.Options().setPrecisionLossAllowed(true)`` is its default; LiteRT 2.x's ``CompiledModel``
takes ``CompiledModel.GpuOptions(precision = ...)``, default FP16 on phones). A model whose float32
parity passes can then overflow (a value above 65504 becomes Inf), produce NaN (Inf - Inf in a
normalization) or return zeros, and nothing on the host said so.

The method: the float model's weights and every operator's output rounded to float16
(``passes/flatbuffer/round_to_float16_pass.py``: a CAST to float16 and back after each operator), run
by LiteRT's builtin CPU kernels with every tensor kept, beside the same model unrounded. That is the
simplest faithful emulation: it runs the very operators the flatbuffer holds (what the delegate
compiles, folded batch norms and fused activations included), needs no GPU and no second model
format, and names every tensor as the float32 run does, so the first tensor that overflows or whose
error jumps is found by name and blamed on its PyTorch module (``provenance``). A PyTorch
half-precision run would instead emulate the source graph, whose operators are not the ones the
delegate runs (decomposed norms, unfused activations), and torch's CPU half kernels accumulate
differently again. What neither models: the arithmetic inside an operator (some GPUs also
accumulate in float16; here each operator computes in float32 between roundings), so this check is
a lower bound on the delegate's error. It catches overflow and underflow exactly.

The result (``GpuPrecisionReport``) has the float16 run's parity against PyTorch (the fp16
thresholds without ``atol``, ``FLOAT16_THRESHOLDS``), the first tensor that overflows to Inf, the first
NaN, the outputs that collapse to zero, and the first tensor where the float16 error jumps
(``first_jump_index`` of per-layer parity over the tensors in execution order). It fails when the
outputs miss the thresholds, are not finite or collapse to zero; a failure fails the run's verdict
(exit 1, like a failed parity or a flash budget: the model is written, and it is correct where
float32 is forced), unless ``--gpu-precision fp32`` says the app forces float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ...config import Thresholds
from ..registry import ReportSection

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel
    from ...validators.parity import ParityResult

__all__ = [
    "FLOAT16_MAX",
    "FLOAT16_THRESHOLDS",
    "KOTLIN_FORCE_FP32",
    "Float16Layer",
    "GpuPrecisionReport",
    "check_gpu_precision",
    "skipped_gpu_precision",
]

FLOAT16_MAX = 65504.0
# float16 keeps ~3 decimal digits of every activation: relative metrics only (an absolute tolerance
# would fail any output whose values are in the hundreds).
FLOAT16_THRESHOLDS = Thresholds(min_sqnr_db=35.0, min_cosine=0.999, min_neighbour_agreement=0.85)
# Where the float16 error of a tensor counts as a jump (per-layer parity's rule, at the fp16 floor).
JUMP_FLOOR_DB = 35.0
JUMP_DROP_DB = 10.0
METHOD = (
    "weights and every operator's output rounded to float16 (round_to_float16_pass), run by LiteRT's "
    "builtin CPU kernels beside the float32 model"
)
KOTLIN_FORCE_FP32 = (
    "// LiteRT 2.x CompiledModel API: force float32 on the GPU\n"
    "val options = CompiledModel.Options(Accelerator.GPU).apply {\n"
    "    gpuOptions = CompiledModel.GpuOptions(precision = CompiledModel.GpuOptions.Precision.FP32)\n"
    "}\n"
    "// Interpreter API: GpuDelegate(GpuDelegate.Options().setPrecisionLossAllowed(false))"
)


@dataclass(frozen=True)
class Float16Layer:
    """A tensor of the float16 run, the operator that wrote it and its PyTorch module."""

    operator: int
    opcode: str
    tensor: str
    module_path: str | None
    module_type: str | None
    source: str | None
    sqnr_db: float | None  # the float16 run against the float32 run of the same model, over the samples
    max_abs_float32: float | None  # the largest magnitude the float32 run holds there

    def describe(self) -> str:
        from ...graph.provenance import describe_location

        where = describe_location(self.module_path, self.module_type, self.source)
        return f"operator #{self.operator} {self.opcode}{where}"


@dataclass(frozen=True)
class GpuPrecisionReport:
    method: str
    precision: str  # what the app runs: "fp16" (the delegate's default) or "fp32" (--gpu-precision fp32)
    samples: int
    parity: ParityResult | None  # the float16 run's outputs against PyTorch
    overflow: Float16Layer | None = None  # first tensor holding Inf where float32 is finite
    nan: Float16Layer | None = None  # first tensor holding NaN where float32 has none
    collapsed_outputs: tuple[str, ...] = ()  # outputs all zero in float16, not in float32
    first_jump: Float16Layer | None = None
    skipped: str | None = None  # why the check did not run

    JSON_KEYS = (
        "status", "passed", "gates_verdict", "method", "precision", "samples", "skipped", "parity", "overflow", "nan",
        "collapsed_outputs", "first_jump", "findings", "recommendation",
    )

    @property
    def passed(self) -> bool | None:
        if self.skipped is not None or self.parity is None:
            return None
        return self.parity.passed and not self.collapsed_outputs

    @property
    def status(self) -> str:
        return {None: "skipped", True: "passed", False: "failed"}[self.passed]

    @property
    def gates_verdict(self) -> bool:
        """A failure fails the run unless the app forces float32 (then it is only reported)."""
        return self.precision == "fp16"

    @property
    def failed(self) -> bool:
        return self.passed is False and self.gates_verdict

    def findings(self) -> list[str]:
        found = []
        if self.overflow is not None:
            peak = self.overflow.max_abs_float32
            size = f" (float32 reaches {peak:.4g}; float16 ends at {FLOAT16_MAX:g})" if peak is not None else ""
            found.append(f"overflows to Inf at {self.overflow.describe()}{size}")
        if self.nan is not None:
            found.append(f"NaN first at {self.nan.describe()}")
        for name in self.collapsed_outputs:
            found.append(f"output {name} collapses to zero")
        if self.first_jump is not None and self.first_jump.sqnr_db is not None:
            found.append(f"float16 error jumps at {self.first_jump.describe()} ({self.first_jump.sqnr_db:.1f} dB against float32)")
        elif self.first_jump is not None:
            found.append(f"float16 error jumps at {self.first_jump.describe()} (values no longer finite)")
        return found

    def recommendation(self) -> str | None:
        if self.passed is not False:
            return None
        return (
            "Force float32 on the GPU delegate (CompiledModel.GpuOptions(precision = "
            "CompiledModel.GpuOptions.Precision.FP32); with the Interpreter API, "
            "GpuDelegate.Options().setPrecisionLossAllowed(false)), then export with --gpu-precision fp32; "
            "or keep the activations of the named layer within float16's range (±65504) in the model."
        )

    def summary(self) -> str:
        if self.skipped is not None:
            return f"GPU float16 precision check skipped: {self.skipped}"
        worst = self.parity.worst() if self.parity is not None else None
        level = f", worst output {worst.output} {worst.sqnr_db:.1f} dB" if worst is not None and worst.sqnr_db is not None and worst.sqnr_db == worst.sqnr_db else ""
        text = f"GPU float16 precision check {self.status}{level}"
        found = self.findings()
        if found:
            text += "; " + "; ".join(found)
        if self.passed is False and not self.gates_verdict:
            text += " (reported only: --gpu-precision fp32 says the app forces float32)"
        return text + "."


def skipped_gpu_precision(reason: str, precision: str = "fp16") -> GpuPrecisionReport:
    return GpuPrecisionReport(METHOD, precision, 0, None, skipped=reason)


# ---- measuring ------------------------------------------------------------------------------------


def _activation_order(model: FlatbufferModel) -> list[tuple[int, Any]]:
    """(tensor index, operator) of every float32 activation, in execution order."""
    found = []
    for op in model.operators:
        for i in op.outputs:
            if i >= 0 and model.tensors[i].dtype == "float32" and not model.tensors[i].is_constant:
                found.append((i, op))
    return found


def _measure(model: FlatbufferModel, rounded: FlatbufferModel, feeds: Sequence[Sequence[Any]], tensors: Sequence[int]) -> tuple[list, dict]:
    """In the isolation child: the rounded run's outputs per sample and, per tensor, the float32
    signal and float16 noise energies, the float32 peak and whether float16 made Inf or NaN."""
    import numpy as np

    from ...runtime.interpreter import Resolver, TFLiteRunner

    exact = TFLiteRunner(model, resolver=Resolver.BUILTIN, preserve_all_tensors=True)
    half = TFLiteRunner(rounded, resolver=Resolver.BUILTIN, preserve_all_tensors=True)
    outputs, stats = [], {t: [0.0, 0.0, 0.0, False, False] for t in tensors}
    with np.errstate(all="ignore"):
        for feed in feeds:
            exact.run(feed)
            outputs.append(half.run(feed))
            for t in tensors:
                a, b = exact.tensor(t).astype(np.float64), half.tensor(t).astype(np.float64)
                finite = np.isfinite(a)
                s = stats[t]
                s[0] += float(np.sum(a[finite] ** 2))
                diff = (a - b)[finite]
                s[1] += float(np.sum(diff**2)) if np.all(np.isfinite(diff)) else float("inf")
                s[2] = max(s[2], float(np.max(np.abs(a[finite]), initial=0.0)))
                s[3] = s[3] or bool(np.any(np.isinf(b) & finite))
                s[4] = s[4] or bool(np.any(np.isnan(b) & ~np.isnan(a)))
    return outputs, stats


def _sqnr(signal: float, noise: float) -> float:
    import math

    if noise == 0.0:
        return math.inf
    if not math.isfinite(noise) or signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _layer(index: int, op: Any, model: FlatbufferModel, source_module: Any, stat: Sequence[Any]) -> Float16Layer:
    from ...graph.provenance import flatbuffer_operator_module, module_user_source

    found = flatbuffer_operator_module(model, op)
    path = found.path if found else None
    sqnr = _sqnr(stat[0], stat[1])
    return Float16Layer(
        operator=op.index,
        opcode=op.opcode,
        tensor=model.tensors[index].name,
        module_path=path,
        module_type=found.type_name if found else None,
        source=module_user_source(source_module, path),
        sqnr_db=sqnr if sqnr == sqnr and abs(sqnr) != float("inf") else None,
        max_abs_float32=stat[2],
    )


def check_gpu_precision(
    model: FlatbufferModel,
    feeds: Sequence[Sequence[Any]],
    references: Sequence[Sequence[Any]],
    *,
    output_kinds: Sequence[Any] | None = None,
    channels_last_outputs: Sequence[int] = (),
    source_module: Any = None,
    precision: str = "fp16",
) -> GpuPrecisionReport:
    """Run ``model`` with float16 storage on the parity samples (``feeds`` in the model's layout,
    ``references`` PyTorch's outputs) and compare it with PyTorch and with its own float32 run."""
    import numpy as np

    from ...processes.isolation import run_isolated
    from ...passes.flatbuffer import run_flatbuffer_passes, round_to_float16_pass
    from ...validators.parity import compare_outputs
    from ...validators.per_layer.measurement import first_jump_index

    rounded = run_flatbuffer_passes(model, [round_to_float16_pass], origin="the model rounded to float16").model
    order = _activation_order(model)
    outputs, stats = run_isolated(
        _measure, model, rounded, [list(f) for f in feeds], [t for t, _ in order],
        stage="GPU float16 precision check", backend="the LiteRT interpreter (builtin kernels)",
    )
    outputs = [[np.transpose(o, (0, 3, 1, 2)) if k in channels_last_outputs else o for k, o in enumerate(sample)] for sample in outputs]
    parity = compare_outputs(
        references, outputs, names=list(model.output_names), thresholds=FLOAT16_THRESHOLDS,
        runtime="LiteRT builtin kernels, float16 storage", kinds=output_kinds,
    )
    exact_zero = [all(not np.any(r[k]) for r in references) for k in range(len(model.output_names))]
    collapsed = tuple(
        name for k, name in enumerate(model.output_names)
        if not exact_zero[k] and all(not np.any(np.nan_to_num(o[k], nan=1.0)) for o in outputs)
    )
    def first(flag: int) -> Float16Layer | None:  # blame only the tensors reported
        return next((_layer(t, op, model, source_module, stats[t]) for t, op in order if stats[t][flag]), None)

    jump = first_jump_index([_sqnr(stats[t][0], stats[t][1]) for t, _ in order], drop_db=JUMP_DROP_DB, floor_db=JUMP_FLOOR_DB)
    return GpuPrecisionReport(
        METHOD, precision, len(feeds), parity, overflow=first(3), nan=first(4), collapsed_outputs=collapsed,
        first_jump=None if jump is None else _layer(*order[jump], model, source_module, stats[order[jump][0]]),
    )


def _markdown(check: GpuPrecisionReport, target: object, artifacts: object) -> list[str]:
    """The float16 check: its verdict, what broke where, and the Kotlin option that avoids it."""
    from ...output.text_safety import escape_markdown as _e

    out = ["### GPU precision (float16, the delegate's default)", "", _e(check.summary()), ""]
    if check.skipped is None:
        out += [f"*Method: {_e(check.method)}; {_e(check.samples)} parity samples, app precision {_e(check.precision)}.*", ""]
    for finding in check.findings():
        out.append(f"- {_e(finding)}")
    if check.findings():
        out.append("")
    advice = check.recommendation()
    if advice is not None:
        out += [f"**Recommendation:** {_e(advice)}", "", "```kotlin", KOTLIN_FORCE_FP32, "```", ""]
    return out


def _summary(check: GpuPrecisionReport, target: object, report: object, lines: object) -> None:
    lines.plain(f"  gpu precision: {check.summary()}")
    advice = check.recommendation()
    if advice is not None:
        lines.alert("gpu float16 check failed" if check.gates_verdict else "gpu float16 check (reported only)", advice)


def _junit(check: GpuPrecisionReport) -> list[tuple]:
    failure = ("; ".join(check.findings()) or check.summary()) if check.failed else None
    return [("edge_export.gpu", "float16 precision", failure, check.summary(), check.skipped)]


# A failed check gates the verdict unless the app forces float32 (--gpu-precision fp32).
GPU_PRECISION_REPORT_SECTION = ReportSection("gpu_precision", GpuPrecisionReport, _markdown, _summary, _junit, failed=lambda check: bool(check.failed))
