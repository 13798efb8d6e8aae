"""The target interface: what a deployment target adds to the export chain, and the registry of targets.

A target is one object (a ``TargetPlugin``) that ``edge_export.api`` asks, in the order of the chain:

    implied_options  what the target implies (e.g. int8, uint8 I/O, NHWC) and what it refuses
    check_inputs     input specs it cannot take (e.g. a batch above 1), refused before any tracing
    prepare_module   module/graph rewrites before conversion (``PreparedModule``)
    rewrite_flatbuffer  flatbuffer passes after conversion (``RewrittenFlatbuffer``)
    check            its checks on the converted model, the artifacts it adds and the runner
                     parity uses (``TargetCheck``)
    parity_runner    the ``Runner`` parity runs through (default: the LiteRT interpreter)
    finish           after parity and --strip-names, on the model as written (``FinishedRun``):
                     report entries and artifacts made from it (``FinishedTarget``; e.g. the
                     micro target's tensor-name map, flash/RAM budgets and C bundle)

Every hook has a do-nothing default, so a target implements only what it changes. Targets register
themselves with ``register_target`` when their module is imported; ``get_target`` imports every
module of the ``edge_export.targets`` package once, so a new target is one new module there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Mapping,
    Protocol,
    Sequence,
    runtime_checkable,
)

from ..config import IODtype, QuantizeMode
from ..errors import UsageError
from .registry import (
    TARGET_NAME_PATTERN,
    ReportSection,
    TargetOptions,
    get_target,
    register_target,
    registered_targets,
    target_name,
    unregister_target,
)

if TYPE_CHECKING:
    import numpy as np

    from ..options import ExportOptions
    from ..flatbuffer import FlatbufferModel
    from ..reports.model import RunReport
    from ..runtime.interpreter import IOTensor

__all__ = [
    "Runner",
    "TargetArtifact",
    "PreparedModule",
    "RewrittenFlatbuffer",
    "TargetContext",
    "TargetCheck",
    "FinishedRun",
    "TargetPlugin",
    "register_target",
    "TARGET_NAME_PATTERN",
    "unregister_target",
    "get_target",
    "target_name",
    "registered_targets",
    "litert_runner",
    "imply_full_integer_int8",
]


@runtime_checkable
class Runner(Protocol):
    """What parity needs from a runtime: float arrays in, float arrays out, in forward() order.

    ``inputs``/``outputs`` describe the model's I/O as the runtime sees it (signature names, and the
    scales of integer outputs, which parity uses to count errors in quantization steps). ``name``
    is the runtime the report names ("TFLite Micro host interpreter", ...).
    """

    name: str
    inputs: Sequence[IOTensor]
    outputs: Sequence[IOTensor]

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class TargetArtifact:
    """A file the target adds to the artifact set (committed with the .tflite, or not at all)."""

    key: str  # its key under the report's "artifacts"
    path: Path
    data: bytes


@dataclass(frozen=True)
class PreparedModule:
    module: Any  # the module to convert (a rewritten copy, or the caller's module unchanged)
    report: Mapping[str, Any] = field(default_factory=dict)  # entries of the report's target section


@dataclass(frozen=True)
class RewrittenFlatbuffer:
    model: FlatbufferModel
    report: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetContext:
    """What a target's checks may read: the converted model and where the run writes."""

    model: FlatbufferModel  # verified; its bytes (``.data``) are what the run writes
    source_module: Any  # the PyTorch module that was converted (after prepare_module)
    options: ExportOptions
    tflite_path: Path
    # The TFLite model metadata the run attaches at the end (model_metadata.ModelMetadata; None:
    # none): a target whose artifacts are other models (the Edge TPU compiler's) attaches it to them.
    metadata: Any = None


@dataclass(frozen=True)
class TargetCheck:
    report: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[TargetArtifact, ...] = ()
    # Builds the runner parity uses; None: the target's default (parity_runner). A factory, so that
    # nothing is loaded when parity does not run (--no-validate).
    runner: Callable[[], Runner] | None = None
    # The runtime that runner uses, for the message when it crashes natively (None: LiteRT/XNNPACK).
    runner_label: str | None = None


@dataclass(frozen=True)
class FinishedRun:
    """What ``finish`` may read: the model exactly as the run writes it (after --strip-names), the
    same model with its tensor names (what provenance reads; the same object without
    --strip-names), the report so far (verdict, parity; the target section without ``finish``'s
    entries), what the target's own check returned, and the samples parity checked."""

    model: FlatbufferModel
    named_model: FlatbufferModel
    report: RunReport
    checked: TargetCheck
    options: ExportOptions
    tflite_path: Path
    # parity's samples: (feeds in the model's layout, PyTorch's outputs) per sample; None: no parity
    samples: tuple[Sequence[Any], Sequence[Any]] | None = None
    source_module: Any = None  # the PyTorch module converted (after prepare_module), for blame

    def report_with(self, entries: Mapping[str, Any]) -> RunReport:
        """The report as it will be written once ``entries`` join its target section (e.g. for a
        headline that must count a budget ``finish`` found exceeded)."""
        from ..reports.model import TargetSection

        current = self.report.target
        merged = {**(current.as_hooks() if current is not None else {}), **entries}
        return replace(self.report, target=TargetSection.from_hooks(merged))


@dataclass(frozen=True)
class FinishedTarget:
    """What ``finish`` adds: entries of the report's target section and files written atomically
    with the rest (their paths listed by ``output_paths``)."""

    report: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[TargetArtifact, ...] = ()


def litert_runner(model: FlatbufferModel) -> Runner:
    """The LiteRT interpreter with XNNPACK: what apps run, and parity's default."""
    from ..runtime.interpreter import Resolver, TFLiteRunner

    return TFLiteRunner(model, resolver=Resolver.XNNPACK)


class TargetPlugin:
    """One deployment target. Subclasses set ``name`` and override the hooks they need."""

    name: str = ""
    # The options only this target (and targets derived from it) accepts, a TargetOptions dataclass:
    # each field becomes an ExportOptions keyword and a command-line flag, and is refused with any
    # other target. ``options.target_options`` is an instance once the target settled the options.
    options_class: ClassVar[type[TargetOptions] | None] = None
    # The typed sections this target adds under the report's "target", with their renderers (ReportSection).
    report_sections: ClassVar[tuple[ReportSection, ...]] = ()
    # The quantizer must leave no float operator (the target has no float kernels).
    requires_full_integer: bool = False
    # What --mixed-precision may raise an int8 operator to ("int16": int16x8 kernels, "float": float
    # kernels); () refuses the option. And whether `auto` is on by default when an accuracy target
    # (--min-sqnr, --min-cosine, --min-top1) is given (quantization/mixed_precision.py).
    mixed_precision_promotions: tuple[str, ...] = ("int16", "float")
    mixed_precision_by_default: bool = False
    # The operators the target runs with int16 activations; None: every one ai-edge-quantizer can
    # make (the search keeps the others int8 when it raises their neighbours).
    int16_opcodes: frozenset[str] | None = None
    # The model runs where edge-export runs: LiteRT on a CPU, so the report times a quantized export
    # against its float model on this host (latency.measure_host_latency). False for accelerators
    # and microcontrollers (micro, Ethos-U, Edge TPU), and for gpu: a host CPU time says nothing there.
    times_on_host_cpu: bool = False
    # The report gets a "target" section (cpu, the default, adds nothing to report).
    reports_target: bool = True
    # Stage label of ``check`` (None: the target has no checks and the stage is skipped).
    check_label: str | None = None
    # The written .tflite keeps TFLite model metadata (--labels, --mean/--std, --model-name...).
    carries_metadata: bool = True
    # The name prefix a family of targets shares, one plugin per hardware configuration (e.g.
    # "ethos-u"): errors name the family once, and an unknown name with its prefix lists the family.
    family: ClassVar[str | None] = None

    @property
    def own_options(self) -> dict[str, str]:
        """This target's options as {name: flag}."""
        from ..option_fields import flagged_fields

        if self.options_class is None:
            return {}
        return {f.name: flag.name for f, flag in flagged_fields(self.options_class)}

    def settled_options(self, options: ExportOptions) -> ExportOptions:
        """``options`` with this target's own options object (its defaults when none was given)."""
        given = options.target_options.given() if options.target_options is not None else {}
        own = self.options_class(**given) if self.options_class is not None else None
        return options.with_values(target_options=own)

    def writes_target_section(self, entries: Mapping[str, Any]) -> bool:
        """Whether the report gets a "target" section: when the target adds to it, or when the
        module was rewritten or a rewrite declined (an LSTM kept unrolled), whatever the target."""
        return self.reports_target or bool(entries.get("rewrites"))

    def implied_options(self, options: ExportOptions) -> tuple[ExportOptions, list[str]]:
        """Options the target implies, each with a note for the report; raise UsageError for a
        contradiction rather than rewriting it."""
        return options, []

    def output_paths(self, options: ExportOptions, tflite_path: Path) -> list[tuple[str, Path]]:
        """(label, path) of the files ``check`` may add, checked against the inputs up front."""
        return []

    def check_inputs(self, specs: Sequence[Any]) -> None:
        """Refuse input specs the target cannot take (a TargetError or UsageError)."""

    def prepare_module(self, module: Any, example: tuple) -> PreparedModule:
        return PreparedModule(module)

    def prepare(self, module: Any, example: tuple, *, strict: bool = False) -> PreparedModule:
        """What the chain calls before conversion: the FX passes every target needs (operators LiteRT
        cannot run refused, lowerings it cannot run rewritten: ``passes/fx/pipeline.py``), then the
        target's own ``prepare_module``. Targets override ``prepare_module``, not this."""
        from ..passes.fx.pipeline import prepare_graph_for_litert

        graph = prepare_graph_for_litert(module, example, strict=strict)
        prepared = self.prepare_module(graph.module, example)
        if not graph.rewrites:
            return prepared
        from ..graph.applied_rewrites import AppliedRewrite  # the report's rewrite record (module, kind, why)

        applied = tuple(AppliedRewrite(r.module_path or "<root>", r.kind, r.why, r.module_type, r.source, r.declined) for r in graph.rewrites)
        return PreparedModule(prepared.module, {**prepared.report, "rewrites": (*applied, *prepared.report.get("rewrites", ()))})

    def rewrite(self, model: FlatbufferModel) -> RewrittenFlatbuffer:
        """What the chain calls after conversion: the flatbuffer passes every target needs (operators
        that do nothing removed, constant ones folded: ``passes/flatbuffer/device_graph.py``), then the
        target's own ``rewrite_flatbuffer``. Targets override ``rewrite_flatbuffer``, not this."""
        from ..passes.flatbuffer.device_graph import simplify_device_graph

        return self.rewrite_flatbuffer(simplify_device_graph(model))

    def rewrite_flatbuffer(self, model: FlatbufferModel) -> RewrittenFlatbuffer:
        return RewrittenFlatbuffer(model)

    def check(self, context: TargetContext) -> TargetCheck:
        return TargetCheck()

    def finish(self, run: FinishedRun) -> FinishedTarget:
        """Report entries and artifacts from the model as written: runs after parity and
        --strip-names, once, with the report so far."""
        return FinishedTarget()

    def parity_runner(self, model: FlatbufferModel, checked: TargetCheck) -> Runner:
        if checked.runner is not None:
            return checked.runner()
        return litert_runner(model)


def imply_full_integer_int8(options: ExportOptions, name: str) -> tuple[ExportOptions, list[str]]:
    """For targets without float kernels: --quantize int8 is implied, any other mode refused."""
    flag = f"--target {name}"
    quantize = options.quantization.quantize
    if quantize not in (QuantizeMode.NONE, QuantizeMode.INT8):
        raise UsageError(
            f"{flag} runs only fully integer int8 models, but --quantize {quantize.value} was given.",
            "Drop --quantize (it implies int8) or use --quantize int8.",
        )
    if quantize is QuantizeMode.NONE:
        return options.with_values(quantize=QuantizeMode.INT8), [f"{flag} implies --quantize int8 (full integer)"]
    return options, []


def imply_io_dtype(options: ExportOptions, name: str, io_dtype: IODtype, why: str = "") -> tuple[ExportOptions, list[str]]:
    if options.layout.io_dtype is not None:
        return options, []
    note = f"--target {name} implies --io-dtype {io_dtype.value}" + (f" ({why})" if why else "")
    return options.with_values(io_dtype=io_dtype), [note]


def refuse_foreign_options(plugin: TargetPlugin, options: ExportOptions) -> None:
    """Options that belong to other targets are refused, never silently ignored.

    The error names every option given that the same targets own ("--edgetpu-compiler and
    --delegate apply to --target edgetpu only."), so one message covers them, and only them: micro
    owns several options, and a message about --max-flash need not list the op resolver.
    """
    # only the options given, so a default is never refused
    given = options.target_options.given() if options.target_options is not None else {}
    owners, flags = _option_owners()
    for option, names in owners.items():
        if option in plugin.own_options or option not in given:
            continue
        group = [flags[o] for o, n in owners.items() if n == names and o in given]
        joined = group[0] if len(group) == 1 else ", ".join(group[:-1]) + " and " + group[-1]
        verb = "applies" if len(group) == 1 else "apply"
        targets = " or ".join(f"--target {name}" for name in names)
        raise UsageError(f"{joined} {verb} to {targets} only.", f"Add --target {names[0]}.")


def _option_owners() -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """Each declared option's owning targets (a family named once, by its first member: "--target
    ethos-u55-32 (any ethos-u target)"), and its flag."""
    owners: dict[str, tuple[str, ...]] = {}
    flags: dict[str, str] = {}
    for other in registered_targets().values():
        label = f"{other.name} (any {other.family} target)" if other.family else other.name
        for option, flag in other.own_options.items():
            named = owners.get(option, ())
            if label not in named and not (other.family and any(n.startswith(other.family) for n in named)):
                owners[option] = (*named, label)
            flags[option] = flag
    return owners, flags
