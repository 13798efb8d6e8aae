"""The `edge-export` command: builds options, calls the Python API, maps errors to exit codes.

This is the only module that exits. It imports no torch or LiteRT at start-up, so `--help` is fast;
the API imports them when a command runs.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .config import IODtype, QuantBackend, QuantizeMode, parse_shape
from .errors import EXIT_INTERNAL, EXIT_USAGE, EdgeExportError, UsageError

EXIT_CODES_HELP = """Exit codes: 0 exported and parity passed; 1 exported but parity (or a
regression gate) failed, artifacts kept and the report says why; 2 bad usage or unreadable input,
nothing written; 3 tracing, quantization or conversion failed, nothing written; 4 internal error
(a bug: please report it with --debug output); 130 interrupted (Ctrl-C); 143 terminated
(SIGTERM). An interrupted run leaves no partial output."""

app = typer.Typer(
    name="edge-export",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help=(
        "Export an unmodified PyTorch model to a LiteRT flatbuffer and prove on the host that it "
        "computes what PyTorch computes.\n\n"
        "Usage: edge-export MODEL [OPTIONS]  (same as `edge-export export MODEL`)\n\n"
        "MODEL is an ExportedProgram archive (.pt2), a TorchScript archive, a package.module:attr "
        "reference, or a pickled module (with --trust-pickle).\n\n" + EXIT_CODES_HELP
    ),
)

_out = Console(highlight=False, soft_wrap=True)  # --version only; commands print through a TerminalSession


def _version_callback(value: bool) -> None:
    """The version, the versions of the libraries that decide the result (read from their installed
    metadata: nothing is imported) and, when one is not the tested version, a warning."""
    if value:
        from .version import __version__
        from .constraints import check_pinned_set, library_versions

        versions = library_versions()
        _out.print(f"edge-export {__version__}", markup=False)
        for name, version in versions.items():
            _out.print(f"  {name:<18} {version or 'not installed'}", markup=False)
        warning = check_pinned_set(versions).warning()
        if warning:
            _out.print(f"warning: {warning}", markup=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
) -> None:
    """Group entry point (commands: export, validate, inspect, bench, constraints)."""


def _fail(exc: BaseException, debug: bool, err: Console) -> int:
    """Print one paragraph for a failed command and return its exit code."""
    if debug:
        err.print("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), markup=False)
    if isinstance(exc, EdgeExportError):
        err.print(f"[bold red]error:[/bold red] {escape(str(exc))}", soft_wrap=True)
        if not debug:
            err.print("[dim](run with --debug for the full traceback)[/dim]")
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        what = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        err.print(f"[bold red]{what}[/bold red]: nothing was written.")
        return 143 if isinstance(exc, _Terminated) else 130
    code = getattr(exc, "exit_code", EXIT_INTERNAL)
    err.print(
        f"[bold red]internal error:[/bold red] {type(exc).__name__}: {escape(str(exc)[:500])} "
        "This is a bug in edge-export; please report it with the output of --debug.",
        markup=True,
    )
    return code


def _parse_shapes(values: Optional[List[str]]) -> tuple[tuple[int, ...], ...]:
    return tuple(parse_shape(v) for v in (values or []))


def _parse_floats(text: Optional[str], option: str) -> Optional[tuple[float, ...]]:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        values = ()
    if not values:
        raise UsageError(f"Cannot read {option} '{text}'.", f"Write comma-separated numbers, e.g. {option} 0.5,0.5,0.5.")
    return values


def _quantize_mode(text: str) -> QuantizeMode:
    try:
        return QuantizeMode(text)
    except ValueError:
        choices = ", ".join(m.value for m in QuantizeMode)
        raise UsageError(f"--quantize {text} is not a mode.", f"Use one of {choices} (auto: --task text-generation only).") from None


def _parse_pair(text: Optional[str], option: str) -> Optional[tuple[int, int]]:
    if text is None:
        return None
    shape = parse_shape(text)
    if len(shape) != 2:
        raise UsageError(f"{option} '{text}' must be two numbers, height and width, e.g. {option} 224,224.")
    return (shape[0], shape[1])


# Options shared by `export` and `validate`, declared once.
# The options export and validate share, declared once: (parameter, type with its typer option,
# default, the ExportOptions field it sets or None, conversion). ``_with_checking_options`` adds
# them to both commands, which receive the converted fields as ``checking``.
def _str_or_none(value: Optional[Path]) -> Optional[str]:
    return str(value) if value else None


def _as_tuple(values: Optional[List[str]]) -> tuple[str, ...]:
    return tuple(values or ())


def _same(value):
    return value


_CHECKING_OPTIONS = (
    ("input_shape", Annotated[Optional[List[str]], typer.Option("--input-shape", help="Input shape such as 1,3,224,224; repeat once per input in forward() order.")], None, "input_shapes", lambda v: _parse_shapes(v)),
    ("input_dtype", Annotated[Optional[List[str]], typer.Option("--input-dtype", help="Input dtype (float32, int64, ...); repeatable; default float32.")], None, "input_dtypes", _as_tuple),
    ("samples", Annotated[int, typer.Option("--samples", help="Number of parity inputs (example inputs plus seeded random ones).")], 8, "samples", _same),
    ("seed", Annotated[int, typer.Option("--seed", help="Seed for the random parity inputs.")], 0, "seed", _same),
    ("runtime", Annotated[str, typer.Option("--runtime", help="Runtime parity runs through: interpreter (the classic Interpreter, or the target's own runner), compiled-model (LiteRT 2.x CompiledModel, CPU) or both (a difference between them fails the check).")], "interpreter", "runtime", _same),
    ("atol", Annotated[Optional[float], typer.Option("--atol", help="Max absolute error allowed per classification or regression output.")], None, "atol", _same),
    ("min_sqnr", Annotated[Optional[float], typer.Option("--min-sqnr", help="Minimum SQNR in dB per classification or regression output.")], None, "min_sqnr", _same),
    ("min_cosine", Annotated[Optional[float], typer.Option("--min-cosine", help="Minimum cosine similarity: over all samples for classification outputs, of the worst sample for embeddings.")], None, "min_cosine", _same),
    ("min_top1", Annotated[Optional[float], typer.Option("--min-top1", help="Minimum top-1 agreement (0..1) for classification outputs.")], None, "min_top1", _same),
    ("min_top5", Annotated[Optional[float], typer.Option("--min-top5", help="Minimum top-5 agreement (0..1) for classification outputs with at least 10 classes.")], None, "min_top5", _same),
    ("min_neighbour_agreement", Annotated[Optional[float], typer.Option("--min-neighbour-agreement", help="Minimum fraction (0..1) of samples whose nearest neighbour by cosine is the same as in PyTorch, for embedding outputs.")], None, "min_neighbour_agreement", _same),
    ("min_decision_agreement", Annotated[Optional[float], typer.Option("--min-decision-agreement", help="Minimum fraction (0..1) of decisions that agree, for probabilities outputs (softmax/sigmoid): the argmax of each row, and for sigmoid each value's side of 0.5.")], None, "min_decision_agreement", _same),
    ("max_probability_error", Annotated[Optional[float], typer.Option("--max-probability-error", help="Maximum abs error of the probabilities, for probabilities outputs (softmax/sigmoid).")], None, "max_probability_error", _same),
    ("max_rel_l2", Annotated[Optional[float], typer.Option("--max-rel-l2", help="Maximum relative L2 error per classification or regression output (default: not gated; SQNR covers it).")], None, "max_rel_l2", _same),
    ("max_error_steps", Annotated[Optional[float], typer.Option("--max-error-steps", help="Maximum abs error in output quantization steps, for integer outputs (default: not gated).")], None, "max_error_steps", _same),
    ("output_kind", Annotated[Optional[List[str]], typer.Option("--output-kind", help="What an output is: NAME=KIND (repeatable) or KIND for all; KIND is classification, embedding, regression or probabilities. Default: from the output's name, then --labels, else regression; a softmax/sigmoid output is probabilities.")], None, "output_kinds", _as_tuple),
    ("labels", Annotated[Optional[List[str]], typer.Option("--labels", help="[NAME=]FILE: class labels, one per line, for a classifier output; marks it classification and must match its class count. export: also packed into the .tflite as that output's labels file (TFLite model metadata).")], None, "labels", _as_tuple),
    ("weights", Annotated[Optional[str], typer.Option("--weights", help="state_dict file for a package.module:attr model (loaded with weights_only=True).")], None, "weights", _same),
    ("trust_pickle", Annotated[bool, typer.Option("--trust-pickle", help="Allow loading a pickled module (runs arbitrary code: only for files you trust).")], False, "trust_pickle", _same),
    ("junit", Annotated[Optional[Path], typer.Option("--junit", help="Also write JUnit XML here: one test case per output (and per layer with --per-layer).")], None, "junit", _str_or_none),
    ("baseline", Annotated[Optional[Path], typer.Option("--baseline", help="An earlier <stem>.report.json: exit 1 when any metric got worse beyond tolerance.")], None, "baseline", _str_or_none),
    ("per_layer", Annotated[bool, typer.Option("--per-layer", help="Also compare every layer with PyTorch (reference kernels, all intermediates kept).")], False, "per_layer", _same),
    ("per_layer_min_sqnr", Annotated[Optional[float], typer.Option("--per-layer-min-sqnr", help="Fail (exit 1) when any compared layer's SQNR is below this (dB).")], None, "per_layer_min_sqnr", _same),
    ("sensitivity", Annotated[bool, typer.Option("--sensitivity", help="int8: rank every quantizable operator by the output SQNR with only it quantized (reports, and <stem>.sensitivity.json: Model Explorer node data).")], False, "sensitivity", _same),
    ("per_layer_plot", Annotated[Optional[Path], typer.Option("--per-layer-plot", help="Write a PNG of SQNR per layer (needs matplotlib: pip install edge-export[plot]).")], None, "per_layer_plot", _str_or_none),
    ("verbose", Annotated[bool, typer.Option("--verbose", "-v", help="Show litert-torch's and absl's own output.")], False, "verbose", _same),
    ("quiet", Annotated[bool, typer.Option("--quiet", help="Print only errors.")], False, None, _same),
    ("debug", Annotated[bool, typer.Option("--debug", help="Show full tracebacks.")], False, None, _same),
)
DebugOpt = _CHECKING_OPTIONS[-1][1]
VerboseOpt = _CHECKING_OPTIONS[-3][1]


def _checking_fields(raw: dict) -> dict:
    """The ExportOptions fields the shared options set, from their CLI values. Called inside the
    command's run, so that a value that does not parse (``--input-shape 1,3,x``) is a usage error
    with exit 2 like any other."""
    return {field: convert(raw[name]) for name, _, _, field, convert in _CHECKING_OPTIONS if field is not None}


def _with_checking_options(command):
    """Give ``command`` the options export and validate share. It is called with its own
    parameters plus ``checking``: those options' raw values by parameter name (``quiet``,
    ``debug`` and ``verbose`` among them); typer sees one signature with all of them."""
    import functools
    import inspect

    own = [p for p in inspect.signature(command).parameters.values() if p.name not in ("checking", "quiet", "debug")]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation) for name, annotation, default, _, _ in _CHECKING_OPTIONS]

    @functools.wraps(command)
    def with_options(**values):
        raw = {name: values.pop(name) for name, *_ in _CHECKING_OPTIONS}
        return command(**values, checking=raw)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + shared
    with_options.__signature__ = inspect.Signature(params)
    with_options.__annotations__ = {p.name: p.annotation for p in params}
    return with_options


def _target_parameters() -> list:
    """One typer option per option the registered targets declare (targets/registry.py), in the
    targets' order: a target's option is its declaration, nothing here names it."""
    import inspect

    from .targets.registry import declared_target_options

    params = []
    for option in declared_target_options().values():
        if option.type is bool:
            annotation, default = bool, typer.Option(False, option.flag, help=option.help)
        else:
            annotation, default = Optional[option.type], typer.Option(None, option.flag, help=option.help, metavar=option.metavar)
        params.append(inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return params


def _with_target_options(command):
    """Give ``command`` the registered targets' options, received as ``target_values``. The
    signature typer reads is rebuilt by ``refresh_target_options`` (``main`` calls it), so a target
    registered after this module was imported has its options too."""
    import functools
    import inspect

    own = [p for p in inspect.signature(command).parameters.values() if p.name != "target_values"]

    @functools.wraps(command)
    def with_options(**values):
        names = set(inspect.signature(with_options).parameters) - {p.name for p in own}
        return command(**{k: v for k, v in values.items() if k not in names}, target_values={k: values[k] for k in names})

    def refresh() -> None:
        params = own + _target_parameters()
        with_options.__signature__ = inspect.Signature(params)
        with_options.__annotations__ = {p.name: p.annotation for p in params}

    with_options.refresh_target_options = refresh
    # Until main() refreshes it for the export command: the command's own options (listing the
    # commands, --version and the other commands never import the targets).
    with_options.__signature__ = inspect.Signature(own)
    with_options.__annotations__ = {p.name: p.annotation for p in own}
    return with_options


# The options of the language-model task (edge_export/llm), refused with any other model; and what
# that task reads besides them: every other export option given with it is refused, not ignored.
_TASK_OPTIONS = ("tokenizer", "prefill_lengths", "cache_length", "prompts", "max_new_tokens", "block_size", "write_tflite")
_TASK_READS = {"model", "output", "quantize", "target", "validate", "task", *_TASK_OPTIONS, "atol", "min_top1", "trust_pickle", "junit", "quiet", "debug", "verbose"}


def _option_flag(info: Any, name: str) -> str:
    decls = [d for d in (getattr(info, "param_decls", None) or ()) if d.startswith("--")]
    return decls[0].split("/")[0] if decls else "--" + name.replace("_", "-")


def _export_flags_given(params: dict) -> list[tuple[str, str]]:
    """(name, flag) of every export option given a value other than its default (the shared
    checking options and the targets' options included)."""
    import inspect

    given = []
    for name, param in inspect.signature(inspect.unwrap(export_command)).parameters.items():
        info = param.default
        if name in ("checking", "target_values", "model") or not hasattr(info, "default"):
            continue
        if params.get(name) != info.default:
            given.append((name, _option_flag(info, name)))
    for name, annotation, default, _, _ in _CHECKING_OPTIONS:
        if params["checking"][name] != default:
            given.append((name, _option_flag(annotation.__metadata__[0], name)))
    given += [(name, flag) for name, flag in _target_flags().items() if (params.get("target_values") or {}).get(name) not in (None, False)]
    return given


def _target_flags() -> dict[str, str]:
    from .targets.registry import declared_target_options

    return {option.name: option.flag for option in declared_target_options().values()}


# export's own options that reach ExportOptions as they are (the others are converted below)
_EXPORT_FIELDS = (
    "target", "io_dtype", "quant_backend", "mixed_precision", "time_budget", "calibration_samples", "range_algorithm",
    "image_layout", "strip_names", "keep_names", "signature_key", "model_name", "model_version", "description", "author",
    "write_metadata", "emit_test_vectors", "test_vectors_count", "strict", "validate", "host_latency", "channels_last",
    "holdout_fraction", "max_accuracy_drop", "part_scales",
)


def _export_options(params: dict) -> Any:
    """ExportOptions from the export command's values; a value that does not parse is exit 2."""
    from .api import ExportOptions

    return ExportOptions(
        quantize=_quantize_mode(params["quantize"]),
        calibration_data=str(params["calibration_data"]) if params["calibration_data"] else None,
        image_size=_parse_pair(params["image_size"], "--image-size"),
        mean=_parse_floats(params["mean"], "--mean"),
        std=_parse_floats(params["std"], "--std"),
        input_names=params["input_names"] or (),
        output_names=params["output_names"] or (),
        **{name: params[name] for name in _EXPORT_FIELDS},
        **_checking_fields(params["checking"]),
        **_given_target_options(params["target_values"]),
    )


def _refuse_task_options(flags: list[str]) -> None:
    if flags:
        verb = "applies" if len(flags) == 1 else "apply"
        raise UsageError(
            f"{', '.join(flags)} {verb} to --task text-generation only, and MODEL is not a causal language model.",
            "Drop it, or pass --task text-generation with a Hugging Face causal-LM folder.",
        )


def _given_target_options(values: dict | None) -> dict:
    """The target options the user gave (a flag left out is not passed: given with a target that
    does not declare it, an option is refused, so nothing is passed for it by default)."""
    given = {}
    for name, value in (values or {}).items():
        if value is None or value is False:
            continue
        given[name] = str(value) if isinstance(value, Path) else value
    return given


def _run(call, quiet: bool, debug: bool, verbose: bool = False) -> None:
    """Run an export or validate call with stage progress, print its summary or its error, and exit
    with its code. The only place that exits; the session owns the streams until the last line."""
    from .output.terminal import StageDisplay, TerminalSession

    with TerminalSession(capture=not verbose) as term:
        display = StageDisplay(term.err, quiet, spinner=not verbose)
        try:
            result = call(display.stage, display.progress)
        except (Exception, KeyboardInterrupt) as exc:  # the boundary: _fail maps every error to its exit code
            display.stop()
            code = _fail(exc, debug, term.err)
        else:
            _finish_uninterrupted()  # the artifacts are committed
            display.stop()
            if not quiet:
                _print_summary(result, term)
            code = result.exit_code
    raise typer.Exit(code)


def _print_summary(result: Any, term: Any) -> None:
    """The run's summary. A reader that closed the pipe early (``| head``) ends the summary, not
    the run: its artifacts are committed and its exit code stands (terminal.EscapingConsole raises
    BrokenPipeError where rich's console would exit 1, the code of a failed parity)."""
    from .reports.summary import print_summary

    try:
        print_summary(result.run_report, term.out, term.err)
    except BrokenPipeError:
        pass


@app.command("export", help="Export MODEL to a LiteRT flatbuffer, check parity and write reports.\n\n" + EXIT_CODES_HELP)
@_with_target_options
@_with_checking_options
def export_command(
    model: str = typer.Argument(..., help="Model: .pt2 ExportedProgram, TorchScript archive, package.module:attr, or pickled module."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Output .tflite path (default: <model stem>.tflite beside the model)."),
    quantize: str = typer.Option(QuantizeMode.NONE.value, "--quantize", "-q", help="Precision: none (fp32), fp16, dynamic-int8 (int8 weights, float activations), int8 (full integer, calibrated), int16x8 (16-bit activations, 8-bit weights), int4 (int4 weights, float activations); --task text-generation: none, fp16, int8 (weight-only), dynamic-int8, int4-mlp, int4-layers, int4 or auto (the smallest that meets the thresholds)."),
    # A plain name, not an enum of choices: a target is one module in edge_export/targets that
    # registers itself, and the API refuses an unknown name (exit 2) listing the registered ones.
    target: str = typer.Option("cpu", "--target", metavar="TARGET", help="cpu (LiteRT/XNNPACK), edgetpu (implies int8, batch 1, NHWC, uint8 I/O), micro (int8 with int8 NHWC I/O, names stripped, TFLite Micro), gpu (float; predicts the Android GPU delegate's partitions), ethos-u55-128 and the other Arm Ethos-U configurations Vela accepts (ethos-u55-32..256, ethos-u65-256/512, ethos-u85-128..2048: micro plus the Vela NPU compiler, <stem>_vela.tflite; needs pip install 'edge-export[ethos-u]'), or any other target registered in edge_export/targets."),
    io_dtype: Optional[IODtype] = typer.Option(None, "--io-dtype", help="Model input/output type for int8: float32 (default), int8 or uint8."),
    quant_backend: QuantBackend = typer.Option(QuantBackend.AUTO, "--quant-backend", help="auto (measure, fall back), pt2e (exported graph) or flatbuffer (ai-edge-quantizer)."),
    time_budget: float = typer.Option(300.0, "--time-budget", metavar="SECONDS", help="Seconds for the whole quantization stage (auto's backends, calibration, --sensitivity, --mixed-precision): when spent, no new step starts (the one running finishes), the best model so far is kept and checked as usual (exit code by its parity), and the report lists what was not tried."),
    mixed_precision: Optional[str] = typer.Option(None, "--mixed-precision", metavar="MODE", help="int8: auto (raise the most sensitive operators until --min-sqnr/--min-cosine/--min-top1 is met: on cpu to int16 activations first, fully integer, and to float only when int16 misses; on micro to int16; the default on cpu when one of them is given), int16 (integer promotions only) or off. Not for --target edgetpu."),
    calibration_data: Optional[Path] = typer.Option(None, "--calibration-data", help="Calibration data: .npz (arrays keyed by input name or position), .npy, a folder of .npy, or a folder of JPEG/PNG images."),
    calibration_samples: Optional[int] = typer.Option(None, "--calibration-samples", help="Use at most this many calibration samples."),
    holdout_fraction: float = typer.Option(0.2, "--holdout-fraction", metavar="FRACTION", help="Labelled calibration data (a folder with one sub-folder per class, or an .npz with a labels array): the fraction of every class held out, evenly spread, for parity and accuracy; the rest calibrates."),
    max_accuracy_drop: float = typer.Option(0.01, "--max-accuracy-drop", metavar="FRACTION", help="Labelled calibration data: the most top-1 accuracy the exported model may lose against PyTorch on the held-out samples (0.01: one percentage point); more is exit 1."),
    range_algorithm: Optional[str] = typer.Option(None, "--range-algorithm", metavar="ALGO", help="Activation ranges for int8/int16x8: minmax, percentile (99.99th) or mse (least quantization error); default: min/max for the flatbuffer backend, PT2E's histogram (MSE) search."),
    part_scales: bool = typer.Option(True, "--part-scales/--no-part-scales", help="int8/int16x8: an output joined (concatenated) from parts whose calibrated ranges differ 10x or more, such as a detector's boxes in pixels and class scores, keeps one scale per part, joined in float at the model's end (the output stays float32 with its name and shape, whatever --io-dtype). --no-part-scales: one integer scale for the whole output."),
    image_size: Optional[str] = typer.Option(None, "--image-size", help="Resize calibration images to H,W (default: the input shape's)."),
    mean: Optional[str] = typer.Option(None, "--mean", help="Per-channel mean of the image input on a 0..1 scale, e.g. 0.485,0.456,0.406: normalizes calibration images and is written as the input's normalization metadata (x255)."),
    std: Optional[str] = typer.Option(None, "--std", help="Per-channel std of the image input on a 0..1 scale, e.g. 0.229,0.224,0.225 (calibration images and normalization metadata, like --mean)."),
    image_layout: str = typer.Option("nchw", "--image-layout", help="Layout the PyTorch model takes images in: nchw or nhwc."),
    channels_last: bool = typer.Option(False, "--channels-last/--no-channels-last", help="NHWC inputs/outputs for 4-D image tensors (no boundary TRANSPOSE ops)."),
    strip_names: bool = typer.Option(False, "--strip-names", help="Drop inner tensor names from the written .tflite (smaller; same computation; the default with --target micro, which writes their map to <stem>.tensors.json). The report keeps the module paths; later `validate --per-layer` on the file needs that map."),
    keep_names: bool = typer.Option(False, "--keep-names", help="Keep inner tensor names where the target strips them by default (--target micro); no tensor-name map is written."),
    input_names: Optional[str] = typer.Option(None, "--input-names", help="Signature input names, comma-separated in forward()'s order (default: forward()'s parameter names)."),
    output_names: Optional[str] = typer.Option(None, "--output-names", help="Signature output names, comma-separated (default: the dict keys / fields forward() returns, else output_0...)."),
    signature_key: str = typer.Option("serving_default", "--signature-key", help="The signature's name in the .tflite."),
    model_name: Optional[str] = typer.Option(None, "--model-name", help="Model name written in the TFLite model metadata (what MediaPipe Tasks and the LiteRT support library read; needs edge-export[metadata])."),
    model_version: Optional[str] = typer.Option(None, "--model-version", help="Model version written in the model metadata."),
    description: Optional[str] = typer.Option(None, "--description", help="Model description written in the model metadata."),
    author: Optional[str] = typer.Option(None, "--author", help="Author written in the model metadata."),
    write_metadata: bool = typer.Option(True, "--metadata/--no-metadata", help="--no-metadata: write no model metadata; --labels, --mean and --std then only serve parity and calibration."),
    emit_test_vectors: bool = typer.Option(False, "--emit-test-vectors", help="Also write <stem>.testdata.npz: parity inputs exactly as the .tflite takes them (dtype, layout, quantization), PyTorch's outputs and the thresholds used; `validate MODEL.tflite --test-vectors FILE` re-checks a model against them without PyTorch."),
    test_vectors_count: int = typer.Option(4, "--test-vectors-count", help="How many parity samples --emit-test-vectors stores (at most the number parity checked)."),
    strict: bool = typer.Option(False, "--strict/--non-strict", help="torch.export strict mode (default non-strict)."),
    validate: bool = typer.Option(True, "--validate/--no-validate", help="Check parity against PyTorch on the host."),
    host_latency: bool = typer.Option(True, "--latency/--no-latency", help="Quantized exports on --target cpu: time the model against its float one on this CPU and flag it when slower (reported, never a gate)."),
    # --task text-generation (edge_export/llm): a Hugging Face causal LM to .tflite + .litertlm, checked against transformers
    task: Optional[str] = typer.Option(None, "--task", help="text-generation: MODEL is a Hugging Face causal-LM folder (config.json, *.safetensors, tokenizer.json; inferred for such a folder) or a package.module:attr returning one (with --tokenizer); writes <stem>.litertlm and the reports (<stem>.tflite too with --write-tflite)."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="text-generation: the folder holding tokenizer.json (default: the model's folder)."),
    prefill_lengths: Optional[str] = typer.Option(None, "--prefill-lengths", help="text-generation: prefill signature lengths, comma-separated, e.g. 32,128 (default: 1/8 of the cache, at most 128)."),
    cache_length: Optional[int] = typer.Option(None, "--cache-length", help="text-generation: KV cache length in tokens, the most prompt plus generated tokens (default: sized from config.json and the weights, see README)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="text-generation: parity prompts, one per line (default: a built-in set of three)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="text-generation: greedy tokens compared per prompt (default 16)."),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="text-generation --quantize int4/auto: int4 weight block size, 32, 64, 128 or 256 (default 32)."),
    write_tflite: bool = typer.Option(False, "--write-tflite", help="text-generation: also write <stem>.tflite (the .litertlm already holds it; default: the .litertlm and reports only)."),
 checking: dict = None,
 target_values: dict = None,
) -> None:
    from .llm.command import text_generation_call, wants_text_generation

    params = dict(locals())
    given = _export_flags_given(params)
    task_values = {name: params[name] for name in _TASK_OPTIONS}
    if wants_text_generation(model, task):  # the language-model chain (edge_export/llm/pipeline.py)
        call = text_generation_call(
            model, output, quantize, target, validate, task=task, **task_values, checking=checking,
            not_for_the_task=[flag for name, flag in given if name not in _TASK_READS],
        )
        return _run(call, checking["quiet"], checking["debug"], checking["verbose"])

    def call(on_stage, on_progress):
        from .api import export

        _refuse_task_options([flag for name, flag in given if name in _TASK_OPTIONS])
        return export(model, output=output, options=_export_options(params), on_stage=on_stage, on_progress=on_progress)

    _run(call, checking["quiet"], checking["debug"], checking["verbose"])


@app.command(
    "validate",
    help="Check an existing MODEL.tflite against a PyTorch reference (any source kind export accepts), or "
    "against the test vectors --emit-test-vectors wrote (--test-vectors FILE: no PyTorch needed). "
    "Thresholds default to the flatbuffer's precision. Writes <stem>.validate.report.json/.md.\n\n" + EXIT_CODES_HELP,
)
@_with_checking_options
def validate_command(
    tflite: Path = typer.Argument(..., help="The .tflite flatbuffer to check."),
    reference: Optional[str] = typer.Option(None, "--reference", "-r", help="The PyTorch model it was exported from (.pt2, TorchScript, package.module:attr, pickle)."),
    test_vectors: Optional[Path] = typer.Option(None, "--test-vectors", help="Instead of --reference: a <stem>.testdata.npz from --emit-test-vectors; the model runs on its inputs and is judged against its outputs, kinds and thresholds (no PyTorch)."),
    report: Optional[Path] = typer.Option(None, "--report", help="Report path prefix (default <tflite stem>.validate)."),
    channels_last: bool = typer.Option(False, "--channels-last", help="The flatbuffer's 4-D inputs are NHWC (only needed when the reference has no example inputs)."),
    tensor_names: Optional[Path] = typer.Option(None, "--tensor-names", help="The tensor-name map of a stripped .tflite (default: <stem>.tensors.json beside it, which --target micro writes); --per-layer needs it."),
    calibration_data: Optional[Path] = typer.Option(None, "--calibration-data", help="Labelled data (an image folder with one sub-folder per class, or an .npz with a labels array): parity and the accuracy check run on its held-out part, split as export splits it."),
    holdout_fraction: float = typer.Option(0.2, "--holdout-fraction", metavar="FRACTION", help="With --calibration-data: the fraction of every class held out (as given to export)."),
    max_accuracy_drop: float = typer.Option(0.01, "--max-accuracy-drop", metavar="FRACTION", help="With --calibration-data: the most top-1 accuracy the model may lose against PyTorch (0.01: one point); more is exit 1."),
    image_size: Optional[str] = typer.Option(None, "--image-size", help="With an image folder: resize to H,W (default: the input shape's)."),
    mean: Optional[str] = typer.Option(None, "--mean", help="With an image folder: per-channel mean on a 0..1 scale, as given to export."),
    std: Optional[str] = typer.Option(None, "--std", help="With an image folder: per-channel std on a 0..1 scale, as given to export."),
    image_layout: str = typer.Option("nchw", "--image-layout", help="With an image folder: the layout the PyTorch model takes images in, nchw or nhwc."),
 checking: dict = None,
) -> None:
    def call(on_stage, on_progress):
        from .api import ExportOptions, validate

        labelled = dict(
            calibration_data=str(calibration_data) if calibration_data else None, holdout_fraction=holdout_fraction,
            max_accuracy_drop=max_accuracy_drop, image_size=_parse_pair(image_size, "--image-size"), mean=_parse_floats(mean, "--mean"),
            std=_parse_floats(std, "--std"), image_layout=image_layout,
        )
        options = ExportOptions(channels_last=channels_last, **labelled, **_checking_fields(checking))
        return validate(
            tflite, reference, test_vectors=test_vectors, report_prefix=report, options=options, on_stage=on_stage, tensor_names=tensor_names
        )

    _run(call, checking["quiet"], checking["debug"], checking["verbose"])


def _run_tool(call, debug: bool, verbose: bool = False, *, with_err: bool = False) -> None:
    """Run a command that prints its own result (inspect, bench) with ``call(out_console)``
    (``with_err``: ``call(out_console, err_console)``)."""
    from .output.terminal import TerminalSession

    with TerminalSession(capture=not verbose) as term:
        try:
            call(term.out, term.err) if with_err else call(term.out)
        except (Exception, KeyboardInterrupt) as exc:  # the boundary: _fail maps every error to its exit code
            code = _fail(exc, debug, term.err)
        else:
            code = 0
    raise typer.Exit(code)


@app.command(
    "inspect",
    help="Describe a .tflite file: signatures, inputs and outputs with dtypes, shapes and quantization, "
    "operator table, tensor count, size, whether it is fully integer, and the minimum runtime version. "
    "A .litertlm package: its sections, tokenizer, start and stop tokens, chat template, sampler, signatures and sizes. "
    "Exit code 2 when the file is not a valid LiteRT flatbuffer (or .litertlm package).",
)
def inspect_command(
    tflite: Path = typer.Argument(..., help="The .tflite flatbuffer or .litertlm package."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    debug: DebugOpt = False,
) -> None:
    def call(out: Console) -> None:
        import json

        from .inspection import inspect_flatbuffer, render_inspection
        from .llm.litertlm_file import is_litertlm_path
        from .output.serialize import to_json_value

        if is_litertlm_path(tflite):
            from .llm.litertlm_inspection import describe_litertlm

            describe_litertlm(tflite, out, as_json)
            return
        report = inspect_flatbuffer(tflite)
        if as_json:
            out.print_json(json.dumps(to_json_value(report)))
        else:
            render_inspection(report, out)

    _run_tool(call, debug)


@app.command(
    "bench",
    help="Host latency of a .tflite file with LiteRT on CPU, with and without XNNPACK: median and spread "
    "after warm-up, on random inputs. Exit code 2 when the file is not a valid LiteRT flatbuffer.",
)
def bench_command(
    tflite: Path = typer.Argument(..., help="The .tflite flatbuffer."),
    threads: int = typer.Option(1, "--threads", help="Interpreter threads."),
    runs: int = typer.Option(50, "--runs", help="Timed runs per runtime."),
    warmup: int = typer.Option(5, "--warmup", help="Untimed runs first."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    verbose: VerboseOpt = False,
    debug: DebugOpt = False,
) -> None:
    def call(out: Console) -> None:
        import json

        from .flatbuffer import load_flatbuffer
        from .runtime.latency import benchmark_latency, render_latency
        from .llm.litertlm_file import is_litertlm_path
        from .output.serialize import to_json_value

        if is_litertlm_path(tflite):
            raise UsageError(f"{tflite} is a LiteRT-LM package: bench times a .tflite's single invocation, not a language model's prefill and decode.",
                             f"Run edge-export generate {tflite} \"a prompt\" (it prints decode and prefill tokens/s), or bench the .tflite an export with --write-tflite writes beside it.")
        report = benchmark_latency(load_flatbuffer(tflite), threads=threads, runs=runs, warmup=warmup)
        if as_json:
            out.print_json(json.dumps(to_json_value(report)))
        else:
            render_latency(report, out)

    _run_tool(call, debug, verbose)


@app.command(
    "constraints",
    help="Print the pinned set of libraries this edge-export was tested with (pip's constraints-file format), "
    "to reproduce the tested environment elsewhere: pip install edge-export -c <(edge-export constraints).",
)
def constraints_command() -> None:
    from .constraints import constraints_text

    sys.stdout.write(constraints_text())  # verbatim: pip reads it, so no console markup or wrapping


@app.command(
    "generate",
    help="Generate text from an exported .litertlm with the LiteRT-LM runtime (CPU), streaming it to stdout as it "
    "is decoded; tokens/s go to stderr. Greedy unless --sample. The package is checked before the runtime opens it. "
    "Exit code 2 for a missing or invalid file or bad usage, 3 when the runtime fails.",
)
def generate_command(
    model: Path = typer.Argument(..., help="The .litertlm package (edge-export writes it beside the .tflite)."),
    prompt: str = typer.Argument(..., help="The prompt: raw text, or with --chat the user's message."),
    chat: bool = typer.Option(False, "--chat", help="Send the prompt as one user turn through the Conversation API and the packaged chat template."),
    max_tokens: int = typer.Option(64, "--max-tokens", help="The most tokens to generate."),
    sample: bool = typer.Option(False, "--sample", help="Use the package's sampler defaults instead of greedy (top-k 1)."),
    verbose: VerboseOpt = False,
    debug: DebugOpt = False,
) -> None:
    def call(out: Console, err: Console) -> None:
        from .llm.generate_command import run_generate

        run_generate(model, prompt, out, err, chat=chat, max_tokens=max_tokens, sample=sample)

    _run_tool(call, debug, verbose, with_err=True)


_COMMANDS = {"export", "validate", "inspect", "bench", "generate", "constraints"}


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: staged files are removed on the way out; exit 143."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated()


_owns_process = False  # main() run as the console script, not called by a host program or a test


def _finish_uninterrupted() -> None:
    """The command is over (its artifacts committed, or none written) and its exit code decided: a
    Ctrl-C or SIGTERM during the summary or the seconds of interpreter shutdown must not turn a
    finished run into "killed by a signal". Only when edge-export owns the process."""
    if not _owns_process:
        return
    import signal

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def main(argv: Optional[List[str]] = None) -> None:
    global _owns_process
    _owns_process = argv is None
    args = list(sys.argv[1:] if argv is None else argv)
    # `edge-export MODEL ...` is `edge-export export MODEL ...`.
    first = next((a for a in args if not a.startswith("-")), None)
    if args and first is not None and first not in _COMMANDS and args[0] not in ("--help", "-h"):
        args = ["export", *args]
        first = "export"
    if first == "export":  # the targets' options: only export needs them (importing the targets costs numpy)
        export_command.refresh_target_options()
    import signal

    try:
        previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals to the host program
        previous_sigterm = None
    try:
        app(args=args, prog_name="edge-export", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is not None and not isinstance(code, int):
            code = EXIT_USAGE
        if argv is None:
            _finish_uninterrupted()
        sys.exit(code)
    finally:
        if previous_sigterm is not None and argv is not None:  # a host program calling main() gets its handler back
            signal.signal(signal.SIGTERM, previous_sigterm)


if __name__ == "__main__":
    main()
