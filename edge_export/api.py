"""The Python API: ``export()`` chains the stages; the CLI is a thin shell over it.

    load -> inputs -> convert (or quantize) -> inspect flatbuffer -> target checks -> validate -> report

Each stage is a function of the previous stage's result; nothing reaches back. Artifacts are staged
and committed together at the end, so a failure leaves no output behind.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from . import __version__
from .atomic_files import ArtifactSet, check_artifact_paths, check_outputs_apart, check_writable_folder, remove_created_folders
from .config import InputSpec, IODtype, QuantBackend, QuantizeMode, Target, Thresholds, default_thresholds
from .errors import EXIT_OK, EdgeExportError, InputSpecError, UsageError, first_line
from .reports.model import (
    REPORT_SCHEMA_VERSION,
    ArtifactsSection,
    BaselineSection,
    ExportSection,
    FlatbufferSection,
    InputSection,
    ModelSection,
    RunReport,
    SkippedValidation,
    StageTiming,
    TargetSection,
    ToolSection,
    ValidateSection,
)

if TYPE_CHECKING:
    from .flatbuffer import FlatbufferModel
    from .targets.base import TargetPlugin

__all__ = ["ExportOptions", "ExportResult", "export", "validate", "infer_precision", "default_output_path", "REPORT_SCHEMA_VERSION"]


@dataclass(frozen=True)
class ExportOptions:
    quantize: QuantizeMode = QuantizeMode.NONE
    target: Target | str = Target.CPU  # a Target, or the name of a target registered in targets.base
    input_shapes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    channels_last: bool = False
    strict: bool = False
    validate: bool = True
    samples: int = 8
    seed: int = 0
    runtime: str = "interpreter"  # parity through: interpreter, compiled-model (LiteRT 2.x) or both
    atol: float | None = None
    min_sqnr: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    min_top5: float | None = None
    min_neighbour_agreement: float | None = None
    max_rel_l2: float | None = None
    max_error_steps: float | None = None
    # what each output is: "KIND" for all, "NAME=KIND" pairs, or {name: kind} (see output_kinds.py)
    output_kinds: Any = ()
    labels: Any = ()  # "FILE" for the classifier output, "NAME=FILE" pairs, or {name: file}
    weights: str | None = None
    trust_pickle: bool = False
    verbose: bool = False
    # Redirect fds 1 and 2 for the whole run, hiding the libraries' chatter (and anything else the
    # process prints meanwhile). Off by default: the caller owns its streams (the CLI's terminal
    # session captures them itself). Library calls whose output edge-export parses capture locally.
    quiet_libraries: bool = False
    junit: str | None = None  # also write JUnit XML here
    baseline: str | None = None  # an earlier report.json to gate regressions against
    per_layer: bool = False  # compare every matched layer, not just the outputs
    per_layer_min_sqnr: float | None = None  # optional gate on every compared layer
    per_layer_plot: str | None = None  # PNG of SQNR per layer (needs matplotlib)
    strip_names: bool = False  # drop inner tensor names from the written flatbuffer
    keep_names: bool = False  # keep them where the target strips them by default (micro)
    # signature names (see io_names.py): "a,b" or a sequence; empty: named after the model
    input_names: Any = ()
    output_names: Any = ()
    signature_key: str = "serving_default"
    # TFLite model metadata (model_metadata.py), written with --labels and --mean/--std too
    model_name: str | None = None
    model_version: str | None = None
    description: str | None = None
    author: str | None = None
    write_metadata: bool = True  # False (--no-metadata): --labels, --mean/--std keep only their checking roles
    # quantization (int modes)
    calibration_data: str | None = None
    calibration_samples: int | None = None
    range_algorithm: str | None = None  # minmax | percentile | mse; None: each backend's default
    image_size: tuple[int, int] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    image_layout: str = "nchw"  # the layout the PyTorch model takes
    quant_backend: QuantBackend = QuantBackend.AUTO
    sensitivity: bool = False  # int8: rank operators by sensitivity (quantization/sensitivity.py)
    mixed_precision: str | None = None  # auto | int16 | off; None: the target's default
    # seconds for the whole quantization stage (quantization/budget.py); None: no limit
    time_budget: float | None = 300.0  # budget.DEFAULT_TIME_BUDGET_S (not imported: options stay light)
    host_latency: bool = True  # quantized exports on cpu: time the model against its float one here (latency.py)
    io_dtype: IODtype | None = None  # None: float32, or the target's default
    # targets
    edgetpu_compiler: str | None = None
    compiler_timeout: float = 180.0
    require_compiler: bool = False
    delegate: str | None = None  # "edgetpu": run parity through libedgetpu when present
    emit_op_resolver: str | None = None  # micro: write the C++ op-resolver lines here
    max_flash: int | str | None = None  # micro: flash budget in bytes ("256KiB" parsed; targets/budgets.py)
    max_ram: int | str | None = None  # micro: RAM (tensor arena) budget in bytes
    emit_c: str | None = None  # micro: the C bundle's folder (default <stem>_micro beside the .tflite)
    no_emit_c: bool = False  # micro: write no C bundle
    gpu_precision: str = "fp16"  # gpu: the precision the app runs the delegate at (fp32: it forces float32)
    # <stem>.testdata.npz: parity inputs as the model takes them, PyTorch's outputs, the thresholds
    emit_test_vectors: bool = False
    test_vectors_count: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "quantize", QuantizeMode(self.quantize))
        object.__setattr__(self, "target", _target_option(self.target))
        object.__setattr__(self, "quant_backend", QuantBackend(self.quant_backend))
        if self.io_dtype is not None:
            object.__setattr__(self, "io_dtype", IODtype(self.io_dtype))
        if self.delegate not in (None, "edgetpu"):
            raise UsageError(f"--delegate {self.delegate} is not known.", "Use --delegate edgetpu.")
        if self.gpu_precision not in ("fp16", "fp32"):
            raise UsageError(f"--gpu-precision {self.gpu_precision} is not known.", "Use --gpu-precision fp16 (the delegate's default) or fp32.")
        from .targets.budgets import parse_size

        for option, flag in (("max_flash", "--max-flash"), ("max_ram", "--max-ram")):
            if getattr(self, option) is not None:  # a size that does not parse fails now, before any work
                object.__setattr__(self, option, parse_size(getattr(self, option), flag))
        if self.range_algorithm is not None:  # the name now; whether the mode calibrates once targets imply it
            from .quantization.ranges import check_range_algorithm

            check_range_algorithm(self.range_algorithm)
        if self.calibration_samples is not None and self.calibration_samples < 1:
            raise UsageError(f"--calibration-samples {self.calibration_samples} must be at least 1.")
        if self.samples < 1:
            raise UsageError(f"--samples {self.samples} must be at least 1.", "Use e.g. --samples 8.")
        if not 0 <= self.seed < 2**32:  # numpy's and torch's generators take no other seed
            raise UsageError(f"--seed {self.seed} is not a seed: it must be from 0 to {2**32 - 1}.", "Use e.g. --seed 0.")
        from .validators.runtimes import check_runtime_option

        check_runtime_option(self.runtime)
        from .validators.output_kinds import parse_labels, parse_output_kinds

        object.__setattr__(self, "output_kinds", parse_output_kinds(self.output_kinds))
        object.__setattr__(self, "labels", parse_labels(self.labels))
        from .io_names import check_names, check_signature_key

        for attr, option in (("input_names", "--input-names"), ("output_names", "--output-names")):
            value = getattr(self, attr)
            value = [v.strip() for v in value.split(",")] if isinstance(value, str) and value.strip() else list(value or ())
            object.__setattr__(self, attr, check_names(value, option))
        check_signature_key(self.signature_key)
        for attr, option in (("model_name", "--model-name"), ("model_version", "--model-version"), ("description", "--description"), ("author", "--author")):
            value = getattr(self, attr)
            if value is not None and not str(value).strip():
                raise UsageError(f"{option} is empty.", f"Give {option} a text, or drop it.")
        self.thresholds()  # a bad threshold fails now, not after minutes of tracing
        for option, values in (("--mean", self.mean), ("--std", self.std)):
            if values is not None and not all(math.isfinite(v) for v in values):
                raise UsageError(f"{option} {','.join(map(str, values))} is not a list of finite numbers.", f"Write e.g. {option} 0.5,0.5,0.5.")
        if self.std is not None and any(v <= 0 for v in self.std):
            raise UsageError(f"--std {','.join(map(str, self.std))} must be positive: it divides the pixel values.")
        if self.image_layout not in ("nchw", "nhwc"):
            raise UsageError(f"--image-layout {self.image_layout} is not known.", "Use nchw or nhwc.")
        if self.per_layer_min_sqnr is not None and self.per_layer_min_sqnr != self.per_layer_min_sqnr:
            raise UsageError("--per-layer-min-sqnr nan is not a number.")
        from .quantization.budget import check_time_budget
        from .quantization.mixed_precision import check_mixed_precision_option

        check_mixed_precision_option(self.mixed_precision)
        check_time_budget(self.time_budget)
        if self.strip_names and self.keep_names:
            raise UsageError("--strip-names and --keep-names contradict each other.", "Give one of them.")
        if self.test_vectors_count < 1:
            raise UsageError(f"--test-vectors-count {self.test_vectors_count} must be at least 1.", "Use e.g. --test-vectors-count 4.")
        if self.emit_test_vectors and not self.validate:
            raise UsageError(
                "--emit-test-vectors needs the parity check: the vectors are its inputs, PyTorch's outputs "
                "and the thresholds it judged them by, and --no-validate skips it.",
                "Drop --no-validate (or --emit-test-vectors).",
            )

    def thresholds(self) -> Thresholds:
        return default_thresholds(self.quantize).override(
            atol=self.atol,
            min_sqnr_db=self.min_sqnr,
            min_cosine=self.min_cosine,
            min_top1=self.min_top1,
            min_top5=self.min_top5,
            min_neighbour_agreement=self.min_neighbour_agreement,
            max_rel_l2=self.max_rel_l2,
            max_error_steps=self.max_error_steps,
        )


def _target_option(value: Target | str) -> Target | str:
    """A built-in target as its Target member; any other registered target by its name."""
    try:
        return Target(value)
    except ValueError:
        pass
    from .targets.base import get_target

    return get_target(value).name  # UsageError naming the known targets when it is none


@dataclass(frozen=True)
class ExportResult:
    tflite_path: Path
    report_json_path: Path
    report_md_path: Path
    run_report: RunReport = field(repr=False)  # the typed report; ``report`` is its JSON form

    @functools.cached_property
    def report(self) -> dict:
        """The report as written to ``report_json_path`` (the published JSON schema)."""
        from .reports.serialize import to_json_value

        return to_json_value(self.run_report)

    @property
    def verdict(self) -> str:
        return self.run_report.verdict

    @property
    def exit_code(self) -> int:
        """What the CLI exits with: 1 when a check failed, else 0 (errors.exit_code_for_verdict)."""
        return self.run_report.exit_code

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def parity(self) -> dict | None:
        return self.report.get("validation")


def default_output_path(source: str) -> Path:
    """``<model stem>.tflite`` beside the model; for a module reference, in the current folder."""
    p = Path(source)
    if p.exists():
        return p.with_suffix(".tflite")
    name = source.split(":")[-1].split(".")[-1] or "model"
    return Path.cwd() / f"{name}.tflite"


def report_paths(tflite_path: Path) -> tuple[Path, Path]:
    stem = tflite_path.with_suffix("")
    return Path(f"{stem}.report.json"), Path(f"{stem}.report.md")


class _Stages:
    def __init__(self, on_stage: Callable[[str], None] | None, on_progress: Callable[[str, int, int], None] | None = None) -> None:
        self.times: list[StageTiming] = []
        self._on_stage = on_stage
        self.on_progress = on_progress  # (label, step, total) of a long stage's steps

    def announce(self, label: str) -> None:
        if self._on_stage:
            self._on_stage(label)

    def redirect(self, on_stage: Callable[[str], None]) -> None:
        """Stage labels go to ``on_stage`` from now on (a confined child sends them to its parent)."""
        self._on_stage = on_stage

    @contextmanager
    def run(self, name: str, label: str) -> Iterator[None]:
        if self._on_stage:
            self._on_stage(label)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times.append(StageTiming(name, round(time.perf_counter() - start, 4)))


def _library_fields() -> dict:
    """The RunReport's ``libraries`` (the versions in use) and ``pinned_set`` (them against the tested set)."""
    from .constraints import check_pinned_set, library_versions

    versions = library_versions()
    return {"libraries": versions, "pinned_set": check_pinned_set(versions)}


def _flatten_outputs(out: Any) -> list:
    import torch
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves(out)
    bad = [type(x).__name__ for x in leaves if not isinstance(x, torch.Tensor)]
    if bad or not leaves:
        raise InputSpecError(
            f"The model's forward() returns {', '.join(bad) or 'no tensors'}; edge-export needs tensor outputs "
            "(a tensor, or a tuple/list/dict of tensors).",
            "Wrap the model so that forward() returns only tensors.",
        )
    return leaves


def _resolve_inputs(loaded: Any, options: ExportOptions, example_inputs: tuple | None) -> tuple[list[InputSpec], tuple]:
    from .inputs import example_tensors, specs_from_options, specs_from_tensors

    if options.input_shapes:
        specs = specs_from_options(options.input_shapes, options.input_dtypes)
        if example_inputs is not None and len(example_inputs) == len(specs):
            example = tuple(example_inputs)
        else:
            example = example_tensors(specs, options.seed)
        return specs, example
    if example_inputs is not None:
        return specs_from_tensors(example_inputs), tuple(example_inputs)
    if loaded.example_inputs is not None:
        return specs_from_tensors(loaded.example_inputs), tuple(loaded.example_inputs)
    raise InputSpecError(
        f"The input shapes of {loaded.source} are unknown: a {loaded.kind.value.replace('_', ' ')} does not record them.",
        "Pass --input-shape once per forward() argument, in order, e.g. --input-shape 1,3,224,224.",
    )


def _to_layout(arrays: Sequence[np.ndarray], indices: Sequence[int], nhwc: bool) -> list[np.ndarray]:
    out = list(arrays)
    for i in indices:
        out[i] = np.transpose(out[i], (0, 2, 3, 1) if nhwc else (0, 3, 1, 2))
    return out


def export(
    model: Any,
    *,
    example_inputs: tuple | None = None,
    output: str | Path | None = None,
    options: ExportOptions | None = None,
    on_stage: Callable[[str], None] | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    **option_values: Any,
) -> ExportResult:
    """Export ``model`` (a path, a ``package.module:attr`` reference or an nn.Module) to LiteRT.

    Options are given as an ``ExportOptions`` or as keyword arguments of the same names
    (``quantize="fp16"``, ``channels_last=True``, ...). Returns an ``ExportResult``; raises an
    ``EdgeExportError`` subclass when nothing could be exported. ``on_stage(label)`` is called as
    each stage starts, ``on_progress(label, step, total)`` before each step of a long one
    (quantization's backends, calibration, sensitivity, mixed precision).
    """
    if options is None:
        options = ExportOptions(**option_values)
    elif option_values:
        raise UsageError("Pass either options=ExportOptions(...) or keyword options, not both.")
    options, implied = resolve_target_options(options)
    from .targets.base import get_target

    target = get_target(options.target)
    stages = _Stages(on_stage, on_progress)
    source_text = "<in-memory module>" if not isinstance(model, (str, Path)) else str(model)
    tflite_path = _tflite_output_path(source_text, output)
    json_path, md_path = report_paths(tflite_path)
    outputs = [
        ("the .tflite (-o/--output)", tflite_path),
        ("the JSON report (named after -o)", json_path),
        ("the Markdown report (named after -o)", md_path),
    ]
    target_outputs = target.output_paths(options, tflite_path)
    if options.emit_test_vectors:
        from .testdata import test_vectors_path

        outputs.append(("the test vectors (--emit-test-vectors)", test_vectors_path(tflite_path)))
    outputs += _overlay_outputs(options, tflite_path)
    check_outputs_apart(outputs + target_outputs + _side_outputs(options), _input_paths(model, options))
    created: list[Path] = []
    try:
        check_writable_folder(tflite_path, created)
        _check_side_outputs(options, created)
        for _, path in target_outputs:
            check_writable_folder(path, created)
        from .library_output import quiet_libraries

        from .sandbox import run_for_model

        with quiet_libraries(options.verbose or not options.quiet_libraries):
            report, files = run_for_model(
                model, options.trust_pickle, stages, _run_export,
                model, example_inputs, options, target, stages, tflite_path, json_path, md_path, implied,
            )
            expected = outputs + target_outputs + _overlay_outputs(options, tflite_path)
            check_artifact_paths(files, expected)
            return _write_run(report, files, options, stages)
    except BaseException:
        remove_created_folders(created)
        raise


def _tflite_output_path(source_text: str, output: str | Path | None) -> Path:
    """-o FILE, or -o FOLDER (an existing one: the default file name inside it), or the default."""
    default = default_output_path(source_text)
    if output is None:
        path = default
    elif Path(output).is_dir():
        path = Path(output) / (default.name if source_text != "<in-memory module>" else "model.tflite")
    else:
        path = Path(output)
    return path.with_suffix(".tflite") if path.suffix == "" else path


def _overlay_outputs(options: ExportOptions, tflite_path: Path) -> list[tuple[str, Path]]:
    """The Model Explorer node-data files (reports/model_explorer.py) this run may write."""
    from .reports.model_explorer import overlay_path

    wanted = (("sensitivity", options.sensitivity and options.quantize is QuantizeMode.INT8), ("per_layer", options.per_layer))
    return [(f"the Model Explorer {kind.replace('_', '-')} overlay", overlay_path(tflite_path, kind)) for kind, on in wanted if on]


def _side_outputs(options: ExportOptions) -> list[tuple[str, Path]]:
    named = (("--junit", options.junit), ("--per-layer-plot", options.per_layer_plot))
    return [(label, Path(value)) for label, value in named if value]


def _input_paths(model: Any, options: ExportOptions) -> list[tuple[str, Path]]:
    """Every file a run reads, so that no artifact path can replace one."""
    from .loading import is_module_reference

    inputs = []
    if isinstance(model, (str, Path)) and not is_module_reference(str(model)):
        inputs.append(("the model", Path(model)))
    named = (("--weights", options.weights), ("--calibration-data", options.calibration_data), ("--baseline", options.baseline))
    labels = [(f"--labels {name}" if name else "--labels", Path(path)) for name, path in options.labels or ()]
    return inputs + [(label, Path(value)) for label, value in named if value] + labels


def resolve_target_options(options: ExportOptions) -> tuple[ExportOptions, list[str]]:
    """Apply what the target implies, refusing contradictions (and other targets' options) instead
    of rewriting them silently."""
    from .targets.base import get_target, refuse_foreign_options

    target = get_target(options.target)
    refuse_foreign_options(target, options)
    options, implied = target.implied_options(options)
    _check_mixed_precision_options(options, target)
    if options.io_dtype not in (None, IODtype.FLOAT32) and options.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--io-dtype {options.io_dtype.value} applies to --quantize int8 only.",
            "Drop --io-dtype, or use --quantize int8.",
        )
    if options.range_algorithm is not None:
        from .quantization.ranges import check_range_algorithm

        check_range_algorithm(options.range_algorithm, options.quantize)
    if options.calibration_data and not options.quantize.needs_calibration:
        raise UsageError(
            f"--calibration-data applies to --quantize int8 and int16x8, not {options.quantize.value}.",
            "Drop --calibration-data, or choose a calibrated mode.",
        )
    return options, implied


def _check_mixed_precision_options(options: ExportOptions, target: Any) -> None:
    """--sensitivity and --mixed-precision measure and change int8 quantization; a target without
    int16 or float kernels (the Edge TPU) has nothing to promote an operator to."""
    if options.sensitivity and options.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--sensitivity ranks operators by what int8 quantization costs them, not {options.quantize.value}.",
            "Add --quantize int8.",
        )
    mode = options.mixed_precision
    if mode in (None, "off"):
        return
    promotions = target.mixed_precision_promotions
    if not promotions:
        raise UsageError(
            f"--mixed-precision {mode} cannot be used with --target {target.name}: it runs int8 operators "
            "only, so no layer can be raised to int16 or float.",
            "Drop --mixed-precision. --sensitivity names the layers that limit accuracy; real "
            "--calibration-data or a rewrite of those layers is what helps there.",
        )
    if options.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--mixed-precision {mode} raises operators of an int8 model, but --quantize is {options.quantize.value}.",
            "Add --quantize int8 (with --min-sqnr, --min-cosine or --min-top1 as the target).",
        )
    if mode == "int16" and "int16" not in promotions:
        raise UsageError(
            f"--mixed-precision int16 needs int16x8 kernels, which --target {target.name} does not have.",
            "Use --mixed-precision auto.",
        )


def _mixed_precision_plan(options: ExportOptions, target: Any) -> tuple[str | None, str]:
    """(the --mixed-precision mode that searches, or None; the precision it promotes to)."""
    promotions = target.mixed_precision_promotions
    mode = options.mixed_precision
    if options.quantize is not QuantizeMode.INT8 or not promotions:
        return None, ""
    if mode is None:  # the target's default: on when the user asked for an accuracy
        asked = any(v is not None for v in (options.min_sqnr, options.min_cosine, options.min_top1))
        mode = "auto" if target.mixed_precision_by_default and asked else "off"
    if mode == "off":
        return None, ""
    if mode == "int16" or target.requires_full_integer or "float" not in promotions:
        return mode, "int16"
    return mode, "float"


def _times_host_latency(options: ExportOptions, target: Any) -> bool:
    """Integer quantized exports for a target that runs on this CPU get the host latency section.
    fp16 does not: on a CPU it computes in float32 (the converter's DEQUANTIZE of the fp16 weights
    is folded when the model loads), so it runs fp32's kernels, and timing it would cost a second
    conversion."""
    return options.host_latency and options.quantize.is_integer and target.times_on_host_cpu


def _float_model_for_flatbuffer_backend(export_module: Any, export_example: tuple, options: ExportOptions, stages: _Stages) -> bytes | None:
    """The float flatbuffer the flatbuffer backend quantizes, converted here rather than inside
    quantize_model so that the latency stage can time it and a failed Edge TPU parity can rank
    operators on it: no conversion more than before. None when only PT2E runs (it converts no float
    model; timing would cost one). A conversion that fails raises (quantize_model's precondition)."""
    from .conversion import convert_module
    from .quantization import backends_for

    if "flatbuffer" not in backends_for(options.quantize, options.quant_backend):
        return None
    with stages.run("convert", "Tracing and converting with litert-torch (float: the flatbuffer backend's input)"):
        # A failure is the export's (exit 3, now): PT2E lowers through the same converter, so no
        # backend could do better, and calibrating first would only delay the same error (issue 21).
        return convert_module(export_module, export_example, strict=options.strict, verbose=options.verbose)


def _check_side_outputs(options: ExportOptions, created: list[Path] | None = None) -> None:
    """Fail on unwritable extra outputs or a bad baseline before minutes of work, not after."""
    for extra in (options.junit, options.per_layer_plot):
        if extra:
            check_writable_folder(Path(extra), created)
    if options.per_layer_plot and not options.per_layer:
        raise UsageError("--per-layer-plot needs --per-layer.", "Add --per-layer.")
    if options.baseline:
        from .reports.json_report import load_report

        load_report(options.baseline)
    if options.labels:
        from .validators.output_kinds import read_labels

        for _, path in options.labels:
            read_labels(path)  # missing or empty: exit 2 now; the class count is checked at parity


def _run_export(
    model: Any,
    example_inputs: tuple | None,
    options: ExportOptions,
    target: TargetPlugin,
    stages: _Stages,
    tflite_path: Path,
    json_path: Path,
    md_path: Path,
    implied: list[str],
) -> tuple[RunReport, list[tuple[Path, bytes]]]:
    """Every stage up to the artifacts' bytes and the typed report; ``export`` writes them."""
    from .conversion import convert_module, fp16_quant_config, plan_channels_last, wrap_channels_last
    from .flatbuffer import read_flatbuffer

    with stages.run("load", "Loading the model"):
        loaded, specs, example, reference_out, returned_keys = _load_with_inputs(model, options, example_inputs)
        module = loaded.module

    # The target's sections of the report, in the order of its hooks (see targets/base.py).
    target_report: dict = {"name": target.name, "implied": tuple(implied)}  # TargetSection's fields
    target.check_inputs(specs)
    from .model_metadata import check_metadata_options, metadata_requested

    metadata_image = check_metadata_options(options, specs, target.carries_metadata)
    prepared = target.prepare(module, example, strict=options.strict)
    export_base = prepared.module
    target_report.update(prepared.report)

    plan = plan_channels_last(
        [len(s.shape) for s in specs] if options.channels_last else [],
        [t.dim() for t in reference_out] if options.channels_last else [],
    )
    export_module = wrap_channels_last(export_base, plan) if plan.active else export_base
    export_example = tuple(
        t.permute(0, 2, 3, 1).contiguous() if i in plan.inputs else t for i, t in enumerate(example)
    )

    quant_result = None
    parity_samples = None
    sensitivity = mixed_precision = None
    float_bytes = None  # the float flatbuffer, when a quantized export converted one
    if options.quantize.is_integer:
        calibration, parity_samples = _calibration_sets(options, specs)
        search_mode, promote_to = _mixed_precision_plan(options, target)
        if search_mode or options.sensitivity:  # per-operator recipes start from the float model
            with stages.run("convert", "Tracing and converting with litert-torch (float, for per-operator recipes)"):
                float_bytes = convert_module(export_module, export_example, strict=options.strict, verbose=options.verbose)
        else:  # converted once here: the flatbuffer backend, the latency stage and the Edge TPU's explanation share it
            float_bytes = _float_model_for_flatbuffer_backend(export_module, export_example, options, stages)
        from .quantization.budget import TimeBudget

        # one budget for the whole quantization stage: backends, sensitivity, mixed precision
        budget = TimeBudget(options.time_budget, on_progress=stages.on_progress)
        with stages.run("quantize", f"Quantizing ({options.quantize.value}, {len(calibration)} calibration samples)"):
            from .quantization import ParityTarget, quantize_model
            from .quantization.ranges import observers_for

            gates = options.thresholds()
            quant_result = quantize_model(
                export_module,
                export_example,
                options.quantize,
                calibration=_calibration_in_layout(calibration, plan.inputs),
                backend=options.quant_backend,
                **observers_for(options.range_algorithm),
                io_dtype=options.io_dtype or IODtype.FLOAT32,
                require_full_integer=target.requires_full_integer,
                strict=options.strict,
                verbose=options.verbose,
                # auto keeps the first fully integer result that meets the export's own gates
                target=ParityTarget(gates.min_sqnr_db, gates.min_cosine),
                float_model_bytes=float_bytes,
                budget=budget,
            )
        if search_mode or options.sensitivity:
            label = "Ranking operators by sensitivity" + (" and searching for mixed precision" if search_mode else "")
            with stages.run("mixed_precision" if search_mode else "sensitivity", label):
                from .quantization.mixed_precision import AccuracyTarget, run_sensitivity_and_mixed_precision

                heldout = parity_samples if parity_samples is not None else _parity_samples(specs, options, example)
                quant_result, sensitivity, mixed_precision = run_sensitivity_and_mixed_precision(
                    quant_result,
                    float_bytes=float_bytes,
                    export_module=export_module,
                    calibration=_calibration_in_layout(calibration, plan.inputs),
                    heldout=[tuple(np.ascontiguousarray(a) for a in _to_layout([t.numpy() for t in sample], plan.inputs, nhwc=True)) for sample in heldout],
                    want_sensitivity=options.sensitivity,
                    search_mode=search_mode,
                    precision=promote_to,
                    target=AccuracyTarget(options.thresholds().min_sqnr_db, options.min_cosine, options.min_top1),
                    io_dtype=options.io_dtype or IODtype.FLOAT32,
                    source_module=module,
                    verbose=options.verbose,
                    measure_latency=_times_host_latency(options, target),  # each promotion's latency: cpu, not --no-latency
                    budget=budget,
                )
            if not options.sensitivity and mixed_precision is None:
                sensitivity = None  # measured for a search that was not needed: not asked for
        from dataclasses import replace

        quant_result = replace(quant_result, time_budget=budget.section())
    else:
        with stages.run("convert", "Tracing and converting with litert-torch"):
            quant_config = fp16_quant_config() if options.quantize is QuantizeMode.FP16 else None
            model_bytes = convert_module(
                export_module, export_example, strict=options.strict, quant_config=quant_config, verbose=options.verbose
            )
    with stages.run("inspect", "Reading the flatbuffer"):
        if quant_result is not None:  # read and verified by quantization's last pass
            fb = quant_result.model
        else:
            # The converter's bytes are the edge: read and verified once here, a model object from
            # then on. The converter ignores the schema's 16-byte alignment of buffer data; every
            # check below runs on, and every file is written from, the aligned model (later
            # rewrites re-pack it aligned).
            from .flatbuffer.pack import align_buffers

            fb = read_flatbuffer(align_buffers(model_bytes), origin="the converted model")
        fb = _name_signature(fb, specs, returned_keys, options)
        if quant_result is not None:  # its I/O table names what the written file names
            from dataclasses import replace

            from .quantization import describe_io

            quant_result = replace(quant_result, model=fb, io=describe_io(fb))
    host_latency = None
    if quant_result is not None and float_bytes is not None and _times_host_latency(options, target):
        with stages.run("latency", "Timing the quantized and float models on this CPU (LiteRT + XNNPACK)"):
            from .flatbuffer.pack import align_buffers
            from .latency import measure_host_latency

            float_fb = read_flatbuffer(align_buffers(float_bytes), origin="the float model")
            from .quantization.mixed_precision import kept_int16_operators

            int16_inside = kept_int16_operators(quant_result, mixed_precision)
            host_latency = measure_host_latency(fb, float_fb, options.quantize.value, kernels="int16x8" if int16_inside else None)
    model_metadata = None
    if metadata_requested(options) and target.carries_metadata:  # a bad labels file: exit 2 before the checks
        model_metadata = _build_metadata(fb, options, reference_out, returned_keys, metadata_image)
    rewritten = target.rewrite(fb)
    fb = rewritten.model
    target_report.update(rewritten.report)
    from .targets.base import TargetCheck, TargetContext

    checked = TargetCheck()
    if target.check_label is not None:
        with stages.run("target", target.check_label):
            checked = target.check(TargetContext(fb, export_base, options, tflite_path, model_metadata))
        target_report.update(checked.report)

    parity = layers = runtimes = checked_samples = None
    if options.validate:
        parity, layers, runtimes, checked_samples = _check_parity(
            module, example, specs, options, fb, plan, stages, samples=parity_samples,
            runner_factory=_parity_runner_factory(target, checked),
        )
        if parity.passed is False and quant_result is not None and sensitivity is None and not target.mixed_precision_promotions:
            with stages.run("sensitivity", "Ranking operators by sensitivity (parity failed)"):
                sensitivity = _limiting_layers(quant_result, float_bytes, export_module, export_example, calibration, parity_samples, specs, options, example, plan, target, module)

    named_size = fb.size_bytes
    named_fb = fb  # what the checks ran on; the target's finish reads its names
    if options.strip_names:
        # After every check: parity, per-layer rows and module paths need the names, and the
        # stripped model computes exactly the same (the runtimes never read inner tensor names, nor
        # the converter's description and metadata, static shape signatures or min/max).
        from .passes.flatbuffer import run_flatbuffer_passes, strip_tensor_names_pass, strip_unread_fields_pass

        stripping = [strip_tensor_names_pass, strip_unread_fields_pass]
        fb = run_flatbuffer_passes(fb, stripping, origin="the model without tensor names").model
    metadata_section = None
    if model_metadata is not None:
        # The last change to the model: after every check (parity ran on the same operators and
        # buffers; metadata changes no computation) and --strip-names.
        with stages.run("metadata", "Attaching the model metadata"):
            from dataclasses import replace

            from .model_metadata import attach_metadata, model_has_metadata

            size_before = fb.size_bytes
            fb = attach_metadata(fb, model_metadata)
            # The .tflite, and the target's models that carry it too (the Edge TPU compiled model).
            carriers = (str(tflite_path), *(str(a.path) for a in checked.artifacts if a.path.suffix == ".tflite" and model_has_metadata(a.data)))
            metadata_section = replace(model_metadata.section, added_bytes=fb.size_bytes - size_before, written_to=carriers)
    # The test vectors describe the file exactly as written (its sha256), metadata included.
    run_artifacts: tuple = ()
    if options.emit_test_vectors and checked_samples is not None:
        run_artifacts = (_test_vectors_artifact(fb, checked_samples, parity, plan, options, loaded, tflite_path),)
    # Model Explorer overlays only where asked for (their paths were checked against the inputs up
    # front), keyed by the names the checks ran on.
    overlays = _overlay_artifacts(sensitivity if options.sensitivity else None, layers, named_fb, tflite_path)
    if sensitivity is not None and options.sensitivity:
        from dataclasses import replace

        stripped_note = (
            "The overlay's keys are the tensor names before --strip-names (the written file has none; "
            "its tensor-name map, when the target writes one, gives them back)."
        )
        notes = sensitivity.notes + ((stripped_note,) if options.strip_names else ())
        sensitivity = replace(sensitivity, overlay=str(overlays[0].path), notes=notes)
    run_artifacts = (*run_artifacts, *overlays)
    export_section = ExportSection(
        quantize=options.quantize.value,
        target=target.name,
        channels_last=options.channels_last,
        channels_last_inputs=tuple(plan.inputs),
        channels_last_outputs=tuple(plan.outputs),
        strict=options.strict,
        io_dtype=(options.io_dtype or IODtype.FLOAT32).value if options.quantize.is_integer else None,
        strip_names=options.strip_names,
        size_bytes_with_names=named_size if options.strip_names else None,
    )
    report = RunReport(
        **_run_header(loaded, specs, plan),
        export=export_section,
        quantization=quant_result,
        target=TargetSection.from_hooks(target_report) if target.reports_target else None,
        artifacts=ArtifactsSection(
            str(tflite_path), str(json_path), str(md_path), str(options.junit) if options.junit else None,
            {a.key: str(a.path) for a in (*checked.artifacts, *run_artifacts)},
        ),
        flatbuffer=_flatbuffer_section(fb, named=named_fb),
        stages=tuple(stages.times),
        validation=_validation_section(parity),
        runtimes=runtimes,
        per_layer=layers,
        metadata=metadata_section,
        app=_app_section(fb, plan.inputs, plan.outputs),
        sensitivity=sensitivity,
        mixed_precision=mixed_precision,
        host_latency=host_latency,
    )
    report = _with_baseline(report, options.baseline)
    from .targets.base import FinishedRun

    # The target's last word, on the file as written: e.g. budgets on its final size, the micro
    # target's tensor-name map and C bundle.
    run = FinishedRun(fb, named_fb, report, checked, options, tflite_path, samples=checked_samples, source_module=export_base)
    finished = target.finish(run)
    if finished.report:
        report = run.report_with(finished.report)
    if finished.artifacts:
        from dataclasses import replace

        listed = {**report.artifacts.extra, **{a.key: str(a.path) for a in finished.artifacts}}
        report = replace(report, artifacts=replace(report.artifacts, extra=listed))
    files = [(tflite_path, fb.data)] + [(a.path, a.data) for a in (*checked.artifacts, *run_artifacts, *finished.artifacts)]
    return report, files


def _build_metadata(fb: FlatbufferModel, options: ExportOptions, reference_out: Sequence[Any], returned_keys: Sequence[str | None], image: Any) -> Any:
    """The TFLite model metadata of ``fb`` (model_metadata.py): each output's kind decided as
    parity decides it, so ``--labels`` names the same output and its count is checked here."""
    from .model_metadata import build_model_metadata

    names = list(fb.output_names)
    shapes = [tuple(t.shape) for t in reference_out]
    keys = list(returned_keys)
    order = _outputs_by_name(keys, names)
    if order is not None:
        shapes, keys = [shapes[i] for i in order], [keys[i] for i in order]
    return build_model_metadata(fb, options, _output_kinds(names, keys, shapes, options), image)


def _test_vectors_artifact(fb: FlatbufferModel, samples: Any, parity: Any, plan: Any, options: ExportOptions, loaded: Any, tflite_path: Path) -> Any:
    """``<stem>.testdata.npz`` (--emit-test-vectors) from the samples parity checked, written with
    the other artifacts and listed under the report's ``artifacts`` as ``test_vectors``."""
    from .targets.base import TargetArtifact
    from .testdata import build_reference_vectors, serialize_vectors, test_vectors_path

    feeds, references = samples
    vectors = build_reference_vectors(
        fb, feeds, references, parity,
        channels_last_inputs=plan.inputs, channels_last_outputs=plan.outputs,
        count=options.test_vectors_count, model_class=loaded.class_name, tool_version=__version__,
    )
    return TargetArtifact("test_vectors", test_vectors_path(tflite_path), serialize_vectors(vectors))


def _app_section(fb: FlatbufferModel, channels_last_inputs: Sequence[int], channels_last_outputs: Sequence[int]) -> Any:
    """What an app calls: the signature key and each input and output by its signature name."""
    from .reports.model import AppSection, AppTensor
    from .testdata import signature_tensors

    def rows(tensors: Sequence[Any]) -> tuple[AppTensor, ...]:
        return tuple(AppTensor(t.name, t.dtype, t.shape, t.layout, t.scale, t.zero_point) for t in tensors)

    inputs, outputs = signature_tensors(fb, channels_last_inputs, channels_last_outputs)
    key = fb.signatures[0]["key"] if fb.signatures else None
    return AppSection(signature_key=key or None, inputs=rows(inputs), outputs=rows(outputs))


def _parity_samples(specs: list[InputSpec], options: ExportOptions, example: tuple) -> list[tuple]:
    """The inputs parity runs on when no real held-out data was given (as _check_parity makes them)."""
    from .inputs import make_samples

    return make_samples(specs, options.samples, options.seed, example)


def _calibration_sets(options: ExportOptions, specs: list[InputSpec]) -> tuple[Any, list[tuple] | None]:
    """Calibration samples, and held-out real samples for parity (None: parity uses seeded random
    inputs, which are never the calibration inputs)."""
    import torch

    from .quantization import DEFAULT_CALIBRATION_SAMPLES, load_calibration_data, synthetic_calibration

    if options.calibration_data:
        data = load_calibration_data(
            options.calibration_data,
            specs,
            image_size=options.image_size,
            mean=options.mean,
            std=options.std,
            layout=options.image_layout,
        )
        if len(data) < 2:
            raise UsageError(
                f"The calibration data {options.calibration_data} holds {len(data)} sample; at least 2 are needed "
                "(some are held out to check parity on inputs the model was not calibrated on).",
                "Add more samples.",
            )
        holdout_n = min(options.samples, max(1, len(data) // 4))
        calibration, holdout = data.split(holdout_n)
        calibration = calibration.limit(options.calibration_samples)
        parity = [tuple(torch.from_numpy(np_array_copy(a)) for a in sample) for sample in holdout.samples]
        return calibration, parity
    n = options.calibration_samples or DEFAULT_CALIBRATION_SAMPLES
    # a seed apart from the parity inputs' seed, so parity never runs on calibration inputs
    return synthetic_calibration(specs, n, seed=options.seed + 1_000_003), None


def np_array_copy(a: Any) -> Any:
    return np.ascontiguousarray(np.array(a, copy=True))


def _limiting_layers(quant_result: Any, float_bytes: bytes | None, export_module: Any, export_example: tuple, calibration: Any, parity_samples: Any,
                     specs: list[InputSpec], options: ExportOptions, example: tuple, plan: Any, target: Any, module: Any) -> Any:
    """On a target with nothing to promote a layer to (the Edge TPU), a failed int8 parity is
    explained instead: the sensitivity ranking, with a note naming the layers that limit accuracy."""
    from dataclasses import replace

    from .conversion import convert_module
    from .quantization.mixed_precision import AccuracyTarget, run_sensitivity_and_mixed_precision

    if float_bytes is None:  # only PT2E ran: no float model was converted yet
        float_bytes = convert_module(export_module, export_example, strict=options.strict, verbose=options.verbose)
    heldout = parity_samples if parity_samples is not None else _parity_samples(specs, options, example)
    _, sensitivity, _ = run_sensitivity_and_mixed_precision(
        quant_result, float_bytes=float_bytes, export_module=export_module,
        calibration=_calibration_in_layout(calibration, plan.inputs),
        heldout=[tuple(np.ascontiguousarray(a) for a in _to_layout([t.numpy() for t in s], plan.inputs, nhwc=True)) for s in heldout],
        want_sensitivity=True, search_mode=None, precision="", target=AccuracyTarget(), io_dtype=IODtype.FLOAT32,
        source_module=module, verbose=options.verbose,
    )
    top = ", ".join(layer.label for layer in sensitivity.layers[:3])
    note = (
        f"Parity failed, and --target {target.name} has no int16 or float kernels to raise a layer to. "
        f"The layers that limit accuracy most (sensitivity ranks 1-3): {top}. Real --calibration-data "
        "(ranges from the inputs the model will see) or a rewrite of those layers (bounded activations "
        "such as ReLU6, no outlier channels) is what helps there."
    )
    return replace(sensitivity, notes=(note, *sensitivity.notes))


def _validate_sensitivity(module: Any, example: tuple, specs: list[InputSpec], options: ExportOptions, plan: Any) -> Any:
    """validate --sensitivity: the ranking of the reference converted to float (in the validated
    file's layout) with synthetic calibration; keyed by the float model's tensor names, which a
    file from the flatbuffer backend shares (the overlay keeps the names the file has)."""
    from .conversion import convert_module, wrap_channels_last
    from .quantization import DEFAULT_SYNTHETIC_SAMPLES, synthetic_calibration
    from .quantization.mixed_precision import AccuracyTarget, run_sensitivity_and_mixed_precision

    export_module = wrap_channels_last(module, plan) if plan.active else module
    export_example = tuple(t.permute(0, 2, 3, 1).contiguous() if i in plan.inputs else t for i, t in enumerate(example))
    float_bytes = convert_module(export_module, export_example, strict=options.strict, verbose=options.verbose)
    calibration = _calibration_in_layout(synthetic_calibration(specs, DEFAULT_SYNTHETIC_SAMPLES, seed=options.seed + 1_000_003), plan.inputs)
    _, sensitivity, _ = run_sensitivity_and_mixed_precision(
        None, float_bytes=float_bytes, export_module=export_module, calibration=calibration, heldout=[],
        want_sensitivity=True, search_mode=None, precision="", target=AccuracyTarget(), io_dtype=IODtype.FLOAT32,
        source_module=module, verbose=options.verbose,
    )
    return sensitivity


def _overlay_artifacts(sensitivity: Any, layers: Any, named_fb: FlatbufferModel, tflite_path: Path) -> tuple:
    """The Model Explorer node-data files: keyed by the tensor names of the model as checked (the
    written model's, or with --strip-names the names it had before stripping)."""
    from .reports.model_explorer import overlay_artifact

    found = []
    if sensitivity is not None:
        found.append(overlay_artifact("sensitivity", sensitivity, named_fb, tflite_path))
    if layers is not None:
        found.append(overlay_artifact("per_layer", layers, named_fb, tflite_path))
    return tuple(found)


def _calibration_in_layout(calibration: Any, nhwc_inputs: Sequence[int]) -> Any:
    """The wrapped module takes NHWC for the channels-last inputs: move the samples there too."""
    if not nhwc_inputs:
        return calibration
    from .quantization import CalibrationSet

    moved = tuple(tuple(_to_layout(list(sample), nhwc_inputs, nhwc=True)) for sample in calibration.samples)
    moved = tuple(tuple(np.ascontiguousarray(a) for a in sample) for sample in moved)
    return CalibrationSet(moved, calibration.source, calibration.real_data)


def _run_header(loaded: Any, specs: list[InputSpec], plan: Any) -> dict:
    """The RunReport fields that say what ran on what: tool, libraries, time, model and inputs."""
    return {
        "tool": ToolSection(__version__),
        **_library_fields(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": ModelSection(loaded.source, loaded.kind.value, loaded.class_name),
        "inputs": tuple(
            InputSection(s.name, tuple(s.shape), s.dtype, "NHWC" if i in plan.inputs else None) for i, s in enumerate(specs)
        ),
    }


def _validation_section(parity: Any) -> Any:
    return parity if parity is not None else SkippedValidation("--no-validate was given")


def _with_baseline(report: RunReport, baseline: str | None) -> RunReport:
    """The report with its baseline section (--baseline): the regressions against an earlier report."""
    if not baseline:
        return report
    from dataclasses import replace

    from .reports.baseline import compare_with_baseline
    from .reports.json_report import load_report

    regressions = compare_with_baseline(report, load_report(baseline))
    return replace(report, baseline=BaselineSection(str(baseline), tuple(regressions)))


def _write_run(report: RunReport, files: Sequence[tuple[Path, bytes]], options: ExportOptions, stages: _Stages) -> ExportResult:
    """The atomic write of every artifact: the model files given, then the renderings of the report
    (at the paths its artifacts section names)."""
    from .reports.json_report import render_json
    from .reports.markdown import render_markdown

    paths = report.artifacts
    json_path, md_path = Path(paths.report_json), Path(paths.report_markdown)
    result = ExportResult(Path(paths.tflite), json_path, md_path, report)
    layers = report.per_layer
    data = result.report  # the JSON form, computed once: written and returned
    with stages.run("write", "Writing artifacts"):
        with ArtifactSet() as artifacts:
            for path, content in files:
                artifacts.add(path, content)
            artifacts.add(json_path, render_json(data))
            artifacts.add(md_path, render_markdown(report))
            if layers is not None and options.per_layer_plot:
                artifacts.add(options.per_layer_plot, _plot_bytes(layers, report.sensitivity))
            if options.junit:
                from .reports.junit import render_junit

                check_writable_folder(Path(options.junit))
                artifacts.add(options.junit, render_junit(report))
            artifacts.commit()
    return result


def _load_with_inputs(
    model: Any, options: ExportOptions, example_inputs: tuple | None
) -> tuple[Any, list[InputSpec], tuple, list, list[str | None]]:
    """Load the model, settle its input specs (named) and example, and run it once eagerly: its
    flattened outputs and the key each was returned under."""
    from .inputs import check_model_accepts
    from .loading import load_model

    loaded = load_model(
        model,
        example_inputs=_example_for_loading(options, example_inputs),
        weights=options.weights,
        trust_pickle=options.trust_pickle,
    )
    specs, example = _resolve_inputs(loaded, options, example_inputs)
    returned = check_model_accepts(loaded.module, example, specs)
    outputs = _flatten_outputs(returned)
    specs = _named_specs(loaded, specs, options)
    _check_output_names(options, len(outputs))
    return loaded, specs, example, outputs, _output_keys(returned)


def _named_specs(loaded: Any, specs: list[InputSpec], options: ExportOptions) -> list[InputSpec]:
    """The specs named after --input-names or forward()'s parameters: every file a user hands in
    (calibration archives) is keyed by the same names as the signature."""
    from dataclasses import replace

    from .io_names import check_count, forward_parameter_names, resolve_names

    check_count(options.input_names, len(specs), "--input-names", "input")
    from_model = list(loaded.input_names or ())[: len(specs)] or forward_parameter_names(loaded.module, len(specs))
    names = resolve_names(options.input_names, from_model, [f"args_{i}" for i in range(len(specs))])
    return [replace(spec, name=name) for spec, name in zip(specs, names)]


def _check_output_names(options: ExportOptions, count: int) -> None:
    from .io_names import check_count

    check_count(options.output_names, count, "--output-names", "output")


def _name_signature(fb: FlatbufferModel, specs: Sequence[InputSpec], returned_keys: Sequence[str | None], options: ExportOptions) -> FlatbufferModel:
    """The converter's signature (``args_0``..., ``output_0``...) renamed after the model."""
    from .io_names import resolve_names
    from .passes.flatbuffer import rename_signature_pass, run_flatbuffer_passes

    inputs = resolve_names((), [s.name for s in specs], fb.input_names)
    outputs = resolve_names(options.output_names, returned_keys, fb.output_names)
    rename = functools.partial(
        rename_signature_pass, input_names=inputs, output_names=outputs, signature_key=options.signature_key
    )
    return run_flatbuffer_passes(fb, [rename], origin="the model with named inputs and outputs").model


def _example_for_loading(options: ExportOptions, example_inputs: tuple | None) -> tuple | None:
    """TorchScript conversion needs example inputs at load time."""
    if example_inputs is not None:
        return tuple(example_inputs)
    if options.input_shapes:
        from .inputs import example_tensors, specs_from_options

        return example_tensors(specs_from_options(options.input_shapes, options.input_dtypes), options.seed)
    return None


def _flatbuffer_section(fb: FlatbufferModel, named: FlatbufferModel | None = None) -> FlatbufferSection:
    from .transpose_report import find_transposes

    return FlatbufferSection(
        size_bytes=fb.size_bytes,
        sha256=hashlib.sha256(fb.data).hexdigest(),
        num_operators=fb.num_operators,
        op_counts=dict(fb.op_counts),
        num_tensors=len(fb.tensors),
        num_subgraphs=fb.num_subgraphs,
        min_runtime_version=fb.min_runtime_version,
        inputs=tuple(fb.input_tensors),
        outputs=tuple(fb.output_tensors),
        fully_integer=fb.is_fully_integer,
        transposes=find_transposes(fb, named),
    )


def _plot_bytes(layers: Any, sensitivity: Any = None) -> bytes:
    import tempfile

    from .validators.layer_plot import plot_layer_sqnr

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layers.png"
        plot_layer_sqnr(layers, path, sensitivity)
        return path.read_bytes()


def _check_parity(
    module: Any,
    example: tuple,
    specs: list[InputSpec],
    options: ExportOptions,
    fb: FlatbufferModel,
    plan: Any,
    stages: _Stages,
    *,
    samples: list[tuple] | None = None,
    runner_factory: Callable[[FlatbufferModel], Any] | None = None,
) -> tuple[Any, Any, Any, Any]:
    """Output parity, then (with --per-layer) the layer-by-layer comparison on the same samples;
    with --runtime compiled-model or both, each runtime's parity and their differences too. Also
    returns the samples checked: the float feeds in the model's layout and PyTorch's outputs."""
    from .inputs import make_samples

    if samples is None:
        samples = make_samples(specs, options.samples, options.seed, example)
    with stages.run("validate", f"Checking parity on {len(samples)} samples"):
        parity, runtimes, checked = _validate(module, samples, options, fb, plan, runner_factory)
    layers = None
    if options.per_layer:
        from .validators.layers import per_layer_parity

        with stages.run("per_layer", "Comparing every layer with PyTorch (reference kernels)"):
            from .isolation import run_isolated

            layers = run_isolated(
                per_layer_parity,
                module,
                tuple(example),
                fb,
                samples=[tuple(t.numpy() for t in sample) for sample in samples],
                channels_last_inputs=tuple(plan.inputs),
                min_sqnr_db=options.per_layer_min_sqnr,
                stage="per-layer comparison",
                backend="the LiteRT reference kernels",
            )
    return parity, layers, runtimes, checked


def _validate(
    module: Any,
    samples: list[tuple],
    options: ExportOptions,
    fb: FlatbufferModel,
    plan: Any,
    runner_factory: Callable[[FlatbufferModel], Any] | None = None,
):
    import torch

    from .isolation import run_isolated
    from .targets.base import litert_runner
    from .validators.parity import compare_outputs

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
                torch_names = _output_keys(outputs)
            references.append([t.detach().float().numpy() for t in _flatten_outputs(outputs)])
            feeds.append(_to_layout([t.numpy() for t in sample], plan.inputs, nhwc=True))

    from .runtime import CompiledModelRunner

    # --runtime: the target's runner (the LiteRT interpreter unless the target brings its own),
    # LiteRT 2.x's CompiledModel, or both on the same samples.
    interpreter = runner_factory or litert_runner
    factories = {"interpreter": [interpreter], "compiled-model": [CompiledModelRunner], "both": [interpreter, CompiledModelRunner]}[options.runtime]

    def run_candidate():
        runs = []
        for factory in factories:
            runner = factory(fb)
            outs = [_to_layout(runner.run(feed), plan.outputs, nhwc=False) for feed in feeds]
            runs.append((outs, [o.name for o in runner.outputs], [o.scale for o in runner.outputs], runner.name))
        return runs

    # The flatbuffer runs in a child process: a native crash becomes exit 3 naming this stage.
    backend = _backend_label(runner_factory) if options.runtime == "interpreter" else (
        "LiteRT's CompiledModel (CPU)" if options.runtime == "compiled-model" else _backend_label(runner_factory) + " or LiteRT's CompiledModel (CPU)"
    )
    runs = run_isolated(run_candidate, stage="parity check", backend=backend)
    candidates, names, scales, runtime = runs[0]
    if len(names) != len(references[0]):
        raise UsageError(
            f"The flatbuffer has {len(names)} outputs but the PyTorch model returns {len(references[0])}.",
            "This can happen when outputs are constants or duplicates; run with --no-validate to export anyway.",
        )
    order = _outputs_by_name(torch_names, names)
    if order is not None:  # both sides name their outputs: pair by name, not by position
        references = [[ref[i] for i in order] for ref in references]
        torch_names = [torch_names[i] for i in order]
    kinds = _output_kinds(names, torch_names, [tuple(r.shape) for r in references[0]], options)
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
    results = [
        compare_outputs(
            references,
            run_outputs,
            names=names,
            thresholds=options.thresholds(),
            runtime=run_runtime,
            output_scales=scales,
            notes=notes,
            kinds=kinds,
        )
        for run_outputs, _, _, run_runtime in runs
    ]
    checked = (feeds, references)
    if options.runtime == "interpreter":
        return results[0], None, checked
    from .validators.runtimes import RuntimeComparison, compare_runtimes

    differences = compare_runtimes(names, runs[0][0], runs[1][0], scales) if len(runs) == 2 else ()
    return results[0], RuntimeComparison(options.runtime, tuple(results), differences), checked


def _outputs_by_name(torch_names: Sequence[str | None], names: Sequence[str]) -> list[int] | None:
    """For each flatbuffer output (``names``), the index of the PyTorch output of the same name;
    None (pair by position) unless every output on both sides is named and the names are the same."""
    if len(torch_names) != len(names) or set(torch_names) != set(names) or len(set(names)) != len(names):
        return None
    index = {n: i for i, n in enumerate(torch_names)}
    return [index[n] for n in names]


def _output_keys(returned: Any) -> list[str | None]:
    """Per flattened output, the dict key or attribute PyTorch returned it under (None for a
    tuple/list position or a bare tensor): names such as ``logits`` or ``pooler_output``."""
    from torch.utils import _pytree as pytree

    keys: list[str | None] = []
    for path, _ in pytree.tree_flatten_with_path(returned)[0]:
        last = path[-1] if path else None
        key = getattr(last, "key", None)
        if key is None:
            key = getattr(last, "name", None)
        keys.append(key if isinstance(key, str) else None)
    return keys


def _output_kinds(names: Sequence[str], torch_names: Sequence[str | None], shapes: Sequence[tuple[int, ...]], options: ExportOptions) -> list:
    """What each output is (classification, embedding, regression) and how that was decided."""
    from .validators.output_kinds import OutputIdentity, resolve_output_kinds

    identities = []
    for i, (name, shape) in enumerate(zip(names, shapes)):
        torch_name = torch_names[i] if i < len(torch_names) else None
        identities.append(OutputIdentity(i, tuple(dict.fromkeys(n for n in (name, torch_name) if n)), shape))
    return resolve_output_kinds(identities, options.output_kinds, options.labels)


def _parity_runner_factory(target: Any, checked: Any) -> Any:
    factory = functools.partial(target.parity_runner, checked=checked)
    factory.backend_label = checked.runner_label  # type: ignore[attr-defined]
    return factory


def _backend_label(runner_factory: Any) -> str:
    """The runtime parity runs through, named in the message when it crashes natively."""
    return getattr(runner_factory, "backend_label", None) or "the LiteRT interpreter (XNNPACK)"


def infer_precision(fb: Any) -> QuantizeMode:
    """The precision a flatbuffer was exported at, read from its tensors (for default thresholds)."""
    activations = [t for t in fb.tensors if not t.is_constant]
    constants = [t for t in fb.tensors if t.is_constant]
    if any(t.dtype == "int16" and t.quant for t in activations):
        return QuantizeMode.INT16X8
    if fb.is_fully_integer or any(t.dtype in ("int8", "uint8") and t.quant for t in activations):
        return QuantizeMode.INT8
    if any(t.dtype == "int4" and t.quant for t in constants):
        return QuantizeMode.INT4
    if any(t.dtype == "int8" and t.quant for t in constants):
        return QuantizeMode.DYNAMIC_INT8
    if any(t.dtype == "float16" for t in constants):
        return QuantizeMode.FP16
    return QuantizeMode.NONE


def _channels_last_from_flatbuffer(fb: Any, specs: list[InputSpec]) -> tuple[int, ...]:
    """Inputs whose flatbuffer shape is the NHWC form of the PyTorch NCHW shape."""
    found = []
    for i, (spec, t) in enumerate(zip(specs, fb.input_tensors)):
        s = spec.shape
        if len(s) == 4 and tuple(t.shape) != s and tuple(t.shape) == (s[0], s[2], s[3], s[1]):
            found.append(i)
    return tuple(found)


def _check_input_shapes(fb: Any, specs: list[InputSpec], nhwc_in: Sequence[int]) -> None:
    """Input shapes that the flatbuffer cannot take are the user's to fix (exit 2), not a runtime
    failure (exit 3). A dynamic dimension (-1 in the signature) takes any size."""
    for i, (spec, tensor) in enumerate(zip(specs, fb.input_tensors)):
        s = spec.shape
        expected = (s[0], s[2], s[3], s[1]) if i in nhwc_in else s
        signature = tuple(tensor.shape_signature) or tuple(tensor.shape)
        if len(signature) != len(expected) or any(d >= 0 and d != e for d, e in zip(signature, expected)):
            raise InputSpecError(
                f"Input {i} ({tensor.name}) of the flatbuffer has shape "
                f"{','.join(map(str, tensor.shape))}, but the reference model is given {spec.shape_text}.",
                "Pass --input-shape with the shape the flatbuffer was exported with (or drop it: "
                "the flatbuffer's own input shapes are used).",
            )


def validate(
    tflite: str | Path,
    reference: Any = None,
    *,
    test_vectors: str | Path | None = None,
    example_inputs: tuple | None = None,
    report_prefix: str | Path | None = None,
    options: ExportOptions | None = None,
    on_stage: Callable[[str], None] | None = None,
    tensor_names: str | Path | None = None,
    **option_values: Any,
) -> ExportResult:
    """Check an existing flatbuffer against a PyTorch model (any source kind ``export`` accepts).

    Writes ``<stem>.validate.report.json`` / ``.md`` beside the flatbuffer (or at ``report_prefix``).
    Thresholds default to the flatbuffer's precision, read from its tensors. A flatbuffer whose
    inner tensor names were stripped gets them back, in memory, from ``tensor_names`` (default: the
    ``<stem>.tensors.json`` beside it, when there is one).

    With ``test_vectors`` (a ``<stem>.testdata.npz`` from ``--emit-test-vectors``) instead of a
    reference, the model runs on the stored inputs and is judged against the stored PyTorch outputs
    with the stored thresholds and output kinds: no PyTorch needed.
    """
    explicit_quantize = "quantize" in option_values
    if options is None:
        options = ExportOptions(**option_values)
    if test_vectors is not None:
        return _validate_with_test_vectors(
            Path(tflite), Path(test_vectors), reference, example_inputs, report_prefix, options, on_stage, tensor_names, explicit_quantize
        )
    if reference is None:
        raise UsageError(
            "validate needs what to check the model against: --reference (the PyTorch model) or --test-vectors "
            "(a <stem>.testdata.npz written by --emit-test-vectors).",
            "Add --reference MODEL or --test-vectors FILE.",
        )
    tflite_path = Path(tflite)
    prefix = Path(report_prefix) if report_prefix else Path(str(tflite_path.with_suffix("")) + ".validate")
    json_path, md_path = Path(f"{prefix}.report.json"), Path(f"{prefix}.report.md")
    from .tensor_names import tensor_names_path

    names_path = Path(tensor_names) if tensor_names else tensor_names_path(tflite_path)
    from .reports.model_explorer import overlay_path

    overlays = [(f"the Model Explorer {kind} overlay (named after --report)", overlay_path(Path(f"{prefix}.tflite"), kind))
                for kind, on in (("sensitivity", options.sensitivity), ("per_layer", options.per_layer)) if on]
    check_outputs_apart(
        [("the JSON report (--report)", json_path), ("the Markdown report (--report)", md_path), *overlays, *_side_outputs(options)],
        [("the flatbuffer to validate", tflite_path), ("the tensor-name map", names_path), *_input_paths(reference, options)],
    )
    created: list[Path] = []
    try:
        return _validate_flatbuffer(
            tflite_path, reference, example_inputs, options, explicit_quantize, json_path, md_path, created, on_stage,
            names_path if tensor_names or names_path.exists() else None, bool(tensor_names),
        )
    except BaseException:
        remove_created_folders(created)
        raise


def _validate_flatbuffer(
    tflite_path: Path,
    reference: Any,
    example_inputs: tuple | None,
    options: ExportOptions,
    explicit_quantize: bool,
    json_path: Path,
    md_path: Path,
    created: list[Path],
    on_stage: Callable[[str], None] | None,
    names_path: Path | None = None,
    names_given: bool = False,
) -> ExportResult:
    from .flatbuffer import load_flatbuffer
    from .targets.base import get_target

    fb = load_flatbuffer(tflite_path)  # rejects a bad file before any runtime sees it
    file_fb = fb  # what the report describes; parity may run on it with its names restored
    # A map found beside a file that kept its names is stale (an earlier export's) and not needed;
    # one the user named is always checked.
    if names_path is not None and (names_given or not fb.has_inner_tensor_names):
        from .tensor_names import load_tensor_name_map, restore_tensor_names

        name_map = load_tensor_name_map(names_path)
        name_map.check_belongs_to(fb, names_path, tflite_path)
        fb = restore_tensor_names(fb, name_map, names_path)
    if options.per_layer and not fb.has_inner_tensor_names:
        raise UsageError(
            f"{tflite_path} has no tensor names besides its inputs and outputs (it was written with "
            "--strip-names), and per-layer parity finds each layer's tensor by the PyTorch module "
            "path in its name.",
            "Pass the <stem>.tensors.json written with it (--tensor-names FILE; --target micro writes "
            "one beside the model), or run --per-layer on an export made without --strip-names: "
            "stripping changes no computation, so its per-layer numbers hold for the stripped file too.",
        )
    if not explicit_quantize:
        from dataclasses import replace

        options = replace(options, quantize=infer_precision(fb))
    if options.sensitivity and options.quantize is not QuantizeMode.INT8:
        raise UsageError(
            f"--sensitivity ranks operators by what int8 quantization costs them; {tflite_path} is {options.quantize.value}.",
            "Validate an int8 model, or drop --sensitivity.",
        )
    check_writable_folder(json_path, created)
    _check_side_outputs(options, created)
    stages = _Stages(on_stage)
    from .library_output import quiet_libraries

    with quiet_libraries(options.verbose or not options.quiet_libraries):
        from .reports.model_explorer import overlay_path
        from .sandbox import run_for_model

        report, files = run_for_model(
            reference, options.trust_pickle, stages, _validate_against_reference,
            fb, file_fb, tflite_path, reference, example_inputs, options, json_path, md_path, stages,
        )
        overlay_stem = Path(str(json_path)[: -len(".report.json")] + ".tflite")
        check_artifact_paths(files, [(kind, overlay_path(overlay_stem, kind)) for kind in ("sensitivity", "per_layer")])
        return _write_run(report, files, options, stages)


def _validate_against_reference(
    fb: FlatbufferModel, file_fb: FlatbufferModel, tflite_path: Path, reference: Any, example_inputs: tuple | None,
    options: ExportOptions, json_path: Path, md_path: Path, stages: _Stages,
) -> tuple[RunReport, list[tuple[Path, bytes]]]:
    """Load the reference, check parity and build the report; ``validate`` writes it."""
    from .targets.base import get_target

    from .conversion import ChannelsLastPlan

    from .loading import ModelKind, detect_kind, is_module_reference

    if not options.input_shapes and example_inputs is None:
        stored_shapes = (
            isinstance(reference, (str, Path))
            and not is_module_reference(str(reference))
            and detect_kind(Path(reference)) is ModelKind.EXPORTED_PROGRAM
        )
        if not stored_shapes:
            # The flatbuffer knows its input shapes; with --channels-last they are NHWC.
            from dataclasses import replace

            shapes = []
            for t in fb.input_tensors:
                s = tuple(t.shape)
                shapes.append((s[0], s[3], s[1], s[2]) if options.channels_last and len(s) == 4 else s)
            dtypes = tuple("float32" if (t.quant or t.is_float) else t.dtype for t in fb.input_tensors)
            options = replace(options, input_shapes=tuple(shapes), input_dtypes=dtypes)
    with stages.run("load", "Loading the reference model"):
        loaded, specs, example, ref_out, _ = _load_with_inputs(reference, options, example_inputs)
        module = loaded.module
    if len(specs) != len(fb.inputs):
        raise InputSpecError(
            f"The flatbuffer has {len(fb.inputs)} inputs but the reference model was given {len(specs)}.",
            "Pass one --input-shape per input of the model the flatbuffer was exported from.",
        )
    nhwc_in = _channels_last_from_flatbuffer(fb, specs)
    _check_input_shapes(fb, specs, nhwc_in)
    nhwc_out = tuple(
        i
        for i, (r, t) in enumerate(zip(ref_out, fb.output_tensors))
        if r.dim() == 4 and tuple(t.shape) != tuple(r.shape) and tuple(t.shape) == (r.shape[0], r.shape[2], r.shape[3], r.shape[1])
    )
    plan = ChannelsLastPlan(nhwc_in, nhwc_out)
    parity, layers, runtimes, _ = _check_parity(module, example, specs, options, fb, plan, stages)
    sensitivity = None
    if options.sensitivity:
        with stages.run("sensitivity", "Ranking operators by sensitivity (the reference converted to float)"):
            sensitivity = _validate_sensitivity(module, example, specs, options, plan)
    overlay_stem = Path(str(json_path)[: -len(".report.json")] + ".tflite")  # <prefix>.<kind>.json
    overlays = _overlay_artifacts(sensitivity, layers, fb, overlay_stem)
    if sensitivity is not None:
        from dataclasses import replace

        sensitivity = replace(sensitivity, overlay=str(overlays[0].path))
    export_section = ValidateSection(
        quantize=options.quantize.value,
        target=get_target(options.target).name,
        channels_last=plan.active,
        channels_last_inputs=tuple(plan.inputs),
        channels_last_outputs=tuple(plan.outputs),
        strict=options.strict,
    )
    report = RunReport(
        **_run_header(loaded, specs, plan),
        export=export_section,
        artifacts=ArtifactsSection(str(tflite_path), str(json_path), str(md_path), str(options.junit) if options.junit else None),
        flatbuffer=_flatbuffer_section(file_fb),
        stages=tuple(stages.times),
        validation=_validation_section(parity),
        runtimes=runtimes,
        per_layer=layers,
        app=_app_section(file_fb, plan.inputs, plan.outputs),
        sensitivity=sensitivity,
    )
    if overlays:
        from dataclasses import replace

        report = replace(report, artifacts=replace(report.artifacts, extra={a.key: str(a.path) for a in overlays}))
    report = _with_baseline(report, options.baseline)
    return report, [(a.path, a.data) for a in overlays]


# Options that only mean something with a PyTorch reference: refused beside --test-vectors, whose
# file fixes the inputs, their layout, the output kinds and the thresholds' defaults.
_REFERENCE_ONLY_OPTIONS = (
    ("input_shapes", "--input-shape"), ("input_dtypes", "--input-dtype"), ("samples", "--samples"), ("seed", "--seed"),
    ("channels_last", "--channels-last"), ("per_layer", "--per-layer"), ("per_layer_min_sqnr", "--per-layer-min-sqnr"),
    ("per_layer_plot", "--per-layer-plot"), ("weights", "--weights"), ("trust_pickle", "--trust-pickle"),
    ("output_kinds", "--output-kind"), ("labels", "--labels"),
)


def _validate_with_test_vectors(
    tflite_path: Path,
    vectors_path: Path,
    reference: Any,
    example_inputs: tuple | None,
    report_prefix: str | Path | None,
    options: ExportOptions,
    on_stage: Callable[[str], None] | None,
    tensor_names: str | Path | None,
    explicit_quantize: bool,
) -> ExportResult:
    """``validate MODEL.tflite --test-vectors FILE``: the model on the stored inputs, judged against
    the stored outputs, thresholds and kinds (``--atol`` and the other threshold options tighten or
    loosen them; ``--runtime`` picks the runtimes)."""
    defaults = ExportOptions()
    given = [flag for name, flag in _REFERENCE_ONLY_OPTIONS if getattr(options, name) != getattr(defaults, name)]
    given += [flag for flag, value in (("--reference", reference), ("example_inputs", example_inputs),
                                       ("--tensor-names", tensor_names)) if value is not None]
    if explicit_quantize:
        given.append("quantize")
    if given:
        raise UsageError(
            f"--test-vectors and {', '.join(given)} contradict each other: the test-vector file holds the inputs "
            "(their shapes, dtypes and layout), PyTorch's outputs, the output kinds and the thresholds, and no "
            "PyTorch model runs.",
            f"Drop {', '.join(given)}, or drop --test-vectors and check against --reference.",
        )
    prefix = Path(report_prefix) if report_prefix else Path(str(tflite_path.with_suffix("")) + ".validate")
    json_path, md_path = Path(f"{prefix}.report.json"), Path(f"{prefix}.report.md")
    check_outputs_apart(
        [("the JSON report (--report)", json_path), ("the Markdown report (--report)", md_path), *_side_outputs(options)],
        [("the flatbuffer to validate", tflite_path), ("the test vectors (--test-vectors)", vectors_path), *_input_paths(None, options)],
    )
    created: list[Path] = []
    try:
        from .flatbuffer import load_flatbuffer
        from .testdata import check_vectors_fit_model, load_reference_vectors

        stages = _Stages(on_stage)
        with stages.run("load", "Reading the model and the test vectors"):
            fb = load_flatbuffer(tflite_path)
            vectors = load_reference_vectors(vectors_path)
            check_vectors_fit_model(vectors, fb, vectors_path, tflite_path)
        check_writable_folder(json_path, created)
        _check_side_outputs(options, created)
        from .library_output import quiet_libraries

        with quiet_libraries(options.verbose or not options.quiet_libraries):
            with stages.run("validate", f"Checking parity on {vectors.count} test vectors"):
                parity, runtimes = _parity_on_vectors(fb, vectors, options)
        nhwc_in = tuple(i for i, t in enumerate(vectors.input_tensors) if t.layout == "NHWC")
        nhwc_out = tuple(k for k, t in enumerate(vectors.output_tensors) if t.layout == "NHWC")
        from .targets.base import get_target

        report = RunReport(
            tool=ToolSection(__version__),
            **_library_fields(),
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            model=ModelSection(str(vectors_path), "test_vectors", vectors.model_class),
            inputs=tuple(
                InputSection(t.name, (t.shape[0], t.shape[3], t.shape[1], t.shape[2]) if i in nhwc_in else t.shape, t.dtype,
                             "NHWC" if i in nhwc_in else None)
                for i, t in enumerate(vectors.input_tensors)
            ),
            export=ValidateSection(
                quantize=infer_precision(fb).value,
                target=get_target(options.target).name,
                channels_last=bool(nhwc_in or nhwc_out),
                channels_last_inputs=nhwc_in,
                channels_last_outputs=nhwc_out,
                strict=False,
                test_vectors=str(vectors_path),
            ),
            artifacts=ArtifactsSection(str(tflite_path), str(json_path), str(md_path), str(options.junit) if options.junit else None),
            flatbuffer=_flatbuffer_section(fb),
            stages=tuple(stages.times),
            validation=parity,
            runtimes=runtimes,
            app=_app_section(fb, nhwc_in, nhwc_out),
        )
        report = _with_baseline(report, options.baseline)
        return _write_run(report, [], options, stages)
    except BaseException:
        remove_created_folders(created)
        raise


def _parity_on_vectors(fb: FlatbufferModel, vectors: Any, options: ExportOptions) -> tuple[Any, Any]:
    """Each runtime --runtime names on the stored inputs (integer inputs fed as stored: the runners
    pass integer arrays through unchanged), compared output by output with the stored outputs,
    thresholds and kinds, in PyTorch's layout like the export's own parity check."""
    import hashlib
    from dataclasses import replace

    from .config import OutputKind
    from .isolation import run_isolated
    from .runtime import CompiledModelRunner
    from .targets.base import litert_runner
    from .validators.output_kinds import KindDecision, KindSource
    from .validators.parity import ParityResult, compare_outputs

    factories = {"interpreter": [litert_runner], "compiled-model": [CompiledModelRunner], "both": [litert_runner, CompiledModelRunner]}[options.runtime]
    samples = [[a[s] for a in vectors.inputs] for s in range(vectors.count)]

    def run_all():
        runs = []
        for factory in factories:
            runner = factory(fb)
            outs = [runner.run(feed) for feed in samples]
            runs.append((outs, [o.scale for o in runner.outputs], runner.name))
        return runs

    backend = {"interpreter": "the LiteRT interpreter (XNNPACK)", "compiled-model": "LiteRT's CompiledModel (CPU)"}.get(
        options.runtime, "the LiteRT interpreter (XNNPACK) or LiteRT's CompiledModel (CPU)"
    )
    runs = run_isolated(run_all, stage="parity check", backend=backend)
    nhwc_out = [k for k, t in enumerate(vectors.output_tensors) if t.layout == "NHWC"]

    def torch_layout(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return _to_layout([np.asarray(a) for a in arrays], nhwc_out, nhwc=False)

    expected = [torch_layout([e[s] for e in vectors.expected]) for s in range(vectors.count)]
    names = [t.name for t in vectors.output_tensors]
    overrides = dict(
        atol=options.atol, min_sqnr_db=options.min_sqnr, min_cosine=options.min_cosine, min_top1=options.min_top1,
        min_top5=options.min_top5, min_neighbour_agreement=options.min_neighbour_agreement,
        max_rel_l2=options.max_rel_l2, max_error_steps=options.max_error_steps,
    )
    thresholds = [t.override(**overrides) for t in vectors.thresholds]
    merged: dict = {}
    for t in thresholds:
        for key, value in vars(t).items():
            if value is not None:
                merged.setdefault(key, value)
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
    results = []
    for outs, scales, runtime in runs:
        candidate = [torch_layout(o) for o in outs]
        per_output = []
        for k, name in enumerate(names):
            decision = KindDecision(OutputKind(vectors.kinds[k]), KindSource(vectors.kind_sources[k]))
            per_output.append(compare_outputs(
                [[e[k]] for e in expected], [[c[k]] for c in candidate], names=[name], thresholds=thresholds[k],
                runtime=runtime, output_scales=[scales[k]], kinds=[decision],
            ))
        results.append(ParityResult(
            samples=vectors.count,
            thresholds=Thresholds(**merged),
            outputs=tuple(replace(r.outputs[0], index=k) for k, r in enumerate(per_output)),
            runtime=runtime,
            notes=tuple(notes) + tuple(n for r in per_output for n in r.notes),
        ))
    if options.runtime == "interpreter":
        return results[0], None
    from .validators.runtimes import RuntimeComparison, compare_runtimes

    differences = compare_runtimes(names, runs[0][0], runs[1][0], runs[0][1]) if len(runs) == 2 else ()
    return results[0], RuntimeComparison(options.runtime, tuple(results), differences)
