"""The prepare stage: the target's checks on the inputs and its module rewrites, then the
channels-last wrapper (--channels-last): the module and example that conversion receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..options import ExportOptions
from .load import LoadedRun

if TYPE_CHECKING:
    from ..artifacts.model_metadata import ImageInput
    from ..graph.channels_last import ChannelsLastPlan

__all__ = ["PreparedRun", "prepare_stage", "in_model_layout"]


@dataclass(frozen=True)
class PreparedRun:
    loaded: LoadedRun
    base_module: Any  # after the target's rewrites, in PyTorch's layout (what blame and checks read)
    module: Any  # what is converted: base_module, wrapped to take NHWC where the plan says so
    example: tuple  # the example in the layout ``module`` takes
    plan: ChannelsLastPlan
    metadata_image: ImageInput | None  # the metadata's image input, when --mean/--std describe one
    target_entries: dict = field(default_factory=dict)  # the report's target section so far


def in_model_layout(module: Any, example: tuple, plan: Any) -> tuple[Any, tuple]:
    """``module`` and ``example`` as the converted model takes them: NHWC for the plan's inputs."""
    from ..conversion.litert import wrap_channels_last

    wrapped = wrap_channels_last(module, plan) if plan.active else module
    moved = tuple(t.permute(0, 2, 3, 1).contiguous() if i in plan.inputs else t for i, t in enumerate(example))
    return wrapped, moved


def prepare_stage(loaded: LoadedRun, options: ExportOptions, target: Any, implied: list[str]) -> PreparedRun:
    from ..graph.channels_last import plan_channels_last
    from ..artifacts.model_metadata import check_metadata_options

    # The target's sections of the report, in the order of its hooks (see targets/base.py).
    entries: dict = {"name": target.name, "implied": tuple(implied)}  # TargetSection's fields
    target.check_inputs(loaded.specs)
    metadata_image = check_metadata_options(options, loaded.specs, target.carries_metadata)
    prepared = target.prepare(loaded.module, loaded.example, strict=options.inputs.strict)
    entries.update(prepared.report)
    plan = plan_channels_last(
        [len(s.shape) for s in loaded.specs] if options.layout.channels_last else [],
        [t.dim() for t in loaded.reference_out] if options.layout.channels_last else [],
    )
    module, example = in_model_layout(prepared.module, loaded.example, plan)
    return PreparedRun(loaded, prepared.module, module, example, plan, metadata_image, entries)
