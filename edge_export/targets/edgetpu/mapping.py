"""The Edge TPU mapping as the compiler reports it: each operator's status in the compiler's own
vocabulary (``OpStatus``, the status strings of its operation table), the cut, and the operation
table (``EdgeTPUReport``), so that a prediction (``checks.py``) and a real compile (``compiler.py``)
compare line by line."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ...graph.provenance import describe_location
from ...output.serialize import json_field

__all__ = ["OpStatus", "OpMapping", "TableRow", "UnmappedOp", "EdgeTPUReport"]


class OpStatus(str, enum.Enum):
    """The compiler's status strings (the third column of its operation table)."""

    MAPPED = "Mapped to Edge TPU"
    NOT_SUPPORTED = "Operation not supported"
    UNSUPPORTED_DTYPE = "Operation is working on an unsupported data type"
    UNSUPPORTED_RANK = "Tensor has unsupported rank (up to 3 innermost dimensions mapped)"
    UNSPECIFIED = "Operation is otherwise supported, but not mapped due to some unspecified limitation"
    AFTER_CUT = "More than one subgraph is not supported"


@dataclass(frozen=True)
class OpMapping:
    """One operator: what the checker found on its own, and where the partition puts it."""

    index: int
    opcode: str
    status: OpStatus
    reason: str
    on_tpu: bool
    # True when the operator itself meets every rule (it may still run on the CPU after the cut).
    supported: bool
    input_names: tuple[str, ...] = json_field(skip=True, default=())
    output_names: tuple[str, ...] = json_field(skip=True, default=())
    module_path: str | None = None
    # unsupported: the aten call and the user's line it came from (operator_origins)
    aten: str | None = json_field(default=None, omit_none=True)
    source: str | None = json_field(default=None, omit_none=True)


@dataclass(frozen=True)
class TableRow:
    operator: str
    count: int
    status: str


@dataclass(frozen=True)
class UnmappedOp:
    """The operator where the compiler cuts the graph, and where it came from in PyTorch."""

    index: int
    opcode: str
    status: OpStatus
    reason: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    module_path: str | None
    module_type: str | None
    source: str | None  # "file.py:LINE" of the call, else of the module's class, when the PyTorch module was given
    ops_before: int  # operators that precede it (the share the TPU gets)
    aten: str | None = json_field(default=None, omit_none=True)  # "aten.gelu", when the graph shows it

    def describe(self) -> str:
        made = f" (from {self.aten})" if self.aten else ""
        where = describe_location(self.module_path, self.module_type, self.source)
        return f"operator #{self.index} {self.opcode}{made}{where}: {self.reason}"


@dataclass(frozen=True)
class EdgeTPUReport:
    ops: tuple[OpMapping, ...]
    model_problems: tuple[str, ...] = ()  # reasons the compiler would refuse the whole model
    first_unmapped: UnmappedOp | None = None
    table: tuple[TableRow, ...] = field(default=())

    JSON_KEYS = (
        "num_ops", "num_on_tpu", "num_on_cpu", "share_on_tpu", "num_segments", "fully_mapped",
        "model_problems", "first_unmapped", "table", "ops", "summary",
    )

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def num_on_tpu(self) -> int:
        return sum(op.on_tpu for op in self.ops)

    @property
    def num_on_cpu(self) -> int:
        return self.num_ops - self.num_on_tpu

    @property
    def share_on_tpu(self) -> float:
        return self.num_on_tpu / self.num_ops if self.ops else 0.0

    @property
    def num_segments(self) -> int:
        """Edge TPU segments: the compiler makes at most one (without -a)."""
        return 1 if self.num_on_tpu else 0

    @property
    def fully_mapped(self) -> bool:
        """Every operator on the TPU, apart from the float I/O QUANTIZE/DEQUANTIZE at the edges."""
        return not self.model_problems and self.first_unmapped is None and self.num_on_tpu > 0

    def summary(self) -> str:
        text = (
            f"{self.num_on_tpu} of {self.num_ops} operations predicted on the Edge TPU "
            f"({100 * self.share_on_tpu:.0f}%), {self.num_segments} TPU segment(s)"
        )
        if self.model_problems:
            text += "; the compiler would refuse the model: " + "; ".join(self.model_problems)
        elif self.first_unmapped is not None:
            text += "; the graph is cut at " + self.first_unmapped.describe()
        return text + "."

    def format_table(self) -> str:
        width = max([len("Operator")] + [len(r.operator) for r in self.table])
        lines = [f"{'Operator':<{width}}  {'Count':>5}  Status"]
        lines += [f"{r.operator:<{width}}  {r.count:>5}  {r.status}" for r in self.table]
        return "\n".join(lines)
