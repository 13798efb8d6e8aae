"""The ``gpu`` report section: the prediction per operator, its partitions, the first operator left
on the CPU with its PyTorch origin, the analyzer cross-check; and its Markdown and terminal lines."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ...output.serialize import json_field
from ..registry import ReportSection

__all__ = ["GpuOp", "GpuUnsupportedOp", "AnalyzerCrossCheck", "GpuReport", "GPU_REPORT_SECTION"]


@dataclass(frozen=True)
class GpuOp:
    index: int
    opcode: str
    version: int
    supported: bool
    reason: str
    partition: int | None  # 0-based delegated partition it falls in; None: runs on the CPU
    macs: int
    module_path: str | None = None
    # left on the CPU: the aten call and the user's line it came from (operator_origins)
    aten: str | None = json_field(default=None, omit_none=True)
    source: str | None = json_field(default=None, omit_none=True)


@dataclass(frozen=True)
class GpuUnsupportedOp:
    """The first operator the delegate leaves on the CPU, and where it came from in PyTorch."""

    index: int
    opcode: str
    reason: str
    module_path: str | None
    module_type: str | None
    source: str | None  # "file.py:LINE" of the call, else of the module, when the PyTorch module was given
    ops_before: int
    aten: str | None = json_field(default=None, omit_none=True)  # "aten.reflection_pad1d", when the graph shows it

    def describe(self) -> str:
        from ...graph.provenance import describe_location

        made = f" (from {self.aten})" if self.aten else ""
        where = describe_location(self.module_path, self.module_type, self.source)
        return f"operator #{self.index} {self.opcode}{made}{where}: {self.reason}"


@dataclass(frozen=True)
class AnalyzerCrossCheck:
    """ai-edge-litert's private GPU compatibility analyzer, run beside the prediction."""

    available: bool
    verdict: str | None  # "compatible", "incompatible", or None when it could not run
    flagged_ops: tuple[int, ...] = ()  # operator indices it warned about
    note: str = ""  # why it could not run, or what it printed instead of a verdict


@dataclass(frozen=True)
class GpuReport:
    ops: tuple[GpuOp, ...]
    first_unsupported: GpuUnsupportedOp | None
    analyzer: AnalyzerCrossCheck | None = None
    disagreements: tuple[str, ...] = ()
    model_problems: tuple[str, ...] = ()

    JSON_KEYS = (
        "num_ops", "num_on_gpu", "share_ops_on_gpu", "total_macs", "macs_on_gpu", "share_macs_on_gpu",
        "num_partitions", "largest_partition_ops", "fully_delegated", "model_problems", "first_unsupported", "unsupported_ops",
        "analyzer", "disagreements", "ops", "summary",
    )

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def num_on_gpu(self) -> int:
        return sum(op.partition is not None for op in self.ops)

    @property
    def share_ops_on_gpu(self) -> float:
        return self.num_on_gpu / self.num_ops if self.ops else 0.0

    @property
    def total_macs(self) -> int:
        return sum(op.macs for op in self.ops)

    @property
    def macs_on_gpu(self) -> int:
        return sum(op.macs for op in self.ops if op.partition is not None)

    @property
    def share_macs_on_gpu(self) -> float:
        return self.macs_on_gpu / self.total_macs if self.total_macs else 0.0

    @property
    def num_partitions(self) -> int:
        return len({op.partition for op in self.ops if op.partition is not None})

    @property
    def largest_partition_ops(self) -> int:
        """Operators of the largest partition: what the delegate runs with its default options."""
        sizes = Counter(op.partition for op in self.ops if op.partition is not None)
        return max(sizes.values(), default=0)

    @property
    def fully_delegated(self) -> bool:
        return not self.model_problems and self.first_unsupported is None and self.num_on_gpu > 0

    def unsupported_ops(self) -> dict[str, int]:
        """Operator -> how many of it stay on the CPU."""
        return dict(Counter(op.opcode for op in self.ops if not op.supported))

    def summary(self) -> str:
        text = (
            f"{self.num_on_gpu} of {self.num_ops} operations predicted on the GPU delegate "
            f"({100 * self.share_ops_on_gpu:.0f}% of operations, {100 * self.share_macs_on_gpu:.0f}% of "
            f"{self.total_macs} MACs), {self.num_partitions} GPU partition(s)"
        )
        if self.num_partitions > 1:
            text += f" (with the delegate's default of one partition, only the largest, {self.largest_partition_ops} operations, runs on the GPU)"
        if self.model_problems:
            text += "; " + "; ".join(self.model_problems)
        elif self.first_unsupported is not None:
            text += "; the first operator left on the CPU is " + self.first_unsupported.describe()
        return text + "."



def _markdown(gpu: GpuReport, target: object, artifacts: object) -> list[str]:
    from ...output.text_safety import escape_markdown as _e

    out = ["", f"**GPU delegate (predicted):** {_e(gpu.summary())}", ""]
    for opcode, count in gpu.unsupported_ops().items():
        out.append(f"- left on the CPU: {_e(opcode)} × {_e(count)}")
    analyzer = gpu.analyzer
    if analyzer is not None:
        verdict = analyzer.verdict if analyzer.available else f"not run ({analyzer.note})"
        out.append(f"- ai-edge-litert's GPU analyzer: {_e(verdict)}")
    for d in gpu.disagreements:
        out.append(f"- analyzer disagrees with the prediction: {_e(d)}")
    out.append("")
    return out


def _summary(gpu: GpuReport, target: object, report: object, lines: object) -> None:
    lines.plain(f"  gpu delegate: {gpu.summary()}")
    analyzer = gpu.analyzer
    if analyzer is not None:
        lines.plain(f"  gpu analyzer: {analyzer.verdict if analyzer.available else 'not run: ' + analyzer.note}")
    for d in gpu.disagreements:
        lines.plain(f"    disagreement: {d}")


GPU_REPORT_SECTION = ReportSection("gpu", GpuReport, _markdown, _summary)
