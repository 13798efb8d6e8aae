"""The run report: one typed tree that ``export()`` and ``validate()`` assemble from the stages'
result objects, and that every renderer reads.

    RunReport
      libraries, pinned_set: PinnedSetCheck (the libraries against the tested set)
      model: ModelSection              inputs: InputSection[]        export: ExportSection | ValidateSection
      quantization: QuantizationResult (int modes)                   target: TargetSection (edgetpu, micro)
      artifacts: ArtifactsSection      flatbuffer: FlatbufferSection stages: StageTiming[]
      validation: ParityResult | SkippedValidation                   per_layer: LayerParityReport
      baseline: BaselineSection        host_latency: HostLatency (quantized, cpu)
      accuracy: AccuracyResult (labelled calibration data)
      verdict, exit_code (derived)

The stage results (``QuantizationResult``, ``ParityResult``, ``LayerParityReport``, ``EdgeTPUReport``,
``CompilerResult``, ``MicroReport``...) are the sections themselves: nothing is copied into dicts.
``serialize.to_json_value`` writes the tree as the published JSON (schema
``report.schema.json``, version ``REPORT_SCHEMA_VERSION``); a test walks this tree against the
schema. This module imports no torch or LiteRT: the types of the stage results are named for
readers and type checkers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Union

from ..errors import exit_code_for_verdict
from ..output.serialize import json_field

if TYPE_CHECKING:
    from ..constraints import PinnedSetCheck
    from ..flatbuffer import TensorInfo
    from ..runtime.latency import HostLatency
    from ..quantization import QuantizationResult
    from ..quantization.mixed_precision import MixedPrecisionReport
    from ..quantization.sensitivity import SensitivityReport
    from ..graph.applied_rewrites import AppliedRewrite
    from ..conversion.transpose_report import TransposeReport
    from ..validators.accuracy import AccuracyResult
    from ..validators.layers import LayerParityReport
    from ..validators.parity import ParityResult
    from ..validators.runtimes import RuntimeComparison

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "RunReport",
    "ToolSection",
    "ModelSection",
    "InputSection",
    "ExportSection",
    "ValidateSection",
    "ArtifactsSection",
    "FlatbufferSection",
    "StageTiming",
    "SkippedValidation",
    "TargetSection",
    "AppSection",
    "AppTensor",
    "BaselineSection",
    "MetadataSection",
    "MetadataTensor",
    "AssociatedFile",
    "Verdict",
    "verdict_of",
]

REPORT_SCHEMA_VERSION = "1.1"


class Verdict:
    """The three verdicts a report can carry (strings in the JSON)."""

    PASSED = "passed"
    FAILED = "failed"
    EXPORTED_UNVALIDATED = "exported-unvalidated"


@dataclass(frozen=True)
class ToolSection:
    version: str
    name: str = "edge-export"

    JSON_KEYS = ("name", "version")


@dataclass(frozen=True)
class ModelSection:
    source: str  # a path or package.module:attr
    kind: str  # loading.ModelKind value
    class_name: str = json_field(name="class")
    # how an untrusted archive's run was confined (sandbox.py); absent when the model ran in-process
    isolation: str | None = json_field(default=None, omit_none=True)


@dataclass(frozen=True)
class InputSection:
    """One forward() argument as the flatbuffer takes it."""

    name: str | None
    shape: tuple[int, ...]
    dtype: str
    layout: str | None  # "NHWC" when the flatbuffer takes it channels-last


@dataclass(frozen=True)
class ExportSection:
    """How ``export`` was asked to export."""

    quantize: str
    target: str
    channels_last: bool
    channels_last_inputs: tuple[int, ...]
    channels_last_outputs: tuple[int, ...]
    strict: bool
    io_dtype: str | None  # int modes only
    strip_names: bool
    size_bytes_with_names: int | None = json_field(default=None, omit_none=True)  # with --strip-names


@dataclass(frozen=True)
class ValidateSection:
    """How ``validate`` checked an existing flatbuffer."""

    quantize: str
    target: str
    channels_last: bool
    channels_last_inputs: tuple[int, ...]
    channels_last_outputs: tuple[int, ...]
    strict: bool
    command: str = "validate"
    test_vectors: str | None = json_field(default=None, omit_none=True)  # validate --test-vectors FILE

    JSON_KEYS = ("command", "quantize", "target", "channels_last", "channels_last_inputs", "channels_last_outputs", "strict", "test_vectors")


@dataclass(frozen=True)
class ArtifactsSection:
    """Paths of every file the run wrote."""

    tflite: str
    report_json: str
    report_markdown: str
    junit: str | None = json_field(default=None, omit_none=True)
    # what a target adds (edgetpu_tflite, edgetpu_log, op_resolver): key -> path
    extra: Mapping[str, str] = json_field(default_factory=dict, flatten=True)

    def get(self, key: str) -> str | None:
        """A path by its JSON key (the target's extra artifacts included)."""
        if key in ("tflite", "report_json", "report_markdown", "junit"):
            return getattr(self, key)
        return self.extra.get(key)


@dataclass(frozen=True)
class FlatbufferSection:
    size_bytes: int
    sha256: str
    num_operators: int
    op_counts: Mapping[str, int]  # operator -> count, in first-use order
    num_tensors: int
    num_subgraphs: int
    min_runtime_version: str | None
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    fully_integer: bool
    # The TRANSPOSE operators left and the module of each (transpose_report.py); None: not looked at.
    transposes: TransposeReport | None = json_field(default=None, omit_none=True)


@dataclass(frozen=True)
class AppTensor:
    """One signature input or output as an app feeds or reads it."""

    name: str  # the signature name an app looks it up by
    dtype: str
    shape: tuple[int, ...]
    layout: str  # NHWC, NCHW (PyTorch's order, kept by the converter) or other (not 4-D)
    scale: float | None  # with zero_point: q = round(x / scale) + zero_point; None for float I/O
    zero_point: int | None


@dataclass(frozen=True)
class AppSection:
    """What an app needs to call the model: the signature and its inputs and outputs by name
    (the Markdown's "Use it in an app" section and its Kotlin example read this)."""

    signature_key: str | None  # None: the file has no signature (apps then index tensors by position)
    inputs: tuple[AppTensor, ...]
    outputs: tuple[AppTensor, ...]


@dataclass(frozen=True)
class StageTiming:
    name: str
    seconds: float


@dataclass(frozen=True)
class SkippedValidation:
    reason: str
    status: str = "skipped"

    JSON_KEYS = ("status", "reason")
    passed = None  # neither passed nor failed


@dataclass(frozen=True, init=False)
class TargetSection:
    """What a target implied and what its checks found (absent for --target cpu).

    The target's own typed sections (``TargetPlugin.report_sections``: the Edge TPU mapping, the
    micro budgets...) are in ``sections``, written beside the keys below in the order the targets
    declare them, and read as attributes (``target.budgets``: None when absent). Entries a hook
    returned under a key no target declares are written as they are, in the JSON only.
    """

    name: str
    implied: tuple[str, ...]
    rewrites: tuple[AppliedRewrite, ...] | None = json_field(default=None, omit_none=True)
    reordered_operators: bool | None = json_field(default=None, omit_none=True)
    sections: Mapping[str, Any] = json_field(default_factory=dict, flatten=True)

    def __init__(self, name: str, implied: tuple[str, ...], rewrites: Any = None, reordered_operators: bool | None = None,
                 sections: Mapping[str, Any] | None = None, **more: Any) -> None:
        from ..plugins.report_sections import declared_report_sections

        given = {k: v for k, v in {**(sections or {}), **more}.items() if v is not None}
        order = list(declared_report_sections())
        ordered = {k: given[k] for k in order if k in given} | {k: v for k, v in given.items() if k not in order}
        for attribute, value in (("name", name), ("implied", tuple(implied)), ("rewrites", rewrites),
                                 ("reordered_operators", reordered_operators), ("sections", ordered)):
            object.__setattr__(self, attribute, value)

    def __getattr__(self, key: str) -> Any:
        """A declared section by its key (``target.micro``), None when this run has none."""
        if key.startswith("__") or key == "sections":
            raise AttributeError(key)
        from ..plugins.report_sections import declared_report_sections

        declared = declared_report_sections()
        if key in self.sections:
            return self.sections[key]
        if key in declared:
            return None
        if key.startswith("failed_") and key[len("failed_"):] in declared:  # target.failed_budgets
            return self._failure(key[len("failed_"):], declared)
        raise AttributeError(f"TargetSection has no section {key!r}")

    def _failure(self, key: str, declared: Mapping[str, Any]) -> Any:
        """What the declared ``failed`` hook of section ``key`` says (falsy: the section passes or is absent)."""
        value, hook = self.sections.get(key), declared[key].failed
        return hook(value) if value is not None and hook is not None else ()

    @classmethod
    def from_hooks(cls, entries: Mapping[str, Any]) -> "TargetSection":
        """The section from what a target's hooks returned (see ``__init__``)."""
        return cls(**entries)

    def as_hooks(self) -> dict[str, Any]:
        """The inverse of ``from_hooks``: the entries this section was built from."""
        generic = {"name": self.name, "implied": self.implied, "rewrites": self.rewrites, "reordered_operators": self.reordered_operators}
        return {**{k: v for k, v in generic.items() if v is not None}, **self.sections}

    @property
    def extra(self) -> dict[str, Any]:
        """The entries no target declares (a plugin's free-form keys): in the JSON only."""
        from ..plugins.report_sections import declared_report_sections

        declared = declared_report_sections()
        return {k: v for k, v in self.sections.items() if k not in declared}

    @property
    def failed_sections(self) -> tuple[str, ...]:
        """The keys of the sections that fail the verdict (an exceeded budget, a failed GPU float16
        check): each declaration's ``failed`` hook decides."""
        from ..plugins.report_sections import declared_report_sections

        declared = declared_report_sections()
        return tuple(k for k in self.sections if k in declared and self._failure(k, declared))


@dataclass(frozen=True)
class Regression:
    """One metric that got worse than the baseline report's beyond tolerance (reports/baseline.py)."""

    output: str
    metric: str
    baseline: float | None
    current: float | None
    message: str


@dataclass(frozen=True)
class BaselineSection:
    path: str
    regressions: tuple[Regression, ...]

    JSON_KEYS = ("path", "status", "regressions")

    @property
    def status(self) -> str:
        return "regressed" if self.regressions else "ok"


@dataclass(frozen=True)
class MetadataTensor:
    """One input or output as the model metadata describes it (``model_metadata.py``)."""

    name: str
    kind: str  # "image" (normalization, colour space), "classification" (labels file) or "tensor"
    normalization_mean: tuple[float, ...] | None = None  # on the 0..255 pixel scale apps feed
    normalization_std: tuple[float, ...] | None = None
    color_space: str | None = None  # RGB, GRAYSCALE
    labels_file: str | None = None  # the associated file's name inside the .tflite
    labels_count: int | None = None


@dataclass(frozen=True)
class AssociatedFile:
    """A file packed after the flatbuffer (a zip, as the metadata schema prescribes)."""

    name: str
    type: str  # the schema's AssociatedFileType, e.g. TENSOR_AXIS_LABELS
    size_bytes: int
    sha256: str
    source: str | None = None  # the file it was read from (None when read back from a model)


@dataclass(frozen=True)
class MetadataSection:
    """The TFLite model metadata written into the .tflite (``--labels``, ``--mean``/``--std``,
    ``--model-name``, ``--model-version``, ``--description``, ``--author``), or read back from one."""

    name: str | None
    version: str | None
    description: str | None
    author: str | None
    min_parser_version: str | None
    inputs: tuple[MetadataTensor, ...]
    outputs: tuple[MetadataTensor, ...]
    associated_files: tuple[AssociatedFile, ...]
    metadata_bytes: int  # the metadata flatbuffer's own size
    added_bytes: int | None = None  # what the .tflite grew by (metadata buffer, padding, zip); None when read back
    written_to: tuple[str, ...] = ()  # the .tflite files that carry it (the Edge TPU compiled model too)
    notes: tuple[str, ...] = ()


def verdict_of(
    validation: ParityResult | SkippedValidation,
    per_layer: LayerParityReport | None,
    baseline: BaselineSection | None,
    target: TargetSection | None = None,
    runtimes: RuntimeComparison | None = None,
    language_model: Any = None,  # the declared run section (llm/report.py's LanguageModelSection)
    accuracy: AccuracyResult | None = None,
) -> str:
    """Failed when parity, the per-layer gate, the baseline gate, a flash/RAM budget, the GPU
    float16 precision check or the accuracy drop on labelled data (--max-accuracy-drop) failed, or
    (with --runtime both) when a runtime's parity failed or two runtimes disagree; passed when parity
    passed; exported-unvalidated when parity was skipped (and no gate failed)."""
    if runtimes is not None and runtimes.findings():
        return Verdict.FAILED
    if baseline is not None and baseline.regressions:
        return Verdict.FAILED
    if target is not None and target.failed_sections:
        return Verdict.FAILED
    if per_layer is not None and per_layer.passed is False:
        return Verdict.FAILED
    if accuracy is not None and not accuracy.passed:  # --max-accuracy-drop on labelled data
        return Verdict.FAILED
    if language_model is not None:  # --task text-generation: its parity against transformers
        return Verdict.PASSED if language_model.passed else Verdict.FAILED
    if validation.passed is True:
        return Verdict.PASSED
    if validation.passed is False:
        return Verdict.FAILED
    return Verdict.EXPORTED_UNVALIDATED


@dataclass(frozen=True)
class RunReport:
    """Everything one ``export`` or ``validate`` run found; the JSON, Markdown, JUnit and terminal
    summary are renderings of it."""

    tool: ToolSection
    libraries: Mapping[str, str | None]  # distribution -> version (None: not installed)
    created_at: str  # UTC, ISO 8601
    model: ModelSection
    inputs: tuple[InputSection, ...]
    export: Union[ExportSection, ValidateSection]
    artifacts: ArtifactsSection
    flatbuffer: FlatbufferSection
    stages: tuple[StageTiming, ...]
    validation: Union[ParityResult, SkippedValidation]
    quantization: QuantizationResult | None = json_field(default=None, omit_none=True)
    target: TargetSection | None = json_field(default=None, omit_none=True)
    per_layer: LayerParityReport | None = json_field(default=None, omit_none=True)
    runtimes: RuntimeComparison | None = json_field(default=None, omit_none=True)  # --runtime compiled-model|both
    sensitivity: SensitivityReport | None = json_field(default=None, omit_none=True)  # --sensitivity (int8)
    mixed_precision: MixedPrecisionReport | None = json_field(default=None, omit_none=True)  # --mixed-precision
    host_latency: HostLatency | None = json_field(default=None, omit_none=True)  # quantized exports on cpu
    baseline: BaselineSection | None = json_field(default=None, omit_none=True)
    metadata: MetadataSection | None = json_field(default=None, omit_none=True)  # TFLite model metadata, when written
    app: AppSection | None = json_field(default=None, omit_none=True)  # the signature as an app calls it
    pinned_set: PinnedSetCheck | None = json_field(default=None, omit_none=True)  # libraries vs the tested set
    language_model: Any = json_field(default=None, omit_none=True)  # --task text-generation: a declared run section (llm/report.py)
    accuracy: AccuracyResult | None = json_field(default=None, omit_none=True)  # labelled calibration data (validators/accuracy.py)
    schema_version: str = field(default=REPORT_SCHEMA_VERSION)

    JSON_KEYS = (
        "schema_version", "tool", "libraries", "pinned_set", "created_at", "model", "inputs", "export", "quantization",
        "target", "artifacts", "flatbuffer", "stages", "validation", "runtimes", "per_layer", "sensitivity",
        "mixed_precision", "host_latency", "baseline", "metadata", "app", "language_model", "accuracy", "verdict", "exit_code",
    )

    @property
    def verdict(self) -> str:
        return verdict_of(self.validation, self.per_layer, self.baseline, self.target, self.runtimes, self.language_model, self.accuracy)

    @property
    def exit_code(self) -> int:
        """The process exit code this verdict maps to (errors.exit_code_for_verdict)."""
        return exit_code_for_verdict(self.verdict)
