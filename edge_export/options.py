"""What an export is asked to do: ``ExportOptions``, checked when it is built (a bad value fails
before any work), and the thresholds it implies.

The options are grouped by what reads them, each group a frozen dataclass that checks itself:

    inputs        InputOptions         loading and tracing: shapes, dtypes, weights, pickles,
                                       torch.export's strictness, the signature's names
    layout        LayoutOptions        the converted model's I/O: NHWC (channels_last), I/O dtype
    quantization  QuantizationOptions  the mode, backend, calibration data (and its images'
                                       size, mean, std, layout; the labelled hold-out), ranges,
                                       sensitivity, mixed precision, the time budget
    parity        ParityOptions        the check against PyTorch: samples, seed, runtime, the
                                       thresholds, output kinds and labels, per-layer, accuracy,
                                       and the host latency check (a measurement beside parity)
    metadata      MetadataOptions      the TFLite model metadata written into the .tflite
    outputs       OutputOptions        what the run writes besides the model and how it talks:
                                       JUnit, baseline gate, plot, tensor names, test vectors,
                                       the libraries' output
    target, target_options             the target's name and its own options object (the
                                       target's dataclass, e.g. targets/micro/options.py)

Each field is declared once, with its command-line flag in its metadata (option_fields.py); the
CLI's export and validate flags are generated from them (cli_flags.py). Python callers give flat
keywords (``ExportOptions.from_keywords(quantize="int8", max_flash="256KiB")``), routed to their
group by name.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from .config import IODtype, QuantBackend, QuantizeMode, Target, Thresholds, default_thresholds
from .errors import UsageError
from .option_fields import BOTH, EXPORT, ListOfStr, as_tuple, floats, height_width, option, parse_shapes, path_text

__all__ = [
    "ExportOptions", "InputOptions", "LayoutOptions", "QuantizationOptions", "ParityOptions", "MetadataOptions", "OutputOptions",
]


def _quantize_mode(text: str) -> QuantizeMode:
    try:
        return QuantizeMode(text)
    except ValueError:
        choices = ", ".join(m.value for m in QuantizeMode)
        raise UsageError(f"--quantize {text} is not a mode.", f"Use one of {choices} (auto: --task text-generation only).") from None


def _refuse_empty(option: str, value: Any) -> None:
    if value is not None and not str(value).strip():
        raise UsageError(f"{option} is empty.", f"Give {option} a text, or drop it.")


@dataclass(frozen=True)
class InputOptions:
    """What loading and tracing read."""

    input_shapes: tuple[tuple[int, ...], ...] = option(
        (), "--input-shape", help="Input shape such as 1,3,224,224; repeat once per input in forward() order.",
        panel="Input", cli_type=ListOfStr, cli_default=None, parse=parse_shapes, commands=BOTH)
    input_dtypes: tuple[str, ...] = option(
        (), "--input-dtype", help="Input dtype (float32, int64, ...); repeatable; default float32.",
        panel="Input", cli_type=ListOfStr, cli_default=None, parse=as_tuple, commands=BOTH)
    weights: str | None = option(
        None, "--weights", help="state_dict file for a package.module:attr model (loaded with weights_only=True).", panel="Input", commands=BOTH)
    trust_pickle: bool = option(
        False, "--trust-pickle", help="Allow loading a pickled module (runs arbitrary code: only for files you trust).", panel="Input",
        cli_type=bool, commands=BOTH)
    strict: bool = option(False, "--strict/--non-strict", help="torch.export strict mode (default non-strict).", panel="Input", cli_type=bool)
    # signature names (see io_names.py): "a,b" or a sequence; empty: named after the model
    input_names: Any = option(
        (), "--input-names", help="Signature input names, comma-separated in forward()'s order (default: forward()'s parameter names).",
        panel="Input", cli_default=None, parse=lambda v: v or ())
    output_names: Any = option(
        (), "--output-names", help="Signature output names, comma-separated (default: the dict keys / fields forward() returns, else output_0...).",
        panel="Input", cli_default=None, parse=lambda v: v or ())
    signature_key: str = option("serving_default", "--signature-key", help="The signature's name in the .tflite.", panel="Input", cli_type=str)

    def __post_init__(self) -> None:
        from .artifacts.io_names import check_names, check_signature_key

        for attr, flag in (("input_names", "--input-names"), ("output_names", "--output-names")):
            value = getattr(self, attr)
            value = [v.strip() for v in value.split(",")] if isinstance(value, str) and value.strip() else list(value or ())
            object.__setattr__(self, attr, check_names(value, flag))
        check_signature_key(self.signature_key)

    def __hash__(self) -> int:  # the names are lists
        return hash(repr(self))


@dataclass(frozen=True)
class LayoutOptions:
    """The converted model's inputs and outputs: their layout and dtype."""

    channels_last: bool = option(
        False, "--channels-last/--no-channels-last", help="NHWC inputs/outputs for 4-D image tensors (no boundary TRANSPOSE ops).",
        panel="Layout", cli_type=bool, commands=BOTH,
        per_command={"validate": {"decls": ("--channels-last",), "help": "The flatbuffer's 4-D inputs are NHWC (only needed when the reference has no example inputs)."}})
    io_dtype: IODtype | None = option(
        None, "--io-dtype", help="Model input/output type for int8: float32 (default), int8 or uint8.", panel="Layout", cli_type=Optional[IODtype])

    def __post_init__(self) -> None:
        if self.io_dtype is not None:
            object.__setattr__(self, "io_dtype", IODtype(self.io_dtype))


@dataclass(frozen=True)
class QuantizationOptions:
    """What quantization reads: the mode and backend, the calibration data, ranges and the search."""

    quantize: QuantizeMode = option(
        QuantizeMode.NONE, "--quantize", "-q", panel="Quantization", cli_type=str, cli_default=QuantizeMode.NONE.value, parse=_quantize_mode,
        help="Precision: none (fp32), fp16, dynamic-int8 (int8 weights, float activations), int8 (full integer, calibrated), int16x8 (16-bit activations, 8-bit weights), int4 (int4 weights, float activations); --task text-generation: none, fp16, int8 (weight-only), dynamic-int8, int4-mlp, int4-layers, int4 or auto (the smallest that meets the thresholds).")
    quant_backend: QuantBackend = option(
        QuantBackend.AUTO, "--quant-backend", help="auto (measure, fall back), pt2e (exported graph) or flatbuffer (ai-edge-quantizer).",
        panel="Quantization", cli_type=QuantBackend)
    # seconds for the whole quantization stage (quantization/budget.py); None: no limit
    time_budget: float | None = option(
        300.0, "--time-budget", metavar="SECONDS", panel="Quantization", cli_type=float,  # budget.DEFAULT_TIME_BUDGET_S (options stay light)
        help="Seconds for the whole quantization stage (auto's backends, calibration, --sensitivity, --mixed-precision): when spent, no new step starts (the one running finishes), the best model so far is kept and checked as usual (exit code by its parity), and the report lists what was not tried.")
    mixed_precision: str | None = option(  # auto | int16 | off; None: the target's default
        None, "--mixed-precision", metavar="MODE", panel="Quantization",
        help="int8: auto (raise the most sensitive operators until --min-sqnr/--min-cosine/--min-top1 is met: on cpu to int16 activations first, fully integer, and to float only when int16 misses; on micro to int16; the default on cpu when one of them is given), int16 (integer promotions only) or off (every activation int8). Without it or a target, on cpu, an int8 model under its gate + 5 dB on the calibration inputs gets int16 activations where needed (fully integer) up to the gate + 5 dB. Not for --target edgetpu.")
    calibration_data: str | None = option(
        None, "--calibration-data", panel="Quantization", cli_type=Optional[Path], parse=path_text, commands=BOTH,
        help="Calibration data: .npz (arrays keyed by input name or position), .npy, a folder of .npy, or a folder of JPEG/PNG images.",
        per_command={"validate": {"panel": "Parity", "help": "Labelled data (an image folder with one sub-folder per class, or an .npz with a labels array): parity and the accuracy check run on its held-out part, split as export splits it."}})
    calibration_samples: int | None = option(
        None, "--calibration-samples", help="Use at most this many calibration samples.", panel="Quantization", cli_type=Optional[int])
    # labelled calibration data (quantization/calibration_labels.py, validators/accuracy.py)
    holdout_fraction: float = option(
        0.2, "--holdout-fraction", metavar="FRACTION", panel="Quantization", cli_type=float, commands=BOTH,  # calibration_labels.DEFAULT_HOLDOUT_FRACTION
        help="Labelled calibration data (a folder with one sub-folder per class, or an .npz with a labels array): the fraction of every class held out, evenly spread, for parity and accuracy; the rest calibrates.",
        per_command={"validate": {"panel": "Parity", "help": "With --calibration-data: the fraction of every class held out (as given to export)."}})
    range_algorithm: str | None = option(  # minmax | percentile | mse; None: each backend's default
        None, "--range-algorithm", metavar="ALGO", panel="Quantization",
        help="Activation ranges for int8/int16x8: minmax, percentile (99.99th) or mse (least quantization error); default: min/max for the flatbuffer backend, PT2E's histogram (MSE) search.")
    part_scales: bool = option(  # quantization/output_joins.py
        True, "--part-scales/--no-part-scales", panel="Quantization", cli_type=bool,
        help="int8/int16x8: an output joined (concatenated) from parts whose calibrated ranges differ 10x or more, such as a detector's boxes in pixels and class scores, keeps one scale per part, joined in float at the model's end (the output stays float32 with its name and shape, whatever --io-dtype). --no-part-scales: one integer scale for the whole output.")
    weight_rounding: bool = option(  # quantization/weight_rounding.py
        True, "--weight-rounding/--no-weight-rounding", panel="Quantization", cli_type=bool,
        help="int8/int16x8 (flatbuffer backend): round each conv, depthwise and fully connected filter to int8 for what the layer computes on the calibration samples (GPTQ, then bias correction), not each weight to its nearest step; the weights stay on the same per-channel int8 grid. --no-weight-rounding: nearest rounding (faster to export).")
    image_size: tuple[int, int] | None = option(
        None, "--image-size", help="Resize calibration images to H,W (default: the input shape's).", panel="Quantization",
        parse=height_width("--image-size"), commands=BOTH,
        per_command={"validate": {"panel": "Parity", "help": "With an image folder: resize to H,W (default: the input shape's)."}})
    mean: tuple[float, ...] | None = option(
        None, "--mean", panel="Quantization", parse=floats("--mean"), commands=BOTH,
        help="Per-channel mean of the image input on a 0..1 scale, e.g. 0.485,0.456,0.406: normalizes calibration images and is written as the input's normalization metadata (x255).",
        per_command={"validate": {"panel": "Parity", "help": "With an image folder: per-channel mean on a 0..1 scale, as given to export."}})
    std: tuple[float, ...] | None = option(
        None, "--std", panel="Quantization", parse=floats("--std"), commands=BOTH,
        help="Per-channel std of the image input on a 0..1 scale, e.g. 0.229,0.224,0.225 (calibration images and normalization metadata, like --mean).",
        per_command={"validate": {"panel": "Parity", "help": "With an image folder: per-channel std on a 0..1 scale, as given to export."}})
    image_layout: str = option(  # the layout the PyTorch model takes
        "nchw", "--image-layout", help="Layout the PyTorch model takes images in: nchw or nhwc.", panel="Quantization", cli_type=str, commands=BOTH,
        per_command={"validate": {"panel": "Parity", "help": "With an image folder: the layout the PyTorch model takes images in, nchw or nhwc."}})
    sensitivity: bool = option(  # quantization/sensitivity.py
        False, "--sensitivity", panel="Quantization", cli_type=bool, commands=BOTH,
        help="int8: rank every quantizable operator by the output SQNR with only it quantized (reports, and <stem>.sensitivity.json: Model Explorer node data).")

    def __post_init__(self) -> None:
        object.__setattr__(self, "quantize", QuantizeMode(self.quantize))
        object.__setattr__(self, "quant_backend", QuantBackend(self.quant_backend))
        if self.range_algorithm is not None:  # the name now; whether the mode calibrates once targets imply it
            from .quantization.ranges import check_range_algorithm

            check_range_algorithm(self.range_algorithm)
        if self.calibration_samples is not None and self.calibration_samples < 1:
            raise UsageError(f"--calibration-samples {self.calibration_samples} must be at least 1.")
        if not 0 < self.holdout_fraction < 1:  # also refuses NaN
            raise UsageError(f"--holdout-fraction {self.holdout_fraction} is not a fraction between 0 and 1.", "Use e.g. --holdout-fraction 0.2.")
        self._check_images()
        from .quantization.budget import check_time_budget
        from .quantization.mixed_precision import check_mixed_precision_option

        check_mixed_precision_option(self.mixed_precision)
        check_time_budget(self.time_budget)

    def _check_images(self) -> None:
        for flag, values in (("--mean", self.mean), ("--std", self.std)):
            if values is not None and not all(math.isfinite(v) for v in values):
                raise UsageError(f"{flag} {','.join(map(str, values))} is not a list of finite numbers.", f"Write e.g. {flag} 0.5,0.5,0.5.")
        if self.std is not None and any(v <= 0 for v in self.std):
            raise UsageError(f"--std {','.join(map(str, self.std))} must be positive: it divides the pixel values.")
        if self.image_layout not in ("nchw", "nhwc"):
            raise UsageError(f"--image-layout {self.image_layout} is not known.", "Use nchw or nhwc.")


def _threshold(default: Any, decl: str, help: str) -> Any:
    return option(default, decl, help=help, panel="Parity", cli_type=Optional[float], commands=BOTH)


@dataclass(frozen=True)
class ParityOptions:
    """What the check against PyTorch reads, and the host latency measured beside it."""

    validate: bool = option(True, "--validate/--no-validate", help="Check parity against PyTorch on the host.", panel="Parity", cli_type=bool)
    samples: int = option(
        8, "--samples", help="Number of parity inputs (example inputs plus seeded random ones).", panel="Parity", cli_type=int, commands=BOTH)
    seed: int = option(0, "--seed", help="Seed for the random parity inputs.", panel="Parity", cli_type=int, commands=BOTH)
    runtime: str = option(  # parity through: interpreter, compiled-model (LiteRT 2.x) or both
        "interpreter", "--runtime", panel="Parity", cli_type=str, commands=BOTH,
        help="Runtime parity runs through: interpreter (the classic Interpreter, or the target's own runner), compiled-model (LiteRT 2.x CompiledModel, CPU) or both (a difference between them fails the check).")
    atol: float | None = _threshold(None, "--atol", "Max absolute error allowed per classification or regression output.")
    min_sqnr: float | None = _threshold(None, "--min-sqnr", "Minimum SQNR in dB per classification or regression output.")
    min_cosine: float | None = _threshold(None, "--min-cosine", "Minimum cosine similarity: over all samples for classification outputs, of the worst sample for embeddings.")
    min_top1: float | None = _threshold(None, "--min-top1", "Minimum top-1 agreement (0..1) for classification outputs.")
    min_top5: float | None = _threshold(None, "--min-top5", "Minimum top-5 agreement (0..1) for classification outputs with at least 10 classes.")
    min_expected_top1: float | None = _threshold(None, "--min-expected-top1", "Minimum expected top-1 agreement (0..1) for classification outputs with real --calibration-data: the parity samples' error against PyTorch's margins on every real sample.")
    min_neighbour_agreement: float | None = _threshold(None, "--min-neighbour-agreement", "Minimum fraction (0..1) of samples whose nearest neighbour by cosine is the same as in PyTorch, for embedding outputs.")
    # probabilities outputs (validators/probabilities.py)
    min_decision_agreement: float | None = _threshold(None, "--min-decision-agreement", "Minimum fraction (0..1) of decisions that agree, for probabilities outputs (softmax/sigmoid): the argmax of each row, and for sigmoid each value's side of --decision-threshold.")
    min_expected_positive_agreement: float | None = _threshold(None, "--min-expected-positive-agreement", "Minimum expected intersection over union (0..1) of PyTorch's and the exported model's detections (values >= --decision-threshold) of a sigmoid output or part, with real --calibration-data.")
    decision_threshold: float | None = _threshold(None, "--decision-threshold", "The probability at which the app takes a sigmoid's value as a detection (default 0.5; e.g. 0.25 for a YOLO detector's class scores): sigmoid decisions are judged at it.")
    max_probability_error: float | None = _threshold(None, "--max-probability-error", "Maximum abs error of the probabilities, for probabilities outputs (softmax/sigmoid).")
    max_rel_l2: float | None = _threshold(None, "--max-rel-l2", "Maximum relative L2 error per classification or regression output (default: not gated; SQNR covers it).")
    max_error_steps: float | None = _threshold(None, "--max-error-steps", "Maximum abs error in output quantization steps, for integer outputs (default: not gated).")
    # what each output is: "KIND" for all, "NAME=KIND" pairs, or {name: kind} (see output_kinds.py)
    output_kinds: Any = option(
        (), "--output-kind", panel="Parity", cli_type=ListOfStr, cli_default=None, parse=as_tuple, commands=BOTH,
        help="What an output is: NAME=KIND (repeatable) or KIND for all; KIND is classification, embedding, regression or probabilities. Default: from the output's name, then --labels, else regression; a softmax/sigmoid output is probabilities.")
    labels: Any = option(  # "FILE" for the classifier output, "NAME=FILE" pairs, or {name: file}
        (), "--labels", panel="Parity", cli_type=ListOfStr, cli_default=None, parse=as_tuple, commands=BOTH,
        help="[NAME=]FILE: class labels, one per line, for a classifier output; marks it classification and must match its class count. export: also packed into the .tflite as that output's labels file (TFLite model metadata).")
    per_layer: bool = option(
        False, "--per-layer", help="Also compare every layer with PyTorch (reference kernels, all intermediates kept).", panel="Parity",
        cli_type=bool, commands=BOTH)
    per_layer_min_sqnr: float | None = _threshold(None, "--per-layer-min-sqnr", "Fail (exit 1) when any compared layer's SQNR is below this (dB).")
    max_accuracy_drop: float = option(  # accuracy.DEFAULT_MAX_ACCURACY_DROP
        0.01, "--max-accuracy-drop", metavar="FRACTION", panel="Parity", cli_type=float, commands=BOTH,
        help="Labelled calibration data: the most top-1 accuracy the exported model may lose against PyTorch on the held-out samples (0.01: one percentage point); more is exit 1.",
        per_command={"validate": {"help": "With --calibration-data: the most top-1 accuracy the model may lose against PyTorch (0.01: one point); more is exit 1."}})
    host_latency: bool = option(  # quantized exports on cpu: time the model against its float one here (latency.py)
        True, "--latency/--no-latency", panel="Parity", cli_type=bool,
        help="Quantized exports on --target cpu: time the model against its float one on this CPU and flag it when slower (reported, never a gate).")

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise UsageError(f"--samples {self.samples} must be at least 1.", "Use e.g. --samples 8.")
        if not 0 <= self.max_accuracy_drop <= 1:
            raise UsageError(f"--max-accuracy-drop {self.max_accuracy_drop} is not a fraction from 0 to 1.", "Use e.g. --max-accuracy-drop 0.01 (one percentage point).")
        if not 0 <= self.seed < 2**32:  # numpy's and torch's generators take no other seed
            raise UsageError(f"--seed {self.seed} is not a seed: it must be from 0 to {2**32 - 1}.", "Use e.g. --seed 0.")
        from .validators.runtimes import check_runtime_option

        check_runtime_option(self.runtime)
        from .validators.output_kinds import parse_labels, parse_output_kinds

        object.__setattr__(self, "output_kinds", parse_output_kinds(self.output_kinds))
        object.__setattr__(self, "labels", parse_labels(self.labels))
        if self.per_layer_min_sqnr is not None and self.per_layer_min_sqnr != self.per_layer_min_sqnr:
            raise UsageError("--per-layer-min-sqnr nan is not a number.")

    def threshold_overrides(self) -> dict[str, float | None]:
        """The thresholds given as options (None: the default of the precision, or of the file)."""
        return {
            "atol": self.atol, "min_sqnr_db": self.min_sqnr, "min_cosine": self.min_cosine, "min_top1": self.min_top1,
            "min_top5": self.min_top5, "min_neighbour_agreement": self.min_neighbour_agreement, "max_rel_l2": self.max_rel_l2,
            "max_error_steps": self.max_error_steps, "min_decision_agreement": self.min_decision_agreement,
            "max_probability_error": self.max_probability_error, "min_expected_top1": self.min_expected_top1,
            "min_expected_positive_agreement": self.min_expected_positive_agreement, "decision_threshold": self.decision_threshold,
        }


@dataclass(frozen=True)
class MetadataOptions:
    """TFLite model metadata (model_metadata.py), written with --labels and --mean/--std too."""

    model_name: str | None = option(None, "--model-name", help="Model name written in the TFLite model metadata (what MediaPipe Tasks and the LiteRT support library read; needs edge-export[metadata]).", panel="Metadata")
    model_version: str | None = option(None, "--model-version", help="Model version written in the model metadata.", panel="Metadata")
    description: str | None = option(None, "--description", help="Model description written in the model metadata.", panel="Metadata")
    author: str | None = option(None, "--author", help="Author written in the model metadata.", panel="Metadata")
    # False (--no-metadata): --labels, --mean/--std keep only their checking roles
    write_metadata: bool = option(True, "--metadata/--no-metadata", help="--no-metadata: write no model metadata; --labels, --mean and --std then only serve parity and calibration.", panel="Metadata", cli_type=bool)

    def __post_init__(self) -> None:
        for attr in ("model_name", "model_version", "description", "author"):
            _refuse_empty("--" + attr.replace("_", "-"), getattr(self, attr))


@dataclass(frozen=True)
class OutputOptions:
    """What the run writes besides the model and its reports, and how much the libraries say."""

    junit: str | None = option(  # also write JUnit XML here
        None, "--junit", help="Also write JUnit XML here: one test case per output (and per layer with --per-layer).", panel="Outputs",
        cli_type=Optional[Path], parse=path_text, commands=BOTH)
    baseline: str | None = option(  # an earlier report.json to gate regressions against
        None, "--baseline", help="An earlier <stem>.report.json: exit 1 when any metric got worse beyond tolerance.", panel="Outputs",
        cli_type=Optional[Path], parse=path_text, commands=BOTH)
    per_layer_plot: str | None = option(  # PNG of SQNR per layer (needs matplotlib)
        None, "--per-layer-plot", help="Write a PNG of SQNR per layer (needs matplotlib: pip install edge-export[plot]).", panel="Outputs",
        cli_type=Optional[Path], parse=path_text, commands=BOTH)
    strip_names: bool = option(  # drop inner tensor names from the written flatbuffer
        False, "--strip-names", panel="Outputs", cli_type=bool,
        help="Drop inner tensor names from the written .tflite (smaller; same computation; the default with --target micro, which writes their map to <stem>.tensors.json). The report keeps the module paths; later `validate --per-layer` on the file needs that map.")
    keep_names: bool = option(  # keep them where the target strips them by default (micro)
        False, "--keep-names", help="Keep inner tensor names where the target strips them by default (--target micro); no tensor-name map is written.",
        panel="Outputs", cli_type=bool)
    # <stem>.testdata.npz: parity inputs as the model takes them, PyTorch's outputs, the thresholds
    emit_test_vectors: bool = option(
        False, "--emit-test-vectors", panel="Outputs", cli_type=bool,
        help="Also write <stem>.testdata.npz: parity inputs exactly as the .tflite takes them (dtype, layout, quantization), PyTorch's outputs and the thresholds used; `validate MODEL.tflite --test-vectors FILE` re-checks a model against them without PyTorch.")
    test_vectors_count: int = option(
        4, "--test-vectors-count", help="How many parity samples --emit-test-vectors stores (at most the number parity checked).", panel="Outputs", cli_type=int)
    verbose: bool = option(False, "--verbose", "-v", help="Show litert-torch's and absl's own output.", panel="Outputs", cli_type=bool, commands=BOTH)
    # Redirect fds 1 and 2 for the whole run, hiding the libraries' chatter (and anything else the
    # process prints meanwhile). Off by default: the caller owns its streams (the CLI's terminal
    # session captures them itself). Library calls whose output edge-export parses capture locally.
    quiet_libraries: bool = False

    def __post_init__(self) -> None:
        if self.strip_names and self.keep_names:
            raise UsageError("--strip-names and --keep-names contradict each other.", "Give one of them.")
        if self.test_vectors_count < 1:
            raise UsageError(f"--test-vectors-count {self.test_vectors_count} must be at least 1.", "Use e.g. --test-vectors-count 4.")

    def written_beside(self) -> dict[str, str | None]:
        """The side files the write stage commits with the model (stages/write.py)."""
        return {"junit": self.junit, "per_layer_plot": self.per_layer_plot}


_TARGET_HELP = "cpu (LiteRT/XNNPACK), edgetpu (implies int8, batch 1, NHWC, uint8 I/O), micro (int8 with int8 NHWC I/O, names stripped, TFLite Micro), gpu (float; predicts the Android GPU delegate's partitions), ethos-u55-128 and the other Arm Ethos-U configurations Vela accepts (ethos-u55-32..256, ethos-u65-256/512, ethos-u85-128..2048: micro plus the Vela NPU compiler, <stem>_vela.tflite; needs pip install 'edge-export[ethos-u]'), or any other target registered in edge_export/targets."
# The groups ExportOptions composes, by attribute; a flat keyword is routed to the group declaring it.
GROUPS: dict[str, type] = {
    "inputs": InputOptions, "layout": LayoutOptions, "quantization": QuantizationOptions, "parity": ParityOptions,
    "metadata": MetadataOptions, "outputs": OutputOptions,
}
_GROUP_OF_FIELD = {f.name: group for group, cls in GROUPS.items() for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class ExportOptions:
    """Every group of options, and the target with its own options (an instance of the target's
    ``options_class``; None: none given, the target's defaults once the target settles them)."""

    # A plain name, not an enum of choices: a target is one module in edge_export/targets that
    # registers itself, and the API refuses an unknown name (exit 2) listing the registered ones.
    target: Target | str = option(Target.CPU, "--target", metavar="TARGET", help=_TARGET_HELP, panel="Target", cli_type=str, cli_default="cpu")
    inputs: InputOptions = field(default_factory=InputOptions)
    layout: LayoutOptions = field(default_factory=LayoutOptions)
    quantization: QuantizationOptions = field(default_factory=QuantizationOptions)
    parity: ParityOptions = field(default_factory=ParityOptions)
    metadata: MetadataOptions = field(default_factory=MetadataOptions)
    outputs: OutputOptions = field(default_factory=OutputOptions)
    target_options: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", _target_option(self.target))
        self.thresholds()  # a bad threshold fails now, not after minutes of tracing
        if self.outputs.emit_test_vectors and not self.parity.validate:
            raise UsageError(
                "--emit-test-vectors needs the parity check: the vectors are its inputs, PyTorch's outputs "
                "and the thresholds it judged them by, and --no-validate skips it.",
                "Drop --no-validate (or --emit-test-vectors).",
            )

    @classmethod
    def from_keywords(cls, **values: Any) -> ExportOptions:
        """Options from flat keywords (``quantize="int8", max_flash="256KiB"``): each goes to the
        group that declares it, a target's option to that target's options class."""
        groups: dict[str, dict[str, Any]] = {name: {} for name in GROUPS}
        target_values: dict[str, Any] = {}
        for name, value in values.items():
            if name in _GROUP_OF_FIELD:
                groups[_GROUP_OF_FIELD[name]][name] = value
            elif name not in ("target", "target_options"):
                target_values[name] = value
        target = values.get("target", Target.CPU)
        target_options = values.get("target_options")
        if target_values:
            target_options = _target_options_from(target, target_values)
        built = {name: GROUPS[name](**given) for name, given in groups.items()}
        return cls(target=target, target_options=target_options, **built)

    def with_values(self, **values: Any) -> ExportOptions:
        """A copy with flat keywords changed (``options.with_values(quantize=QuantizeMode.INT8)``)."""
        changed: dict[str, dict[str, Any]] = {}
        top = {}
        for name, value in values.items():
            if name in _GROUP_OF_FIELD:
                changed.setdefault(_GROUP_OF_FIELD[name], {})[name] = value
            elif name in ("target", "target_options"):
                top[name] = value
            else:
                raise UsageError(f"{name} is not an export option.")
        return dataclasses.replace(self, **top, **{g: dataclasses.replace(getattr(self, g), **v) for g, v in changed.items()})

    def value(self, name: str) -> Any:
        """A field's value by its flat name (``options.value("samples")``)."""
        return getattr(getattr(self, _GROUP_OF_FIELD[name]), name)

    def thresholds(self) -> Thresholds:
        return default_thresholds(self.quantization.quantize).override(**self.parity.threshold_overrides())


def _target_option(value: Target | str) -> Target | str:
    """A built-in target as its Target member; any other registered target by its name."""
    try:
        return Target(value)
    except ValueError:
        pass
    from .plugins.target_registry import get_target

    return get_target(value).name  # UsageError naming the known targets when it is none


def _target_options_from(target: Target | str, values: dict[str, Any]) -> Any:
    """The options object of the target that declares ``values``: the chosen target's own class
    when it declares them all, else the class of the first one it does not declare (so that the
    target refuses them, naming their owners: targets/base.py refuse_foreign_options)."""
    from .plugins.target_registry import get_target, target_options_classes

    classes = target_options_classes()
    declared = {name for c in classes for name in c.field_names()}
    unknown = [name for name in values if name not in declared]
    if unknown:
        known = sorted({*_GROUP_OF_FIELD, "target", *declared})
        raise UsageError(f"{unknown[0]} is not an option of edge_export.export.", f"Use one of: {', '.join(known)}.")
    own = get_target(target).options_class
    if own is not None and set(values) <= set(own.field_names()):
        return own(**values)
    foreign = next(name for name in values if own is None or name not in own.field_names())
    owner = next(c for c in classes if foreign in c.field_names())
    return owner(**{k: v for k, v in values.items() if k in owner.field_names()})
