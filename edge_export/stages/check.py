"""The target stage: host latency (quantized cpu exports), the model metadata to attach, the
target's flatbuffer rewrites and its checks on the converted model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..options import ExportOptions
from .clock import StageClock
from .convert import ConvertedRun
from .target_options import times_host_latency

if TYPE_CHECKING:
    from ..artifacts.model_metadata import ModelMetadata
    from ..flatbuffer import FlatbufferModel
    from ..runtime.latency import HostLatency
    from ..targets.base import TargetCheck

__all__ = ["CheckedRun", "check_stage", "host_latency_stage"]


@dataclass(frozen=True)
class CheckedRun:
    converted: ConvertedRun
    model: FlatbufferModel  # after the target's rewrites: what parity checks and the run writes
    metadata: ModelMetadata | None  # the TFLite model metadata to attach at the end
    checked: TargetCheck  # what the target's checks returned
    target_entries: dict = field(default_factory=dict)  # the report's target section so far


def host_latency_stage(converted: ConvertedRun, options: ExportOptions, target: Any, clock: StageClock) -> HostLatency | None:
    """The quantized model against its float one on this CPU (latency.py), or None."""
    if converted.quantization is None or converted.float_bytes is None or not times_host_latency(options, target):
        return None
    with clock.run("latency", "Timing the quantized and float models on this CPU (LiteRT + XNNPACK)"):
        from ..flatbuffer import read_flatbuffer
        from ..flatbuffer.pack import align_buffers
        from ..runtime.latency import measure_host_latency
        from ..quantization.mixed_precision import kept_int16_operators

        float_fb = read_flatbuffer(align_buffers(converted.float_bytes), origin="the float model")
        int16_inside = kept_int16_operators(converted.quantization, converted.mixed_precision)
        return measure_host_latency(converted.model, float_fb, options.quantization.quantize.value, kernels="int16x8" if int16_inside else None)


def check_stage(converted: ConvertedRun, options: ExportOptions, target: Any, tflite_path: Path, clock: StageClock) -> CheckedRun:
    from ..artifacts.model_metadata import metadata_requested
    from ..targets.base import TargetCheck, TargetContext

    metadata = None
    if metadata_requested(options) and target.carries_metadata:  # a bad labels file: exit 2 before the checks
        loaded = converted.prepared.loaded
        metadata = build_metadata(converted.model, options, loaded.reference_out, loaded.returned_keys, converted.prepared.metadata_image)
    entries = dict(converted.prepared.target_entries)
    rewritten = target.rewrite(converted.model)
    entries.update(rewritten.report)
    checked = TargetCheck()
    if target.check_label is not None:
        with clock.run("target", target.check_label):
            context = TargetContext(rewritten.model, converted.prepared.base_module, options, tflite_path, metadata)
            checked = target.check(context)
        entries.update(checked.report)
    return CheckedRun(converted, rewritten.model, metadata, checked, entries)


def build_metadata(fb: FlatbufferModel, options: ExportOptions, reference_out: Sequence[Any], returned_keys: Sequence[str | None], image: Any) -> Any:
    """The TFLite model metadata of ``fb`` (model_metadata.py): each output's kind decided as
    parity decides it, so ``--labels`` names the same output and its count is checked here."""
    from ..artifacts.model_metadata import build_model_metadata
    from .parity import output_kinds, outputs_by_name

    names = list(fb.output_names)
    shapes = [tuple(t.shape) for t in reference_out]
    keys = list(returned_keys)
    order = outputs_by_name(keys, names)
    if order is not None:
        shapes, keys = [shapes[i] for i in order], [keys[i] for i in order]
    return build_model_metadata(fb, options, output_kinds(names, keys, shapes, options), image)
