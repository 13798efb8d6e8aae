"""The report's record of a rewrite the exporter applied to the user's module (module, kind, why):
written by the FX passes every target runs and by the Edge TPU's module swaps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .serialize import json_field

__all__ = ["AppliedRewrite", "EdgeTPUPreparation"]


@dataclass(frozen=True)
class AppliedRewrite:
    module_path: str
    kind: str
    why: str


@dataclass(frozen=True)
class EdgeTPUPreparation:
    """A module with the Edge TPU's module swaps applied (targets/edgetpu/rewrites.py, or the FX pass
    passes/fx/rewrite_ops_for_edgetpu_pass.py on an exported graph), and the record of each."""

    module: Any = json_field(skip=True)  # the rewritten copy; the caller's module is not changed
    rewrites: tuple[AppliedRewrite, ...]
