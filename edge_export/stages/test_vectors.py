"""``validate MODEL.tflite --test-vectors FILE``: the model on stored inputs, judged against stored
outputs, thresholds and output kinds; no PyTorch runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..config import Thresholds
from ..errors import UsageError
from ..options import ExportOptions
from ..reports.model import ArtifactsSection, InputSection, ModelSection, RunReport, ValidateSection
from .assemble import app_section, flatbuffer_section, tool_header, with_baseline
from .clock import StageClock
from .precision import infer_precision
from .validate import ValidateRequest
from .paths import RunPaths, check_side_outputs, validate_plan
from .run_shell import run_shell
from .samples import to_layout
from .write import ExportResult, write_run

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel


# Options that only mean something with a PyTorch reference: refused beside --test-vectors, whose
# file fixes the inputs, their layout, the output kinds and the thresholds' defaults.
_REFERENCE_ONLY_OPTIONS = (
    ("input_shapes", "--input-shape"), ("input_dtypes", "--input-dtype"), ("samples", "--samples"), ("seed", "--seed"),
    ("channels_last", "--channels-last"), ("per_layer", "--per-layer"), ("per_layer_min_sqnr", "--per-layer-min-sqnr"),
    ("per_layer_plot", "--per-layer-plot"), ("weights", "--weights"), ("trust_pickle", "--trust-pickle"),
    ("output_kinds", "--output-kind"), ("labels", "--labels"),
)


def validate_with_test_vectors(
    request: ValidateRequest, vectors_path: Path, report_prefix: str | Path | None, options: ExportOptions, on_stage: Callable[[str], None] | None,
) -> ExportResult:
    """``validate MODEL.tflite --test-vectors FILE``: the model on the stored inputs, judged against
    the stored outputs, thresholds and kinds (``--atol`` and the other threshold options tighten or
    loosen them; ``--runtime`` picks the runtimes)."""
    _refuse_reference_options(request, options)
    plan = validate_plan(request.tflite, None, options, report_prefix, None)
    inputs = (*plan.inputs[:1], ("the test vectors (--test-vectors)", vectors_path), *plan.inputs[1:])
    with run_shell(plan.outputs, inputs) as shell:
        from ..artifacts.testdata import check_vectors_fit_model, load_reference_vectors
        from ..flatbuffer import load_flatbuffer

        stages = StageClock(on_stage)
        with stages.run("load", "Reading the model and the test vectors"):
            fb = load_flatbuffer(request.tflite)
            vectors = load_reference_vectors(vectors_path)
            check_vectors_fit_model(vectors, fb, vectors_path, request.tflite)
        shell.make_folders(*plan.folders)
        check_side_outputs(options, shell.created)

        def body() -> tuple[RunReport, list]:
            with stages.run("validate", f"Checking parity on {vectors.count} test vectors"):
                parity, runtimes = parity_on_vectors(fb, vectors, options)
            return with_baseline(_vectors_report(fb, vectors, vectors_path, parity, runtimes, options, plan.paths, stages), options.outputs.baseline), []

        return shell.run(None, False, options.outputs.verbose or not options.outputs.quiet_libraries, stages, body, (),
                         commit=lambda report, files: write_run(report, files, stages, plan.paths, **options.outputs.written_beside()))


def _refuse_reference_options(request: ValidateRequest, options: ExportOptions) -> None:
    """The test-vector file fixes what these options set: given, they contradict it."""
    defaults = ExportOptions()
    given = [flag for name, flag in _REFERENCE_ONLY_OPTIONS if options.value(name) != defaults.value(name)]
    given += [flag for flag, value in (("--reference", request.reference), ("example_inputs", request.example_inputs),
                                       ("--tensor-names", request.tensor_names)) if value is not None]
    if request.explicit_quantize:
        given.append("quantize")
    if given:
        raise UsageError(
            f"--test-vectors and {', '.join(given)} contradict each other: the test-vector file holds the inputs "
            "(their shapes, dtypes and layout), PyTorch's outputs, the output kinds and the thresholds, and no "
            "PyTorch model runs.",
            f"Drop {', '.join(given)}, or drop --test-vectors and check against --reference.",
        )


def _vectors_report(fb: FlatbufferModel, vectors: Any, vectors_path: Path, parity: Any, runtimes: Any, options: ExportOptions,
                    paths: RunPaths, stages: StageClock) -> RunReport:
    """The validate report of a test-vector run: the model described by the vectors' metadata."""
    from ..targets.registry import get_target

    tflite_path, json_path, md_path = paths.tflite, paths.report_json, paths.report_markdown
    nhwc_in = tuple(i for i, t in enumerate(vectors.input_tensors) if t.layout == "NHWC")
    nhwc_out = tuple(k for k, t in enumerate(vectors.output_tensors) if t.layout == "NHWC")
    inputs = tuple(
        InputSection(t.name, (t.shape[0], t.shape[3], t.shape[1], t.shape[2]) if i in nhwc_in else t.shape, t.dtype, "NHWC" if i in nhwc_in else None)
        for i, t in enumerate(vectors.input_tensors)
    )
    export = ValidateSection(
        quantize=infer_precision(fb).value, target=get_target(options.target).name, channels_last=bool(nhwc_in or nhwc_out),
        channels_last_inputs=nhwc_in, channels_last_outputs=nhwc_out, strict=False, test_vectors=str(vectors_path),
    )
    return RunReport(
        **tool_header(),
        model=ModelSection(str(vectors_path), "test_vectors", vectors.model_class),
        inputs=inputs,
        export=export,
        artifacts=ArtifactsSection(str(tflite_path), str(json_path), str(md_path), str(options.outputs.junit) if options.outputs.junit else None),
        flatbuffer=flatbuffer_section(fb),
        stages=tuple(stages.times),
        validation=parity,
        runtimes=runtimes,
        app=app_section(fb, nhwc_in, nhwc_out),
    )


def parity_on_vectors(fb: FlatbufferModel, vectors: Any, options: ExportOptions) -> tuple[Any, Any]:
    """Each runtime --runtime names on the stored inputs (integer inputs fed as stored: the runners
    pass integer arrays through unchanged), compared output by output with the stored outputs,
    thresholds and kinds, in PyTorch's layout like the export's own parity check."""
    runs = _run_vectors(fb, vectors, options.parity.runtime)
    nhwc_out = [k for k, t in enumerate(vectors.output_tensors) if t.layout == "NHWC"]

    def torch_layout(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return to_layout([np.asarray(a) for a in arrays], nhwc_out, nhwc=False)

    expected = [torch_layout([e[s] for e in vectors.expected]) for s in range(vectors.count)]
    names = [t.name for t in vectors.output_tensors]
    thresholds = [t.override(**options.parity.threshold_overrides()) for t in vectors.thresholds]
    notes = _vector_notes(fb, vectors)
    results = [_judge_run(vectors, names, expected, [torch_layout(o) for o in outs], thresholds, scales, runtime, notes, fb)
               for outs, scales, runtime in runs]
    if options.parity.runtime == "interpreter":
        return results[0], None
    from ..validators.runtimes import RuntimeComparison, compare_runtimes

    differences = compare_runtimes(names, runs[0][0], runs[1][0], runs[0][1]) if len(runs) == 2 else ()
    return results[0], RuntimeComparison(options.parity.runtime, tuple(results), differences)


def _run_vectors(fb: FlatbufferModel, vectors: Any, runtime: str) -> list[tuple]:
    """(outputs per sample, output scales, runtime name) per runtime, in a child process."""
    from ..processes.isolation import run_isolated
    from .parity import runtime_runners

    factories, backend = runtime_runners(runtime)
    samples = [[a[s] for a in vectors.inputs] for s in range(vectors.count)]

    def run_all():
        runs = []
        for factory in factories:
            runner = factory(fb)
            outs = [runner.run(feed) for feed in samples]
            runs.append((outs, [o.scale for o in runner.outputs], runner.name))
        return runs

    return run_isolated(run_all, stage="parity check", backend=backend)


def _vector_notes(fb: FlatbufferModel, vectors: Any) -> list[str]:
    """What differs between the model and the one the vectors were written with."""
    import hashlib

    notes = []
    if hashlib.sha256(fb.data).hexdigest() != vectors.model_sha256:
        notes.append("the model is not the file the test vectors were written with (its sha256 differs): parity says whether it still computes the same")
    for t, model_tensor in zip(vectors.input_tensors, fb.input_tensors):
        q = model_tensor.quant
        scale = float(q.scales[0]) if q is not None and len(q.scales) == 1 else None
        if t.scale is not None and scale is not None and (t.scale != scale or t.zero_point != int(q.zero_points[0])):
            notes.append(
                f"input {t.name}: the test vectors were quantized with scale {t.scale:g} and zero point {t.zero_point}, the model "
                f"takes scale {scale:g} and zero point {int(q.zero_points[0])}: the same stored integers mean other values to it"
            )
    return notes


def _judge_run(
    vectors: Any, names: list[str], expected: list, candidate: list, thresholds: list, scales: list, runtime: str, notes: list[str], fb: Any = None
) -> Any:
    """One runtime's ParityResult: each output judged with its stored kind and thresholds (a
    probabilities output's activation, and the runs of an output a sigmoid makes, read from the
    flatbuffer again: the vectors do not store them)."""
    from dataclasses import replace

    from ..config import OutputKind
    from ..validators.output_kinds import KindDecision, KindSource
    from ..validators.parity import ParityResult, compare_outputs
    from ..validators.probabilities import activation_axis, graph_activation, sigmoid_segments

    merged: dict = {}
    for t in thresholds:
        for key, value in vars(t).items():
            if value is not None:
                merged.setdefault(key, value)
    per_output = []
    for k, name in enumerate(names):
        decision = KindDecision(OutputKind(vectors.kinds[k]), KindSource(vectors.kind_sources[k]))
        if decision.kind is OutputKind.PROBABILITIES and fb is not None:
            activation = graph_activation(fb, name)
            decision = replace(decision, activation=activation, axis=activation_axis(activation, [e[k] for e in expected]))
        segments = [sigmoid_segments(fb, name, np.shape(expected[0][k]))] if fb is not None else None
        per_output.append(compare_outputs(
            [[e[k]] for e in expected], [[c[k]] for c in candidate], names=[name], thresholds=thresholds[k],
            runtime=runtime, output_scales=[scales[k]], kinds=[decision], segments=segments,
        ))
    return ParityResult(
        samples=vectors.count,
        thresholds=Thresholds(**merged),
        outputs=tuple(replace(r.outputs[0], index=k) for k, r in enumerate(per_output)),
        runtime=runtime,
        notes=tuple(notes) + tuple(n for r in per_output for n in r.notes),
    )
