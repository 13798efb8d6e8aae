"""The parity stage: PyTorch and the converted model on the same samples, output by output (and
layer by layer with --per-layer), through the runtime the target names."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence


from ..config import InputSpec, IODtype, OutputKind
from ..errors import InputSpecError, RuntimeRunError, UsageError, first_line
from ..options import ExportOptions
from .clock import StageClock
from .load import flatten_outputs, output_keys
from .samples import calibration_in_layout, heldout_in_layout, parity_samples, to_layout

if TYPE_CHECKING:
    from ..quantization.sensitivity import SensitivityReport
    from ..validators.accuracy import AccuracyResult
    from ..validators.parity import ParityResult
    from ..validators.per_layer.results import LayerParityReport
    from ..validators.runtimes import RuntimeComparison
    from ..flatbuffer import FlatbufferModel


def check_parity(
    module: Any,
    example: tuple,
    specs: list[InputSpec],
    options: ExportOptions,
    fb: FlatbufferModel,
    plan: Any,
    stages: StageClock,
    *,
    samples: list[tuple] | None = None,
    runner_factory: Callable[[FlatbufferModel], Any] | None = None,
    labels: Any = None,
    calibration: Any = None,
) -> tuple[Any, Any, Any, Any, Any]:
    """Output parity, then (with --per-layer) the layer-by-layer comparison on the same samples;
    with --runtime compiled-model or both, each runtime's parity and their differences too. Also
    returns the samples checked: the float feeds in the model's layout and PyTorch's outputs; and,
    with ``labels`` (the samples' HeldOutLabels), the accuracy of both models on them. With real
    ``calibration`` data (a CalibrationSet), a classifier's expected top-1 agreement is measured."""
    from ..loading.inputs import make_samples

    if samples is None:
        samples = make_samples(specs, options.parity.samples, options.parity.seed, example)
    with stages.run("validate", f"Checking parity on {len(samples)} samples"):
        parity, runtimes, checked, accuracy = run_parity(module, samples, options, fb, plan, runner_factory, labels, calibration)
    layers = None
    if options.parity.per_layer:
        from ..validators.layers import per_layer_parity

        with stages.run("per_layer", "Comparing every layer with PyTorch (reference kernels)"):
            from ..processes.isolation import run_isolated

            layers = run_isolated(
                per_layer_parity,
                module,
                tuple(example),
                fb,
                samples=[tuple(t.numpy() for t in sample) for sample in samples],
                channels_last_inputs=tuple(plan.inputs),
                min_sqnr_db=options.parity.per_layer_min_sqnr,
                stage="per-layer comparison",
                backend="the LiteRT reference kernels",
            )
    return parity, layers, runtimes, checked, accuracy


def run_parity(
    module: Any,
    samples: list[tuple],
    options: ExportOptions,
    fb: FlatbufferModel,
    plan: Any,
    runner_factory: Callable[[FlatbufferModel], Any] | None = None,
    labels: Any = None,
    calibration: Any = None,
):
    """PyTorch and the flatbuffer on ``samples``: (the parity result, the runtime comparison with
    --runtime compiled-model or both, (feeds, references), the accuracy on ``labels`` or None).
    ``calibration``: the CalibrationSet, whose real samples give a classifier's margins."""
    references, feeds, torch_names = _reference_outputs(module, samples, plan)
    try:
        runs = _run_candidates(fb, feeds, plan, options.parity.runtime, runner_factory)
    except RuntimeRunError as exc:  # LiteRT refused an operator: name the aten call and the line too
        from ..conversion.operator_origins import name_failing_call

        named = name_failing_call(exc, fb, module, samples[0] if samples else None)
        if named is exc:
            raise
        raise named from exc.__cause__
    _, names, scales, _ = runs[0]
    if len(names) != len(references[0]):
        raise UsageError(
            f"The flatbuffer has {len(names)} outputs but the PyTorch model returns {len(references[0])}.",
            "This can happen when outputs are constants or duplicates; run with --no-validate to export anyway.",
        )
    order = outputs_by_name(torch_names, names)
    if order is not None:  # both sides name their outputs: pair by name, not by position
        references = [[ref[i] for i in order] for ref in references]
        torch_names = [torch_names[i] for i in order]
    judged = _judged_as(references, names, torch_names, options, fb)
    real = _real_references(module, samples, references, calibration, plan, order, judged)
    results = _compare_runs(references, runs, names, scales, options, judged, real)
    if results[0].passed is False:
        results = _with_reference_stability(results, module, samples, plan, references, names, order)
    checked = (feeds, references)
    accuracy = None
    if labels is not None:  # validators/accuracy.py: top-1 against the labels, the first runtime's outputs
        from ..validators.accuracy import accuracy_check

        decisions = [o.decision for o in results[0].outputs]
        accuracy = accuracy_check(labels, references, runs[0][0], names, decisions, options.parity.max_accuracy_drop)
    if options.parity.runtime == "interpreter":
        return results[0], None, checked, accuracy
    from ..validators.runtimes import RuntimeComparison, compare_runtimes

    differences = compare_runtimes(names, runs[0][0], runs[1][0], scales) if len(runs) == 2 else ()
    return results[0], RuntimeComparison(options.parity.runtime, tuple(results), differences), checked, accuracy


def _with_reference_stability(
    results: list, module: Any, samples: list[tuple], plan: Any, references: list, names: list[str], order: Any
) -> list:
    """A failed parity, with how far PyTorch moves from itself when its inputs change by one part in
    a million (validators/stability.py) and, when that is far, a note saying the model is unstable.
    Not measured (results unchanged) for a model without float inputs or one that refuses the change."""
    from dataclasses import replace

    from ..validators.stability import perturbed_samples, reference_stability

    changed = perturbed_samples(samples)
    if changed is None:
        return results
    try:
        moved, _, _ = _reference_outputs(module, changed, plan)
    except InputSpecError:
        return results
    if order is not None:  # paired by name as ``references`` already are
        moved = [[out[i] for i in order] for out in moved]
    stability = reference_stability(references, moved, names[: len(references[0])])
    note = stability.note()
    return [replace(r, reference_stability=stability, notes=(*r.notes, note) if note else r.notes) for r in results]


@dataclass(frozen=True)
class _JudgedAs:
    """What each output is (its kind) and the runs of it a sigmoid makes (probabilities.sigmoid_segments)."""

    kinds: list
    segments: list

    @property
    def reads_real_data(self) -> bool:
        """A classifier's expected top-1 and a sigmoid's expected detections read PyTorch's outputs
        on the real samples; nothing else does."""
        return any(
            d.kind is OutputKind.CLASSIFICATION or d.activation == "sigmoid" or runs for d, runs in zip(self.kinds, self.segments)
        )


def _judged_as(references: list, names: list[str], torch_names: list[str | None], options: ExportOptions, fb: Any) -> _JudgedAs:
    """Each output's kind (probabilities when the converted model's softmax/sigmoid, or PyTorch's
    values, say so) and its sigmoid runs."""
    from ..validators.probabilities import probability_kinds, sigmoid_segments

    shapes = [tuple(r.shape) for r in references[0]]
    kinds = probability_kinds(output_kinds(names, torch_names, shapes, options), fb, names, references)
    segments = [sigmoid_segments(fb, name, shape) if fb is not None else () for name, shape in zip(names, shapes)]
    return _JudgedAs(kinds, segments)


def _real_references(
    module: Any, samples: list[tuple], references: list, calibration: Any, plan: Any, order: list[int] | None, judged: _JudgedAs,
) -> list | None:
    """PyTorch's outputs on every real sample (the held-out ones, then the calibration data, at most
    expected_top1.MAX_MARGIN_ROWS of them), in the flatbuffer's output order; None unless the data is
    real and an output reads them (a classifier, a sigmoid)."""
    if calibration is None or not calibration.real_data or not judged.reads_real_data:
        return None
    import numpy as np
    import torch

    from ..validators.expected_top1 import MAX_MARGIN_ROWS

    extra = [tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in s) for s in calibration.samples[: max(0, MAX_MARGIN_ROWS - len(samples))]]
    more = _reference_outputs(module, extra, plan)[0] if extra else []
    if order is not None:
        more = [[ref[i] for i in order] for ref in more]
    return [*references, *more]


def _reference_outputs(module: Any, samples: list[tuple], plan: Any) -> tuple[list, list, list[str | None]]:
    """PyTorch's outputs on every sample (float numpy), the feeds in the model's layout, and the
    key each output was returned under. The model's own error is the user's (exit 2)."""
    import torch

    references, feeds = [], []
    torch_names: list[str | None] = []
    with torch.no_grad():
        for number, sample in enumerate(samples):
            try:
                outputs = module(*sample)
            except (Exception, SystemExit) as exc:  # the model's own error: the user's, not ours
                first = first_line(exc)
                raise InputSpecError(
                    f"The PyTorch model raised {type(exc).__name__} on parity sample {number + 1} of "
                    f"{len(samples)} (seeded random inputs shaped like the example): {first[:300]}",
                    "Pass --samples 1 to check only the example inputs, or make forward() accept such inputs.",
                ) from exc
            if not torch_names:
                torch_names = output_keys(outputs)
            references.append([t.detach().float().numpy() for t in flatten_outputs(outputs)])
            feeds.append(to_layout([t.numpy() for t in sample], plan.inputs, nhwc=True))
    return references, feeds, torch_names


def _run_candidates(fb: FlatbufferModel, feeds: list, plan: Any, runtime: str, runner_factory: Any) -> list[tuple]:
    """The flatbuffer on every feed through each runtime --runtime names (the target's runner, the
    LiteRT interpreter unless the target brings its own; LiteRT 2.x's CompiledModel; or both), in a
    child process: a native crash becomes exit 3 naming this stage."""
    from ..processes.isolation import run_isolated

    factories, backend = runtime_runners(runtime, runner_factory)

    def run_candidate():
        runs = []
        for factory in factories:
            runner = factory(fb)
            outs = [to_layout(runner.run(feed), plan.outputs, nhwc=False) for feed in feeds]
            runs.append((outs, [o.name for o in runner.outputs], [o.scale for o in runner.outputs], runner.name))
        return runs

    return run_isolated(run_candidate, stage="parity check", backend=backend)


def runtime_runners(runtime: str, runner_factory: Any = None) -> tuple[list, str]:
    """The runner factories --runtime names (the target's runner, the LiteRT interpreter unless the
    target brings its own; LiteRT 2.x's CompiledModel; or both), and the runtime a native crash
    is blamed on."""
    from ..runtime.interpreter import CompiledModelRunner
    from ..targets.base import litert_runner

    interpreter = runner_factory or litert_runner
    factories = {"interpreter": [interpreter], "compiled-model": [CompiledModelRunner], "both": [interpreter, CompiledModelRunner]}[runtime]
    compiled = "LiteRT's CompiledModel (CPU)"
    backend = {"interpreter": backend_label(runner_factory), "compiled-model": compiled}.get(runtime, backend_label(runner_factory) + " or " + compiled)
    return factories, backend


def _compare_runs(
    references: list, runs: list[tuple], names: list[str], scales: list, options: ExportOptions, judged: _JudgedAs, real: list | None = None,
) -> list:
    """One ParityResult per runtime, each output judged by its kind and its sigmoid runs."""
    from ..validators.parity import compare_outputs

    kinds = judged.kinds
    unnamed = [n for n, d in zip(names, kinds) if d.source.value == "default"]
    notes = (
        [
            f"{', '.join(unnamed)} judged as regression (no option, name or labels says what "
            f"{'it is' if len(unnamed) == 1 else 'they are'}): --output-kind NAME=classification adds "
            "top-1/top-5, NAME=embedding worst-sample cosine and neighbours"
        ]
        if unnamed
        else []
    )
    return [
        compare_outputs(references, run_outputs, names=names, thresholds=options.thresholds(), runtime=run_runtime,
                        output_scales=scales, notes=notes, kinds=kinds, real_references=real, segments=judged.segments)
        for run_outputs, _, _, run_runtime in runs
    ]


def outputs_by_name(torch_names: Sequence[str | None], names: Sequence[str]) -> list[int] | None:
    """For each flatbuffer output (``names``), the index of the PyTorch output of the same name;
    None (pair by position) unless every output on both sides is named and the names are the same."""
    if len(torch_names) != len(names) or set(torch_names) != set(names) or len(set(names)) != len(names):
        return None
    index = {n: i for i, n in enumerate(torch_names)}
    return [index[n] for n in names]


def output_kinds(names: Sequence[str], torch_names: Sequence[str | None], shapes: Sequence[tuple[int, ...]], options: ExportOptions) -> list:
    """What each output is (classification, embedding, regression) and how that was decided."""
    from ..validators.output_kinds import OutputIdentity, resolve_output_kinds

    identities = []
    for i, (name, shape) in enumerate(zip(names, shapes)):
        torch_name = torch_names[i] if i < len(torch_names) else None
        identities.append(OutputIdentity(i, tuple(dict.fromkeys(n for n in (name, torch_name) if n)), shape))
    return resolve_output_kinds(identities, options.parity.output_kinds, options.parity.labels)


def parity_runner_factory(target: Any, checked: Any) -> Any:
    factory = functools.partial(target.parity_runner, checked=checked)
    factory.backend_label = checked.runner_label  # type: ignore[attr-defined]
    return factory


def backend_label(runner_factory: Any) -> str:
    """The runtime parity runs through, named in the message when it crashes natively."""
    return getattr(runner_factory, "backend_label", None) or "the LiteRT interpreter (XNNPACK)"


@dataclass(frozen=True)
class ParityRun:
    """The parity stage's result (all None with --no-validate)."""

    parity: ParityResult | None = None
    layers: LayerParityReport | None = None  # --per-layer
    runtimes: RuntimeComparison | None = None  # --runtime compiled-model or both
    samples: tuple | None = None  # (feeds in the model's layout, PyTorch's outputs)
    sensitivity: SensitivityReport | None = None  # the convert stage's ranking, or the one explaining a failed parity
    accuracy: AccuracyResult | None = None  # with labelled calibration data (validators/accuracy.py)


def parity_stage(checked: Any, options: ExportOptions, target: Any, clock: StageClock) -> ParityRun:
    """Parity of the checked model through the target's runner; on a target with nothing to promote
    a layer to, a failed int8 parity is explained by the sensitivity ranking."""
    converted = checked.converted
    loaded = converted.prepared.loaded
    if not options.parity.validate:
        return ParityRun(sensitivity=converted.sensitivity)
    parity, layers, runtimes, samples, accuracy = check_parity(
        loaded.module, loaded.example, loaded.specs, options, checked.model, converted.prepared.plan, clock,
        samples=converted.heldout, runner_factory=parity_runner_factory(target, checked.checked), labels=converted.heldout_labels,
        calibration=converted.calibration,
    )
    sensitivity = converted.sensitivity
    if parity.passed is False and converted.quantization is not None and sensitivity is None and not target.mixed_precision_promotions:
        with clock.run("sensitivity", "Ranking operators by sensitivity (parity failed)"):
            sensitivity = limiting_layers(converted, options, target)
    notes = [default_search_note(converted.mixed_precision)]
    if parity.passed is False and converted.quantization is not None and (sensitivity is None or converted.mixed_precision is not None):
        notes.append(remedy_note(options, target.mixed_precision_promotions, converted.mixed_precision))
    if any(notes):
        from dataclasses import replace

        parity = replace(parity, notes=(*parity.notes, *filter(None, notes)))
    return ParityRun(parity, layers, runtimes, samples, sensitivity, accuracy)


def remedy_note(options: ExportOptions, promotions: Sequence[str], mixed: Any = None) -> str | None:
    """What helps a failed int8/int16x8 parity where the target can raise operators but the user
    gave no accuracy target: the default search (int16 only, when int8 missed its gate on the
    calibration inputs) may not have run or not have been enough, and a failed export should not
    end on a number with no way forward (a trained text encoder, a VAD)."""
    from ..config import QuantizeMode

    asked = (options.parity.min_sqnr, options.parity.min_cosine, options.parity.min_top1)
    if not promotions or options.quantization.mixed_precision == "off" or any(v is not None for v in asked):
        return None
    if options.quantization.quantize not in (QuantizeMode.INT8, QuantizeMode.INT16X8):
        return None
    from ..quantization.mixed_precision import DEFAULT_SEARCH

    steps = []
    # int16 activations were measured already and were not enough; a search that met its target
    # kept a model that a check it does not aim at (expected detections, top-1) still failed
    missed = mixed is not None and mixed.mode == DEFAULT_SEARCH and not getattr(mixed, "met", False)
    if options.quantization.quantize is QuantizeMode.INT8 and "int16" in promotions and not missed:
        steps.append("--quantize int16x8 keeps 16-bit activations everywhere, still fully integer")
    steps.append(
        f"--min-sqnr N (or --min-cosine, --min-top1) makes the search raise the operators that limit "
        f"accuracy to {' and then '.join(promotions)} until N is met"
    )
    return f"Parity failed{_searched(mixed)}: {'; '.join(steps)}."


def _searched(mixed: Any) -> str:
    from ..quantization.mixed_precision import DEFAULT_SEARCH

    if mixed is None or mixed.mode != DEFAULT_SEARCH:
        return " and no accuracy target was given, so no operator was raised"
    if mixed.sqnr_db is None:
        return " and the default search found no better integer model"
    raised = len({p.op_index for p in mixed.promoted})
    if getattr(mixed, "met", False):
        return (f"; the default search met its {mixed.target.describe()} ({mixed.sqnr_db:.1f} dB) with {raised} operator(s) "
                "at int16 activations and kept that model, but a check the search does not aim at failed")
    from ..quantization.mixed_precision.report import default_search_kept

    # a missed default search keeps the int8 model, or its own when far better (mixed_precision/driver.py)
    kept = "and kept that model, which parity failed" if default_search_kept(mixed) else "so the int8 model was kept"
    return (f"; the default search reached {mixed.sqnr_db:.1f} dB on its own inputs with {raised} operator(s) at int16 "
            f"activations, short of its {mixed.target.describe()}, {kept}")


def default_search_note(mixed: Any) -> str | None:
    """Says that a plain --quantize int8 kept operators at int16 activations, and why: they run
    on int16x8 kernels, slower than int8 ones on most CPUs, which the user did not ask for."""
    from ..quantization.mixed_precision import DEFAULT_SEARCH
    from ..quantization.mixed_precision.report import default_search_kept, passes_gate

    if mixed is None or mixed.mode != DEFAULT_SEARCH or not mixed.promoted or not default_search_kept(mixed):
        return None
    raised = len({p.op_index for p in mixed.promoted})
    before = f" ({mixed.int8_sqnr_db:.1f} dB on the search's inputs)" if mixed.int8_sqnr_db is not None else ""
    integer = "still fully integer" if mixed.fully_integer else "not fully integer: an operator with no int16 kernel stays as the int8 model had it, see integer_check"
    if mixed.met:
        reached = f"to reach {mixed.target.describe()}"
    else:  # kept short of its target: past the gate, or far above the int8 model (both numbers known then)
        past = ("past the gate the int8 model missed" if passes_gate(mixed)
                else f"under the gate too, but {mixed.sqnr_db - mixed.int8_sqnr_db:.1f} dB above the int8 model")
        reached = f"reaching {mixed.sqnr_db:.1f} dB on the search's inputs: short of its target ({mixed.target.describe()}), {past}"
    return (
        f"The all-int8 model missed the int8 gate{before}, so {raised} operator(s) were raised to int16 activations "
        f"with int8 weights ({integer}; int16x8 kernels, slower than int8 ones on most CPUs) {reached}. "
        "--mixed-precision off keeps every activation int8; --min-sqnr N sets the target."
    )


def limiting_layers(converted: Any, options: ExportOptions, target: Any) -> Any:
    """On a target with nothing to promote a layer to (the Edge TPU), a failed int8 parity is
    explained instead: the sensitivity ranking, with a note naming the layers that limit accuracy."""
    from dataclasses import replace

    from ..conversion.litert import convert_module
    from ..quantization.mixed_precision import AccuracyTarget, run_sensitivity_and_mixed_precision

    prepared, loaded = converted.prepared, converted.prepared.loaded
    float_bytes = converted.float_bytes
    if float_bytes is None:  # only PT2E ran: no float model was converted yet
        float_bytes = convert_module(prepared.module, prepared.example, strict=options.inputs.strict, verbose=options.outputs.verbose)
    # --samples of them, as the mixed-precision search: a labelled held-out part can be far larger
    heldout = converted.heldout[: options.parity.samples] if converted.heldout is not None else parity_samples(loaded.specs, options, loaded.example)
    _, sensitivity, _ = run_sensitivity_and_mixed_precision(
        converted.quantization, float_bytes=float_bytes, export_module=prepared.module,
        calibration=calibration_in_layout(converted.calibration, prepared.plan.inputs),
        heldout=heldout_in_layout(heldout, prepared.plan.inputs),
        want_sensitivity=True, search_mode=None, precision="", target=AccuracyTarget(), io_dtype=IODtype.FLOAT32,
        source_module=loaded.module, verbose=options.outputs.verbose,
        weight_rounding=options.quantization.weight_rounding, part_scales=options.quantization.part_scales,
        rounding=getattr(converted.quantization, "rounding", None),  # the export's: not computed again
    )
    top = ", ".join(layer.label for layer in sensitivity.layers[:3])
    note = limiting_note(target.name, top, getattr(converted.calibration, "real_data", False))
    return replace(sensitivity, notes=(note, *sensitivity.notes))


def limiting_note(target: str, top: str, real_data: bool) -> str:
    """What helps a failed int8 parity on a target with int8 kernels only; with real calibration
    data already given, asking for it again would send the user in a circle. Where the loss is
    spread over the network, no post-training rewrite holds it (the trained YOLO11n: int8 weights
    alone 12.3 dB on its scores, int8 activations alone 14.1 dB, docs/BENCHMARKS.md section 45):
    training for int8, or a target with 16-bit activations, is what is left."""
    rewrite = "a rewrite of those layers (bounded activations such as ReLU6, no outlier channels)"
    spread = ("Where the loss is spread over many layers, train the model for int8 (quantization-aware "
              "training in its own training pipeline), or export with --target cpu, which can raise layers to int16 activations.")
    remedy = (f"The calibration already used real data, so {rewrite} is what helps there. {spread}" if real_data else
              f"Real --calibration-data (ranges from the inputs the model will see) or {rewrite} is what helps there.")
    return (
        f"Parity failed, and --target {target} has no int16 or float kernels to raise a layer to. "
        f"The layers that limit accuracy most (sensitivity ranks 1-3): {top}. {remedy}"
    )


def validate_sensitivity(module: Any, example: tuple, specs: list[InputSpec], options: ExportOptions, plan: Any) -> Any:
    """validate --sensitivity: the ranking of the reference converted to float (in the validated
    file's layout) with synthetic calibration; keyed by the float model's tensor names, which a
    file from the flatbuffer backend shares (the overlay keeps the names the file has)."""
    from ..conversion.litert import convert_module, wrap_channels_last
    from ..quantization import DEFAULT_SYNTHETIC_SAMPLES, synthetic_calibration
    from ..quantization.mixed_precision import AccuracyTarget, run_sensitivity_and_mixed_precision

    export_module = wrap_channels_last(module, plan) if plan.active else module
    export_example = tuple(t.permute(0, 2, 3, 1).contiguous() if i in plan.inputs else t for i, t in enumerate(example))
    float_bytes = convert_module(export_module, export_example, strict=options.inputs.strict, verbose=options.outputs.verbose)
    synthetic = synthetic_calibration(
        specs, DEFAULT_SYNTHETIC_SAMPLES, seed=options.parity.seed + 1_000_003, like=example, layout=options.quantization.image_layout
    )  # drawn as the export's calibration is
    calibration = calibration_in_layout(synthetic, plan.inputs)
    _, sensitivity, _ = run_sensitivity_and_mixed_precision(
        None, float_bytes=float_bytes, export_module=export_module, calibration=calibration, heldout=[],
        want_sensitivity=True, search_mode=None, precision="", target=AccuracyTarget(), io_dtype=IODtype.FLOAT32,
        source_module=module, verbose=options.outputs.verbose,
    )
    return sensitivity
