"""The report's record of a rewrite the exporter applied to the user's module (module, kind, why),
or declined with its reason (an LSTM kept unrolled): written by the FX passes every target runs
(``--target cpu`` included) and by the Edge TPU's module swaps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..output.serialize import json_field

__all__ = ["AppliedRewrite", "EdgeTPUPreparation"]


@dataclass(frozen=True)
class AppliedRewrite:
    module_path: str
    kind: str
    why: str
    module_type: str | None = json_field(default=None, omit_none=True)  # "LSTM", when the graph names it
    source: str | None = json_field(default=None, omit_none=True)  # "file.py:12" in the user's code
    declined: bool = False  # not made (an LSTM kept unrolled): ``why`` says why

    def describe(self) -> str:
        """``nn.GRU kept unrolled in module 'gru' (GRU), at model.py:12``."""
        from .provenance import describe_location

        return f"{self.kind}{describe_location(self.module_path, self.module_type, self.source)}"


@dataclass(frozen=True)
class EdgeTPUPreparation:
    """A module with the Edge TPU's module swaps applied (targets/edgetpu/rewrites.py, or the FX pass
    passes/fx/rewrite_ops_for_edgetpu_pass.py on an exported graph), and the record of each."""

    module: Any = json_field(skip=True)  # the rewritten copy; the caller's module is not changed
    rewrites: tuple[AppliedRewrite, ...]
