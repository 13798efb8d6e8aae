"""The report's record of a rewrite the exporter applied to the user's module (module, kind, why):
written by the FX passes every target runs and by the Edge TPU's module swaps."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AppliedRewrite"]


@dataclass(frozen=True)
class AppliedRewrite:
    module_path: str
    kind: str
    why: str
