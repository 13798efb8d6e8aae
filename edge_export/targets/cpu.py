"""The default target: LiteRT on a CPU (XNNPACK), which runs every mode and adds nothing to the chain."""

from __future__ import annotations

from .base import TargetPlugin, register_target

__all__ = ["CpuTarget"]


class CpuTarget(TargetPlugin):
    name = "cpu"
    reports_target = False  # the report's "target" section is for what a target adds
    mixed_precision_by_default = True
    times_on_host_cpu = True


register_target(CpuTarget())
