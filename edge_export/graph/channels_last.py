"""Which inputs and outputs of a model move to NHWC (--channels-last): the plan conversion wraps the
module by and the report names, apart from the conversion that uses it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["ChannelsLastPlan", "plan_channels_last"]


@dataclass(frozen=True)
class ChannelsLastPlan:
    """Which inputs and outputs are 4-D image tensors that move to NHWC."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def active(self) -> bool:
        return bool(self.inputs or self.outputs)


def plan_channels_last(input_ranks: Sequence[int], output_ranks: Sequence[int]) -> ChannelsLastPlan:
    return ChannelsLastPlan(
        inputs=tuple(i for i, r in enumerate(input_ranks) if r == 4),
        outputs=tuple(i for i, r in enumerate(output_ranks) if r == 4),
    )
