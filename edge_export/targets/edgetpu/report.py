"""The Edge TPU target's report sections: the predicted mapping (``edgetpu``), the compiler's run
(``compiler``) and the delegate's (``delegate``), with their Markdown and terminal renderings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...output.serialize import json_field
from ..registry import ReportSection
from .mapping import EdgeTPUReport

if TYPE_CHECKING:
    from .compiler import CompilerResult

__all__ = ["CompilerSection", "DelegateSection", "EDGETPU_REPORT_SECTIONS"]


@dataclass(frozen=True)
class CompilerSection:
    """The Edge TPU compiler's run, and where it disagrees with the predicted mapping."""

    result: CompilerResult = json_field(flatten=True)
    disagreements: tuple[str, ...] = ()


@dataclass(frozen=True)
class DelegateSection:
    requested: str
    used: bool
    reason: str


def _markdown(tpu: EdgeTPUReport, target: Any, artifacts: Any) -> list[str]:
    """The mapping table, then the compiler's and the delegate's outcome."""
    from ...output.text_safety import code_span as _code
    from ...output.text_safety import escape_markdown as _e

    out = ["", f"**Edge TPU mapping (predicted):** {_e(tpu.summary())}", "", "| Operator | Count | Status |", "|---|---|---|"]
    for row in tpu.table:
        out.append(f"| {_e(row.operator)} | {_e(row.count)} | {_e(row.status)} |")
    out.append("")
    comp = target.compiler
    if comp is not None and comp.result.compiled:
        out.append(f"Compiled with edgetpu_compiler: {_code(artifacts.get('edgetpu_tflite'))}.")
    else:
        out.append(f"Not compiled: {_e(comp.result.reason if comp is not None else None)}")
    for d in comp.disagreements if comp is not None else ():
        out.append(f"- compiler disagrees with the prediction: {_e(d)}")
    if target.delegate is not None:
        out.append(f"- delegate edgetpu used for parity: {_e(target.delegate.used)} {_e(target.delegate.reason or '')}")
    out.append("")
    return out


def _summary(tpu: EdgeTPUReport, target: Any, report: Any, lines: Any) -> None:
    lines.plain(f"  edge tpu: {tpu.summary()}")
    comp = target.compiler
    if comp is not None and comp.result.compiled:
        lines.plain(f"  edgetpu_compiler: compiled -> {report.artifacts.get('edgetpu_tflite')}")
    else:
        lines.plain(f"  edgetpu_compiler: not compiled: {comp.result.reason if comp else None}")
    for d in comp.disagreements if comp else ():
        lines.plain(f"    disagreement: {d}")


# The compiler's and the delegate's sections are rendered with the mapping they are compared with.
EDGETPU_REPORT_SECTIONS = (
    ReportSection("edgetpu", EdgeTPUReport, markdown=_markdown, summary=_summary),
    ReportSection("compiler", CompilerSection),
    ReportSection("delegate", DelegateSection),
)
