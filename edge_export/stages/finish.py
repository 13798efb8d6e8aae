"""The finish stage: the model as it will be written (--strip-names, then the model metadata: the
last changes, after every check) and the artifacts made from it (test vectors, Model Explorer
overlays)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..version import __version__
from ..options import ExportOptions
from .check import CheckedRun
from .clock import StageClock
from .parity import ParityRun

if TYPE_CHECKING:
    from ..quantization.sensitivity import SensitivityReport
    from ..reports.model import MetadataSection
    from ..targets.base import TargetArtifact
    from ..flatbuffer import FlatbufferModel

__all__ = ["FinishedModel", "finish_stage", "overlay_artifacts"]


@dataclass(frozen=True)
class FinishedModel:
    model: FlatbufferModel  # exactly what is written
    named_model: FlatbufferModel  # what the checks ran on (the same object without --strip-names)
    metadata: MetadataSection | None  # the report's metadata section
    artifacts: tuple[TargetArtifact, ...]  # the run's own files: test vectors, overlays
    sensitivity: SensitivityReport | None  # the ranking, with its overlay's path


def finish_stage(checked: CheckedRun, validated: ParityRun, options: ExportOptions, tflite_path: Path, clock: StageClock) -> FinishedModel:
    named = checked.model
    fb = _strip_names(named) if options.outputs.strip_names else named
    fb, metadata = _attach_metadata(fb, checked, tflite_path, clock)
    artifacts: tuple = ()
    # The test vectors describe the file exactly as written (its sha256), metadata included.
    if options.outputs.emit_test_vectors and validated.samples is not None:
        artifacts = (test_vectors_artifact(fb, validated, checked.converted.prepared, options, tflite_path),)
    # Model Explorer overlays only where asked for (their paths were checked against the inputs up
    # front), keyed by the names the checks ran on.
    sensitivity = validated.sensitivity
    overlays = overlay_artifacts(sensitivity if options.quantization.sensitivity else None, validated.layers, named, tflite_path)
    if sensitivity is not None and options.quantization.sensitivity:
        stripped_note = (
            "The overlay's keys are the tensor names before --strip-names (the written file has none; "
            "its tensor-name map, when the target writes one, gives them back)."
        )
        notes = sensitivity.notes + ((stripped_note,) if options.outputs.strip_names else ())
        sensitivity = replace(sensitivity, overlay=str(overlays[0].path), notes=notes)
    return FinishedModel(fb, named, metadata, (*artifacts, *overlays), sensitivity)


def _strip_names(fb: FlatbufferModel) -> FlatbufferModel:
    """After every check: parity, per-layer rows and module paths need the names, and the stripped
    model computes exactly the same (the runtimes never read inner tensor names, nor the
    converter's description and metadata, static shape signatures or min/max)."""
    from ..passes.flatbuffer import run_flatbuffer_passes, strip_tensor_names_pass, strip_unread_fields_pass

    stripping = [strip_tensor_names_pass, strip_unread_fields_pass]
    return run_flatbuffer_passes(fb, stripping, origin="the model without tensor names").model


def _attach_metadata(fb: FlatbufferModel, checked: CheckedRun, tflite_path: Path, clock: StageClock) -> tuple[FlatbufferModel, Any]:
    """The last change to the model: after every check (parity ran on the same operators and
    buffers; metadata changes no computation) and --strip-names."""
    if checked.metadata is None:
        return fb, None
    with clock.run("metadata", "Attaching the model metadata"):
        from ..artifacts.model_metadata import attach_metadata, model_has_metadata

        size_before = fb.size_bytes
        fb = attach_metadata(fb, checked.metadata)
        # The .tflite, and the target's models that carry it too (the Edge TPU compiled model).
        others = (str(a.path) for a in checked.checked.artifacts if a.path.suffix == ".tflite" and model_has_metadata(a.data))
        section = replace(checked.metadata.section, added_bytes=fb.size_bytes - size_before, written_to=(str(tflite_path), *others))
    return fb, section


def test_vectors_artifact(fb: FlatbufferModel, validated: ParityRun, prepared: Any, options: ExportOptions, tflite_path: Path) -> Any:
    """``<stem>.testdata.npz`` (--emit-test-vectors) from the samples parity checked, written with
    the other artifacts and listed under the report's ``artifacts`` as ``test_vectors``."""
    from ..targets.base import TargetArtifact
    from ..artifacts.testdata import build_reference_vectors, serialize_vectors, test_vectors_path

    feeds, references = validated.samples
    vectors = build_reference_vectors(
        fb, feeds, references, validated.parity,
        channels_last_inputs=prepared.plan.inputs, channels_last_outputs=prepared.plan.outputs,
        count=options.outputs.test_vectors_count, model_class=prepared.loaded.loaded.class_name, tool_version=__version__,
    )
    return TargetArtifact("test_vectors", test_vectors_path(tflite_path), serialize_vectors(vectors))


def overlay_artifacts(sensitivity: Any, layers: Any, named_fb: FlatbufferModel, tflite_path: Path) -> tuple:
    """The Model Explorer node-data files: keyed by the tensor names of the model as checked (the
    written model's, or with --strip-names the names it had before stripping)."""
    from ..reports.model_explorer import overlay_file
    from ..targets.base import TargetArtifact

    found = []
    if sensitivity is not None:
        found.append(TargetArtifact(*overlay_file("sensitivity", sensitivity, named_fb, tflite_path)))
    if layers is not None:
        found.append(TargetArtifact(*overlay_file("per_layer", layers, named_fb, tflite_path)))
    return tuple(found)
