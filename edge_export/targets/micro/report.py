"""The micro target's report section (``micro``): what TFLite Micro can run, the arena it needs,
the op resolver and the firmware bundle written; with its Markdown and terminal renderings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...output.serialize import json_field
from ..registry import ReportSection
from .kernel_types import KernelTypeMismatch

__all__ = ["MicroReport", "MicroSection", "CBundleSection", "MICRO_REPORT_SECTION"]

_INTEGER_IO = ("int8",)  # what TFLM applications feed (TFLM dropped most uint8 kernels)


@dataclass(frozen=True)
class MicroReport:
    ops: tuple[str, ...]  # distinct operators, in first-use order (the resolver needs each once)
    unsupported_ops: tuple[str, ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    fully_integer: bool
    float_tensors: tuple[str, ...]
    arena_estimate_bytes: int  # static estimate from tensor lifetimes
    arena_bytes: int | None = None  # measured by the TFLM host interpreter, when it ran
    # operators whose TFLM kernel has no version for the type they get (kernel_types.py)
    kernel_type_mismatches: tuple[KernelTypeMismatch, ...] = ()

    JSON_KEYS = (
        "ok", "ops", "unsupported_ops", "kernel_type_mismatches", "input_dtypes", "output_dtypes", "integer_io", "fully_integer",
        "float_tensors", "arena_estimate_bytes", "arena_bytes", "problems",
    )

    @property
    def integer_io(self) -> bool:
        return all(d in _INTEGER_IO for d in (*self.input_dtypes, *self.output_dtypes))

    @property
    def problems(self) -> tuple[str, ...]:
        found = []
        if self.unsupported_ops:
            found.append(
                f"TFLite Micro has no kernel for {', '.join(self.unsupported_ops)}; replace the layer(s) "
                "that produce it or write a custom TFLM kernel."
            )
        for m in self.kernel_type_mismatches:
            found.append(
                f"TFLite Micro's {m.opcode} kernel takes {', '.join(m.kernel_types)}, but operator "
                f"#{m.operator_index} ({m.opcode}) gets {m.input_type}."
            )
        if not self.integer_io:
            found.append(
                f"the model's inputs/outputs are {', '.join(sorted(set(self.input_dtypes + self.output_dtypes)))}, "
                "not int8: export with --quantize int8 --io-dtype int8."
            )
        if not self.fully_integer:
            found.append(
                f"{len(self.float_tensors)} tensors inside the graph are float; microcontrollers without an "
                "FPU run them slowly or not at all: use full-integer --quantize int8."
            )
        return tuple(found)

    @property
    def ok(self) -> bool:
        return not self.problems

    def with_arena(self, arena_bytes: int) -> MicroReport:
        from dataclasses import replace

        return replace(self, arena_bytes=arena_bytes)


@dataclass(frozen=True)
class CBundleSection:
    """The firmware bundle written for the micro target (targets/micro/bundle.py)."""

    folder: str
    name: str  # the C identifier prefixing every file and symbol
    files: tuple[str, ...]
    arena_measured_bytes: int  # the host interpreter's figure
    arena_size: int  # <name>_arena_size: measured plus the margin
    test_vectors: int
    tolerance_steps: int


@dataclass(frozen=True)
class MicroSection:
    report: MicroReport = json_field(flatten=True)
    op_resolver: str | None = json_field(default=None, omit_none=True)  # --emit-op-resolver path
    c_bundle: CBundleSection | None = json_field(default=None, omit_none=True)  # --emit-c (absent with --no-emit-c)


def _markdown(micro: MicroSection, target: Any, artifacts: Any) -> list[str]:
    from ...output.text_safety import code_span as _code
    from ...output.text_safety import escape_markdown as _e

    out = ["", f"**TFLite Micro:** tensor arena {_e(micro.report.arena_bytes)} bytes; operators: {_e(', '.join(micro.report.ops))}."]
    if micro.op_resolver:
        out.append(f"Op resolver lines written to {_code(micro.op_resolver)}.")
    if micro.c_bundle is not None:
        b = micro.c_bundle
        out.append(
            f"Firmware bundle in {_code(b.folder)}: {_e(', '.join(b.files))}; {_code(b.name + '_arena_size')} = "
            f"{_e(b.arena_size)} bytes ({_e(b.arena_measured_bytes)} measured plus the margin); "
            f"{_e(b.test_vectors)} test vectors, tolerance {_e(b.tolerance_steps)} step."
        )
    out.append("")
    return out


def _summary(micro: MicroSection, target: Any, report: Any, lines: Any) -> None:
    m = micro.report
    lines.plain(f"  tflite micro: arena {m.arena_bytes} bytes; ops {', '.join(m.ops)}")
    bundle = micro.c_bundle
    if bundle is not None:
        lines.plain(f"  firmware bundle: {bundle.folder}/ ({bundle.name}_*; arena {bundle.arena_size} bytes with margin)")


MICRO_REPORT_SECTION = ReportSection("micro", MicroSection, markdown=_markdown, summary=_summary)
