"""The target interface: what a deployment target adds to the export chain, and the registry of targets.

A target is one object (a ``TargetPlugin``) that ``edge_export.api`` asks, in the order of the chain:

    implied_options  what the target implies (e.g. int8, uint8 I/O, NHWC) and what it refuses
    check_inputs     input specs it cannot take (e.g. a batch above 1), refused before any tracing
    prepare_module   module/graph rewrites before conversion (``PreparedModule``)
    rewrite_flatbuffer  flatbuffer passes after conversion (``RewrittenFlatbuffer``)
    check            its checks on the converted model, the artifacts it adds and the runner
                     parity uses (``TargetCheck``)
    finish           artifacts made from the model as written and the finished report
                     (``FinishedRun``; e.g. the micro target's C bundle)
    parity_runner    the ``Runner`` parity runs through (default: the LiteRT interpreter)
    written_artifacts  files derived from the model as written (after --strip-names)
    check_written    checks on the file as written (after --strip-names), e.g. flash and RAM budgets

Every hook has a do-nothing default, so a target implements only what it changes. Targets register
themselves with ``register_target`` when their module is imported; ``get_target`` imports every
module of the ``edge_export.targets`` package once, so a new target is one new module there.
"""

from __future__ import annotations

import importlib
import pkgutil
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

from ..config import IODtype, QuantizeMode, Target
from ..errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from ..api import ExportOptions
    from ..flatbuffer import FlatbufferModel
    from ..reports.model import RunReport
    from ..runtime import IOTensor

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
    report (verdict, parity), and what the target's own check returned."""

    model: FlatbufferModel
    report: RunReport
    checked: TargetCheck
    options: ExportOptions
    tflite_path: Path


def litert_runner(model: FlatbufferModel) -> Runner:
    """The LiteRT interpreter with XNNPACK: what apps run, and parity's default."""
    from ..runtime import Resolver, TFLiteRunner

    return TFLiteRunner(model, resolver=Resolver.XNNPACK)


class TargetPlugin:
    """One deployment target. Subclasses set ``name`` and override the hooks they need."""

    name: str = ""
    # ExportOptions fields that only this target (and targets derived from it) accept, with their
    # flags in the order an error names them. Given with another target, they are refused.
    own_options: ClassVar[Mapping[str, str]] = {}
    # The quantizer must leave no float operator (the target has no float kernels).
    requires_full_integer: bool = False
    # What --mixed-precision may raise an int8 operator to ("int16": int16x8 kernels, "float": float
    # kernels); () refuses the option. And whether `auto` is on by default when an accuracy target
    # (--min-sqnr, --min-cosine, --min-top1) is given (quantization/mixed_precision.py).
    mixed_precision_promotions: tuple[str, ...] = ("int16", "float")
    mixed_precision_by_default: bool = False
    # The report gets a "target" section (cpu, the default, adds nothing to report).
    reports_target: bool = True
    # Stage label of ``check`` (None: the target has no checks and the stage is skipped).
    check_label: str | None = None

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

    def rewrite_flatbuffer(self, model: FlatbufferModel) -> RewrittenFlatbuffer:
        return RewrittenFlatbuffer(model)

    def check(self, context: TargetContext) -> TargetCheck:
        return TargetCheck()

    def check_written(
        self, model: FlatbufferModel, named_model: FlatbufferModel, checked: TargetCheck, options: ExportOptions
    ) -> Mapping[str, Any]:
        """Entries of the report's target section from the model as written (``model``, its size
        final) and before names were stripped (``named_model``, same tensor indices, the names
        provenance reads): budgets (``targets/budgets.py``). Runs after parity."""
        return {}

    def finish(self, run: FinishedRun) -> tuple[TargetArtifact, ...]:
        """Artifacts that need the written model or the report (listed by ``output_paths`` too);
        written atomically with the rest."""
        return ()

    def parity_runner(self, model: FlatbufferModel, checked: TargetCheck) -> Runner:
        if checked.runner is not None:
            return checked.runner()
        return litert_runner(model)

    def written_artifacts(
        self, named: FlatbufferModel, written: FlatbufferModel, options: ExportOptions, tflite_path: Path
    ) -> tuple[TargetArtifact, ...]:
        """Files derived from the model as written, after ``--strip-names`` (``named`` is the same
        model before it): micro's tensor-name map. Their paths must be in ``output_paths``."""
        return ()


def imply_full_integer_int8(options: ExportOptions, name: str) -> tuple[ExportOptions, list[str]]:
    """For targets without float kernels: --quantize int8 is implied, any other mode refused."""
    flag = f"--target {name}"
    if options.quantize not in (QuantizeMode.NONE, QuantizeMode.INT8):
        raise UsageError(
            f"{flag} runs only fully integer int8 models, but --quantize {options.quantize.value} was given.",
            "Drop --quantize (it implies int8) or use --quantize int8.",
        )
    if options.quantize is QuantizeMode.NONE:
        return replace(options, quantize=QuantizeMode.INT8), [f"{flag} implies --quantize int8 (full integer)"]
    return options, []


def imply_io_dtype(options: ExportOptions, name: str, io_dtype: IODtype, why: str = "") -> tuple[ExportOptions, list[str]]:
    if options.io_dtype is not None:
        return options, []
    note = f"--target {name} implies --io-dtype {io_dtype.value}" + (f" ({why})" if why else "")
    return replace(options, io_dtype=io_dtype), [note]


# ---- the registry -------------------------------------------------------------------------------

_REGISTRY: dict[str, TargetPlugin] = {}
_discovered = False


def register_target(plugin: TargetPlugin) -> TargetPlugin:
    """Make ``plugin`` available as ``--target plugin.name`` in the API; returns it."""
    if not plugin.name:
        raise ValueError(f"{type(plugin).__name__} has no name")
    existing = _REGISTRY.get(plugin.name)
    if existing is not None and type(existing) is not type(plugin):
        raise ValueError(f"target {plugin.name!r} is already registered by {type(existing).__name__}")
    _REGISTRY[plugin.name] = plugin
    return plugin


def unregister_target(name: str) -> None:
    _REGISTRY.pop(name, None)


def _discover() -> None:
    """Import every module of this package once: each target module registers its plugin."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{__package__}.{info.name}")


def target_name(target: Target | str) -> str:
    return target.value if isinstance(target, Target) else str(target)


def registered_targets() -> dict[str, TargetPlugin]:
    """Every target by name: the CLI's (the Target enum's order) first, then the others by name,
    whatever order their modules were imported in (errors list them in this order)."""
    _discover()
    builtin = {t.value: i for i, t in enumerate(Target)}
    return dict(sorted(_REGISTRY.items(), key=lambda item: (builtin.get(item[0], len(builtin)), item[0])))


def get_target(target: Target | str) -> TargetPlugin:
    name = target_name(target)
    plugin = _REGISTRY.get(name)
    if plugin is None:
        _discover()
        plugin = _REGISTRY.get(name)
    if plugin is None:
        raise UsageError(f"--target {name} is not known.", f"Use one of: {', '.join(registered_targets())}.")
    return plugin


def refuse_foreign_options(plugin: TargetPlugin, options: ExportOptions) -> None:
    """Options that belong to other targets are refused, never silently ignored.

    The error names every option given that the same targets own ("--edgetpu-compiler and
    --delegate apply to --target edgetpu only."), so one message covers them, and only them: micro
    owns several options, and a message about --max-flash need not list the op resolver.
    """
    from ..api import ExportOptions

    defaults = ExportOptions.__dataclass_fields__
    owners: dict[str, tuple[str, ...]] = {}
    flags: dict[str, str] = {}
    for other in registered_targets().values():
        for option, flag in other.own_options.items():
            owners[option] = (*owners.get(option, ()), other.name)
            flags[option] = flag
    for option, names in owners.items():
        if option in plugin.own_options or getattr(options, option) == defaults[option].default:
            continue
        group = [flags[o] for o, n in owners.items() if n == names and getattr(options, o) != defaults[o].default]
        joined = group[0] if len(group) == 1 else ", ".join(group[:-1]) + " and " + group[-1]
        verb = "applies" if len(group) == 1 else "apply"
        targets = " or ".join(f"--target {name}" for name in names)
        raise UsageError(f"{joined} {verb} to {targets} only.", f"Add --target {names[0]}.")
