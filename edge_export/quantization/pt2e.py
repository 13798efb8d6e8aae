"""PT2E backend: quantize the exported PyTorch graph, then lower it with litert-torch.

The path litert-torch documents: ``torch.export`` -> torchao ``prepare_pt2e`` with litert-torch's
``PT2EQuantizer`` -> run the calibration samples -> ``convert_pt2e(fold_quantize=False)`` ->
``litert_torch.convert(..., quant_config=QuantConfig(pt2e_quantizer=q))``. Without the quant_config
the converter would keep the Q/DQ pairs as float fake-quant ops.

Static mode gives per-channel symmetric int8 weights, int8 activations, int32 bias and int8 model
I/O. Activation ranges come from an observer we choose (see ``PT2E_OBSERVERS``): litert-torch's
default is the histogram observer, which searches the range that minimizes the L2 quantization
error; min-max takes the absolute extremes, and moving-average min-max the per-batch extremes
averaged; percentile (ours) cuts the histogram at its 0.01th/99.99th percentiles. litert-torch's static PT2E path has no int16-activation variant, so int16x8 is left to
the flatbuffer backend.

litert-torch's annotator finds add, cat, max-pool and add+relu patterns by the ``source_fn_stack``
metadata that only strict (dynamo) tracing records; the non-strict export used here, and any graph
re-exported from an ExportedProgram's module, lack it, so those ops were left in float (DEQUANTIZE/
ADD/QUANTIZE islands in every residual block). The FX pass ``restore_source_functions_pass``
(``passes/fx/``) writes the metadata back from the aten targets before ``prepare_pt2e``. After the
convert, ``distinct_operand_scales_pass`` moves apart equal operand scales of an add, sub or mul,
which LiteRT's tfl-optimize pass otherwise turns into a RESHAPE it refuses (the AST's pooler).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..config import QuantizeMode
from ..conversion.litert import convert_module
from ..errors import ExportFailure, QuantizationError, map_exceptions
from ..processes.library_output import quiet_libraries
from ..passes.fx.distinct_operand_scales_pass import distinct_operand_scales_pass
from ..passes.fx.prelu_operator import annotate_prelu_operators
from ..passes.fx.restore_source_functions_pass import restore_source_functions_pass
from .calibration import CalibrationSet
from ..quantize_modes import mode_spec

__all__ = [
    "DEFAULT_PT2E_OBSERVER",
    "PT2E_OBSERVERS",
    "pt2e_supports",
    "quantize_pt2e",
    "calibrate_pt2e",
    "lower_pt2e",
    "prepare_and_convert_pt2e",
    "make_pt2e_quantizer",
    "drop_integer_annotations",
    "freeze_parameter_observers",
    "convert_snapshot",
    "convert_calibrated",
    "early_look_sqnr",
    "simulated_sqnr",
]

PT2E_OBSERVERS = ("histogram", "minmax", "moving_average", "percentile")
DEFAULT_PT2E_OBSERVER = "histogram"
PT2E_PERCENTILE = 99.99  # as the flatbuffer backend's percentile observer


def pt2e_supports(mode: QuantizeMode) -> bool:
    """PT2E is one of the mode's backends in the mode table (litert-torch lowers int8 only)."""
    return "pt2e" in mode_spec(mode).backends


_percentile_observer_class = None


def _percentile_observer():
    """torchao's HistogramObserver with the range cut at the PT2E_PERCENTILE-th percentiles of its
    histogram instead of its L2 search (torchao has no percentile observer). Built once, lazily:
    torchao is a heavy import."""
    global _percentile_observer_class
    if _percentile_observer_class is None:
        import torch
        from torchao.quantization.pt2e.observer import HistogramObserver

        class PercentileObserver(HistogramObserver):
            def _non_linear_param_search(self):
                bin_width = (self.max_val - self.min_val) / self.bins
                cumulative = torch.cumsum(self.histogram, dim=0)
                total = cumulative[-1]
                cut = total * (100.0 - PT2E_PERCENTILE) / 100.0
                start = int(torch.searchsorted(cumulative, cut, right=True))
                end = int(torch.searchsorted(cumulative, total - cut))
                end = max(min(end, self.bins - 1), start)
                return self.min_val + bin_width * start, self.min_val + bin_width * (end + 1)

        _percentile_observer_class = PercentileObserver
    return _percentile_observer_class


def _observer_class(name: str):
    from torchao.quantization.pt2e import observer

    if name == "percentile":
        return _percentile_observer()
    return {
        "histogram": observer.HistogramObserver,
        "minmax": observer.MinMaxObserver,
        "moving_average": observer.MovingAverageMinMaxObserver,
    }[name]


def make_pt2e_quantizer(mode: QuantizeMode, observer: str = DEFAULT_PT2E_OBSERVER) -> Any:
    """litert-torch's PT2EQuantizer with per-channel weights and the chosen activation observer."""
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config

    if observer not in PT2E_OBSERVERS:
        raise QuantizationError(f"Unknown PT2E observer '{observer}'.", f"Use one of {', '.join(PT2E_OBSERVERS)}.")
    dynamic = not mode_spec(mode).calibrates  # dynamic-int8: no activation observers
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    if not dynamic and observer != DEFAULT_PT2E_OBSERVER:
        # The config is lru_cached inside litert-torch: replace, never mutate.
        act = config.input_activation
        act = dataclasses.replace(act, observer_or_fake_quant_ctr=_observer_class(observer).with_args(eps=2**-12))
        config = dataclasses.replace(config, input_activation=act, output_activation=act)
    return PT2EQuantizer().set_global(config)


def _carries_float(node: Any, graph_module: Any) -> bool:
    """Whether an FX value is a floating tensor (unknown values count as float: leave them be)."""
    val = getattr(node, "meta", {}).get("val")
    if val is None and getattr(node, "op", None) == "get_attr":  # a constant such as a position-id buffer
        val = graph_module
        for part in str(node.target).split("."):
            val = getattr(val, part, None)
    dtype = getattr(val, "dtype", None)
    return dtype is None or dtype.is_floating_point


def drop_integer_annotations(graph_module: Any) -> int:
    """Remove quantization annotations from integer tensors, in place; returns how many.

    The annotators match ops by pattern (add, cat, ...), not by dtype, so an integer ADD of position
    ids or a CAT of indices got an activation observer, and the histogram observer fails on them
    ("histogram_cpu" not implemented for 'Long'); quantizing an index is meaningless anyway.
    """
    removed = 0
    for node in graph_module.graph.nodes:
        annotation = node.meta.get("quantization_annotation")
        if annotation is None:
            continue
        for arg in [a for a in annotation.input_qspec_map if not _carries_float(a, graph_module)]:
            del annotation.input_qspec_map[arg]
            removed += 1
        if annotation.output_qspec is not None and not _carries_float(node, graph_module):
            annotation.output_qspec = None
            removed += 1
    return removed


def _float_only(quantizer: Any) -> Any:
    """``quantizer`` with annotations on integer tensors removed after it annotates."""
    from torchao.quantization.pt2e.quantizer import Quantizer

    class FloatTensorsOnly(Quantizer):
        def transform_for_annotation(self, model):
            return quantizer.transform_for_annotation(model)

        def annotate(self, model):
            model = quantizer.annotate(model) or model
            drop_integer_annotations(model)
            # an operator litert-torch's annotator does not know (LiteRT's PRELU) would stay float
            annotate_prelu_operators(model, getattr(quantizer, "global_config", None))
            return model

        def validate(self, model) -> None:
            quantizer.validate(model)

        def prepare_obs_or_fq_callback(self, model, edge_or_node_to_obs_or_fq) -> None:
            quantizer.prepare_obs_or_fq_callback(model, edge_or_node_to_obs_or_fq)

    return FloatTensorsOnly()


def prepare_and_convert_pt2e(
    module: Any,
    example_inputs: tuple,
    mode: QuantizeMode,
    batches: Any,
    *,
    observer: str = DEFAULT_PT2E_OBSERVER,
    strict: bool = False,
    annotation_fixes: bool = True,
    each_batch: Callable[[int, int], None] | None = None,
    after_batch: Callable[[Any, int, int], None] | None = None,
) -> tuple[Any, Any]:
    """The PT2E recipe up to the quantized FX graph: export, annotate (floats only), observe each
    batch (a tuple of torch tensors), convert. Returns ``(converted graph module, quantizer)``; lower
    them with ``convert_module(converted, example_inputs, quant_config=QuantConfig(pt2e_quantizer=
    quantizer))``. Third-party errors propagate unmapped: :func:`quantize_pt2e` maps them.
    ``annotation_fixes=False`` is litert-torch's documented recipe as is (no restored source
    functions, integer tensors observed too), kept for comparison: it leaves float islands that the
    fixed recipe quantizes (e.g. the residual ADDs of a transformer encoder layer).
    ``each_batch(index, total)`` is called before each batch (progress, the time budget),
    ``after_batch(prepared, done, total)`` after each (an early look at the ranges so far: it may
    raise to stop the calibration)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    quantizer = make_pt2e_quantizer(mode, observer)
    exported = torch.export.export(module, tuple(example_inputs), strict=strict).module()
    if annotation_fixes:
        restore_source_functions_pass(exported)
    prepared = prepare_pt2e(exported, _float_only(quantizer) if annotation_fixes else quantizer)
    frozen: list[Any] = []
    try:
        with torch.no_grad():
            for index, batch in enumerate(batches):
                if each_batch is not None:
                    each_batch(index, len(batches))
                prepared(*batch)
                if index == 0:
                    frozen = freeze_parameter_observers(prepared)
                if after_batch is not None:
                    after_batch(prepared, index + 1, len(batches))
    finally:
        for observer_module in frozen:
            del observer_module.forward  # back to the class's forward
    converted = convert_calibrated(prepared)
    if annotation_fixes:
        distinct_operand_scales_pass(converted)  # else litert-torch may fail to lower equal-scale operands
    return converted, quantizer


def convert_snapshot(prepared: Any) -> Any:
    """The quantized graph of the ranges observed so far, from a copy: ``prepared`` goes on
    calibrating (convert_pt2e changes the module it is given)."""
    import copy

    converted = convert_calibrated(copy.deepcopy(prepared))
    distinct_operand_scales_pass(converted)  # as prepare_and_convert_pt2e's
    return converted


def convert_calibrated(prepared: Any) -> Any:
    """``convert_pt2e(prepared, fold_quantize=False)``, without torchao's search for the conv +
    BatchNorm pattern of quantization-aware training when ``prepared`` has no fake-quantize module
    (post-training quantization, which is all this backend does).

    That search replaces the subgraph ``prepare_qat_pt2e`` writes (the BatchNorm's scale factor
    multiplied into the weight before its fake-quant), which no graph ``prepare_pt2e`` wrote holds.
    It runs whenever a BatchNorm node is left in the graph, and traces its 96 patterns with
    torch.export on every call: 13 s on BiT (a BatchNorm standardizes its convolutions' weights)
    and on LeViT (BatchNorm after Linear), paid twice by ``auto`` (its early look converts a copy).
    The helper's other steps (each dequantize duplicated per user then merged, dead code removed)
    still run, so the graph is the one the full convert gives (tests compare them)."""
    from torchao.quantization.pt2e import qat_utils
    from torchao.quantization.pt2e.fake_quantize import FakeQuantizeBase
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    helper = getattr(qat_utils, "_fold_conv_bn_qat_helper", None)
    steps_known = all(hasattr(qat_utils, name) for name in ("_duplicate_dequantize_node", "_remove_extra_dequantize"))
    if helper is None or not steps_known or any(isinstance(m, FakeQuantizeBase) for m in prepared.modules()):
        return convert_pt2e(prepared, fold_quantize=False)
    qat_utils._fold_conv_bn_qat_helper = _fold_conv_bn_without_qat_patterns
    try:
        return convert_pt2e(prepared, fold_quantize=False)
    finally:
        qat_utils._fold_conv_bn_qat_helper = helper


def _fold_conv_bn_without_qat_patterns(m: Any, conv_fn: Any, example_inputs: Any, is_cuda: bool) -> Any:
    """torchao's ``_fold_conv_bn_qat_helper`` (qat_utils) when no pattern matches: its steps
    around the pattern search, in its order."""
    from torchao.quantization.pt2e import qat_utils

    m.graph.eliminate_dead_code()
    m.recompile()
    qat_utils._duplicate_dequantize_node(m)
    m.recompile()
    qat_utils._remove_extra_dequantize(m)
    m.graph.eliminate_dead_code()
    m.recompile()
    return m


def _identity(x: Any) -> Any:
    return x


def freeze_parameter_observers(prepared: Any) -> list[Any]:
    """Make the min/max observers that only ever see a parameter (the weights' per-channel
    observers) pass their input through; returns them (``del m.forward`` restores one).

    Called after the first calibration batch: such an observer has then already recorded its
    parameter's extremes, and a min/max of the same tensor again leaves its state exactly as it is,
    so skipping it changes no scale. It ran on every weight at every calibration sample (a quarter
    of ResNet-18's calibration time). Only exact MinMaxObserver/PerChannelMinMaxObserver (the moving
    average and histogram observers accumulate), and only when every call of the observer reads a
    parameter (a shared observer that also sees an activation keeps observing)."""
    from torchao.quantization.pt2e.observer import MinMaxObserver, PerChannelMinMaxObserver

    parameters = {name for name, _ in prepared.named_parameters()}
    calls: dict[str, list[Any]] = {}
    for node in prepared.graph.nodes:
        if node.op == "call_module":
            calls.setdefault(node.target, []).append(node)
    frozen = []
    for target, nodes in calls.items():
        observer_module = prepared.get_submodule(target)
        if type(observer_module) not in (MinMaxObserver, PerChannelMinMaxObserver):
            continue
        if all(
            len(n.args) == 1 and not n.kwargs and getattr(n.args[0], "op", None) == "get_attr"
            and n.args[0].target in parameters
            for n in nodes
        ):
            observer_module.forward = _identity
            frozen.append(observer_module)
    return frozen


def calibrate_pt2e(
    module: Any,
    example_inputs: tuple,
    mode: QuantizeMode,
    calibration: CalibrationSet,
    *,
    observer: str = DEFAULT_PT2E_OBSERVER,
    strict: bool = False,
    verbose: bool = False,
    each_batch: Callable[[int, int], None] | None = None,
    after_batch: Callable[[Any, int, int], None] | None = None,
) -> tuple[Any, Any]:
    """The PT2E recipe up to the quantized FX graph (``(converted, quantizer)``), errors mapped to
    QuantizationError. The converted graph runs in PyTorch with the int8 rounding simulated, which is
    how ``auto`` predicts the lowered model's parity before paying for the lowering."""
    if not pt2e_supports(mode):
        raise QuantizationError(
            f"The PT2E backend does not support --quantize {mode.value} (litert-torch's static PT2E "
            "lowering is int8-only).",
            "Use --quant-backend flatbuffer (or auto) for this mode.",
        )
    if observer not in PT2E_OBSERVERS:
        raise QuantizationError(f"Unknown PT2E observer '{observer}'.", f"Use one of {', '.join(PT2E_OBSERVERS)}.")
    with quiet_libraries(verbose), map_exceptions(  # importing torchao/litert-torch prints load warnings
        # PT2E runs the user's forward() and torchao's passes: any exception type can come out.
        {Exception: QuantizationError},
        "PT2E could not quantize the model: {type}: {error}",
        "Try --quant-backend flatbuffer, which quantizes the converted float model instead.",
    ):
        batches = calibration.torch_batches()
        # Dynamic mode has no activation observers; one pass validates the graph.
        batches = batches if mode_spec(mode).calibrates else batches[:1]
        return prepare_and_convert_pt2e(
            module, example_inputs, mode, batches, observer=observer, strict=strict, each_batch=each_batch,
            after_batch=after_batch,
        )


def lower_pt2e(converted: Any, quantizer: Any, example_inputs: tuple, *, strict: bool = False, verbose: bool = False) -> bytes:
    """The flatbuffer of a graph from :func:`calibrate_pt2e` (litert-torch's lowering)."""
    from litert_torch.quantize.quant_config import QuantConfig

    try:
        return convert_module(
            converted, tuple(example_inputs), strict=strict, quant_config=QuantConfig(pt2e_quantizer=quantizer),
            verbose=verbose,
        )
    except ExportFailure as exc:
        raise QuantizationError(
            f"litert-torch could not lower the PT2E-quantized graph: {exc.message}",
            "Try --quant-backend flatbuffer, which quantizes the converted float model instead.",
        ) from exc


def quantize_pt2e(
    module: Any,
    example_inputs: tuple,
    mode: QuantizeMode,
    calibration: CalibrationSet,
    *,
    observer: str = DEFAULT_PT2E_OBSERVER,
    strict: bool = False,
    verbose: bool = False,
) -> bytes:
    """Return the quantized flatbuffer. Raises QuantizationError (or TraceError/ConversionError from
    the final lowering) when PT2E cannot handle the model."""
    converted, quantizer = calibrate_pt2e(
        module, example_inputs, mode, calibration, observer=observer, strict=strict, verbose=verbose
    )
    return lower_pt2e(converted, quantizer, example_inputs, strict=strict, verbose=verbose)


def simulated_sqnr(converted: Any, parity_set: list, refs: list) -> float | None:
    """Worst-output SQNR of a converted PT2E graph run in PyTorch (int8 rounding simulated), or None
    when it does not run (then it is lowered and measured: the simulation only saves time)."""
    from . import selection

    try:
        return selection.simulated_parity(converted, parity_set, refs)[0]
    except Exception:  # any failure of the user's forward() in the simulated graph: measure for real
        return None


def early_look_sqnr(prepared: Any, done: int, total: int, parity_set: list, refs: list) -> float | None:
    """The simulated SQNR on EARLY_LOOK_PARITY_SAMPLES parity samples of the ranges after ``done``
    calibration samples, when ``done`` is EARLY_LOOK_SAMPLES and at least as many are left; else None
    (also when the snapshot or the simulation cannot run: calibrate on, as without the look)."""
    from . import selection

    if done != selection.EARLY_LOOK_SAMPLES or total < 2 * done:
        return None
    try:
        snapshot = convert_snapshot(prepared)
    except Exception:  # a graph the copy or torchao's convert cannot take
        return None
    count = selection.EARLY_LOOK_PARITY_SAMPLES
    return simulated_sqnr(snapshot, parity_set[:count], refs[:count])
