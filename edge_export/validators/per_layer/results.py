"""What per-layer parity returns: one row per compared layer, the modules left out and why, the
counts and the jump rule (see ``edge_export.validators.layers`` for how the rows are found)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = [
    "JUMP_DROP_DB",
    "JUMP_FLOOR_DB",
    "JumpRule",
    "LayerParity",
    "LayerParityReport",
    "UnmatchedModule",
    "UnmatchedReason",
]

JUMP_DROP_DB = 10.0
JUMP_FLOOR_DB = 30.0


@dataclass(frozen=True)
class LayerParity:
    """One compared layer: a PyTorch module's output against one flatbuffer tensor."""

    position: int  # index among the compared layers, in graph order
    module_path: str  # dotted path inside the model ("" is the model itself)
    module_type: str  # class name, e.g. Conv2d
    tflite_tensor: str
    tflite_index: int
    opcode: str  # operator producing the tensor
    shape: tuple[int, ...]  # flatbuffer shape
    dtype: str  # flatbuffer dtype (int8 tensors are dequantized before comparing)
    torch_shape: tuple[int, ...]
    layout: str  # how the flatbuffer tensor was brought to the PyTorch layout
    sqnr_db: float  # mean over samples
    cosine: float  # mean over samples
    also_outputs_of: tuple[str, ...] = ()  # modules whose output is the same tensor (parents)
    fused_modules: tuple[str, ...] = ()  # modules fused into this op (a conv into its ReLU)
    passed: bool | None = None  # sqnr_db >= min_sqnr_db when a per-layer gate was given

    @property
    def label(self) -> str:
        return self.module_path or "<model>"


class UnmatchedReason(str, enum.Enum):
    FUSED = "fused"  # its value only exists inside a later op (a conv fused into its ReLU)
    IDENTITY = "identity"  # returns its input unchanged (Dropout in eval)
    NO_TENSOR = "no tensor"  # no tensor carries its name (folded away, or dead code)
    SHAPE_MISMATCH = "shape mismatch"  # its tensor cannot be transposed to the PyTorch shape
    AMBIGUOUS_NAME = "ambiguous name"  # two modules give the same scope name
    REPEATED_CALLS = "repeated calls"  # used several times; the calls cannot be told apart


@dataclass(frozen=True)
class UnmatchedModule:
    module_path: str
    module_type: str
    reason: UnmatchedReason
    fused_into: str | None = None  # the flatbuffer tensor holding the op it was fused into


@dataclass(frozen=True)
class JumpRule:
    """When a layer counts as the first jump in error (see ``per_layer.measurement``)."""

    drop_db: float
    floor_db: float


@dataclass(frozen=True)
class LayerParityReport:
    layers: tuple[LayerParity, ...]
    first_jump: LayerParity | None
    worst: LayerParity | None
    unmatched_modules: tuple[UnmatchedModule, ...]
    modules_total: int  # modules that ran and returned a tensor
    tensors_total: int  # op outputs the flatbuffer computes (constants excluded)
    tensors_matched: int  # of those, compared with a module's output
    tensors_internal: int  # named after a module but not its output (e.g. LayerNorm's inner ops)
    unmatched_tensors: tuple[str, ...]  # names that carry no module of the model (first 50)
    tensors_unmatched: int
    samples: int
    jump_drop_db: float = JUMP_DROP_DB
    jump_floor_db: float = JUMP_FLOOR_DB
    min_sqnr_db: float | None = None  # the per-layer gate, if any
    notes: tuple[str, ...] = field(default=())

    JSON_KEYS = (
        "layers", "first_jump", "worst", "modules_total", "modules_matched", "modules_identity",
        "modules_fused", "match_fraction", "unmatched_modules", "tensors_total", "tensors_matched",
        "tensors_internal", "tensors_unmatched", "unmatched_tensors", "samples", "jump_rule",
        "min_sqnr_db", "passed", "notes",
    )

    @property
    def jump_rule(self) -> JumpRule:
        return JumpRule(self.jump_drop_db, self.jump_floor_db)

    @property
    def passed(self) -> bool | None:
        """None when no per-layer gate was given, else whether every compared layer met it."""
        if self.min_sqnr_db is None:
            return None
        return all(r.passed for r in self.layers)

    @property
    def modules_matched(self) -> int:
        return self.modules_total - len(self.unmatched_modules)

    @property
    def modules_fused(self) -> int:
        """Modules whose value only exists inside a later op: not compared, but not lost either."""
        return sum(1 for m in self.unmatched_modules if m.reason == UnmatchedReason.FUSED)

    @property
    def modules_identity(self) -> int:
        return sum(1 for m in self.unmatched_modules if m.reason == UnmatchedReason.IDENTITY)

    @property
    def match_fraction(self) -> float:
        """Matched modules over modules that compute something (identity modules left out)."""
        n = self.modules_total - self.modules_identity
        return self.modules_matched / n if n else 0.0

    def worst_layers(self, n: int = 5) -> tuple[LayerParity, ...]:
        return tuple(sorted(self.layers, key=lambda r: r.sqnr_db)[:n])
