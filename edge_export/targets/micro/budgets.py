"""Flash and RAM budgets (``--max-flash``, ``--max-ram``): the sizes a firmware has room for, checked
in CI instead of at link time or on the device.

``check_budgets`` is target-neutral: it compares the bytes a target reports (the micro target: the
written ``.tflite`` for flash and the tensor arena TFLite Micro measured for RAM; an Ethos-U target:
Vela's figures) with the budgets and keeps the largest consumers, so that the message on a failed
budget says what to shrink. ``largest_constants`` and ``largest_activations`` find those consumers
in a flatbuffer, each with the PyTorch module its name points to (``provenance.tensor_module``).

An exceeded budget fails the run's verdict (exit 1, artifacts kept, like a parity failure): see
``TargetSection.failed_budgets`` in ``reports/model.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ...errors import UsageError
from ..registry import ReportSection

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel

__all__ = [
    "BudgetCheck",
    "BudgetsSection",
    "SizeConsumer",
    "check_budgets",
    "largest_activations",
    "largest_constants",
    "parse_size",
]

# Binary units (KiB) are what linker scripts and datasheets size memories in; decimal units (kB, MB)
# are accepted too, as written. "K"/"M" alone are binary, as in a linker script's LENGTH = 256K.
_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_LARGEST = 5  # consumers named per budget


def parse_size(value: int | str, option: str) -> int:
    """Bytes from ``300000``, ``256KiB``, ``1MiB``, ``1.5MB``, ``256K``; UsageError (exit 2) otherwise."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        size: float = value
    else:
        match = _SIZE.match(str(value))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise UsageError(
                f"{option} {value!r} is not a size.",
                f"Write a number of bytes with an optional unit (B, KiB, MiB, GiB, kB, MB, GB), e.g. {option} 256KiB or {option} 300000.",
            )
        size = float(match.group(1)) * _UNITS[unit]
    if size < 1:
        raise UsageError(f"{option} {value!r} must be at least one byte.", f"Write e.g. {option} 256KiB.")
    return int(size)


_NAMES = {"flash": "flash", "ram": "RAM"}


def _kib(n: int) -> str:
    return f"{n} bytes ({n / 1024:.1f} KiB)"


@dataclass(frozen=True)
class SizeConsumer:
    """One tensor that takes flash (a constant) or arena RAM (an activation)."""

    tensor_index: int
    tensor: str  # its name in the flatbuffer ("" when names were stripped before the check)
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    module: str | None  # the PyTorch module its name points to (None: the name names none)
    operators: tuple[str, ...]  # the operators that read or write it, "CONV_2D #3"

    def describe(self) -> str:
        where = f"module {self.module}" if self.module else f"tensor {self.tensor or self.tensor_index}"
        shape = "x".join(map(str, self.shape)) or "scalar"
        ops = f", {', '.join(self.operators[:3])}" if self.operators else ""
        return f"{where} ({self.dtype} {shape}{ops}): {self.bytes} bytes"


@dataclass(frozen=True)
class BudgetCheck:
    """One resource against its budget; ``budget_bytes`` None when no budget was given."""

    resource: str  # "flash" or "ram"
    measured: str  # what ``used_bytes`` counts
    used_bytes: int
    budget_bytes: int | None
    largest: tuple[SizeConsumer, ...]  # the biggest consumers, largest first
    note: str | None = None

    JSON_KEYS = ("resource", "measured", "used_bytes", "budget_bytes", "margin_bytes", "exceeded", "largest", "note")

    @property
    def margin_bytes(self) -> int | None:
        """Budget minus use: negative when exceeded."""
        return None if self.budget_bytes is None else self.budget_bytes - self.used_bytes

    @property
    def exceeded(self) -> bool:
        return self.budget_bytes is not None and self.used_bytes > self.budget_bytes

    def summary(self) -> str:
        """One line: use, budget and margin."""
        name = _NAMES.get(self.resource, self.resource)
        if self.budget_bytes is None:
            return f"{name} {_kib(self.used_bytes)}, no budget"
        state = f"EXCEEDED by {-self.margin_bytes} bytes" if self.exceeded else f"margin {self.margin_bytes} bytes"
        return f"{name} {_kib(self.used_bytes)} of {_kib(self.budget_bytes)}: {state}"

    def message(self) -> str:
        """What the user reads when the budget is exceeded: the figures and what to shrink."""
        kind = {"flash": "largest constant tensors", "ram": "largest activation tensors"}.get(self.resource, "largest consumers")
        text = f"The {self.measured} is {_kib(self.used_bytes)}, over the {_NAMES.get(self.resource, self.resource)} budget of {_kib(self.budget_bytes)} by {-self.margin_bytes} bytes."
        if self.largest:
            text += f" The {kind}: " + "; ".join(c.describe() for c in self.largest) + "."
        if self.note:
            text += f" {self.note}"
        return text


@dataclass(frozen=True)
class BudgetsSection:
    """The report's ``target.budgets``: flash and RAM against ``--max-flash`` / ``--max-ram``."""

    flash: BudgetCheck | None
    ram: BudgetCheck | None

    JSON_KEYS = ("flash", "ram", "exceeded")

    @property
    def exceeded(self) -> tuple[str, ...]:
        """The resources over budget ("flash", "ram"): the run's verdict is failed when any."""
        return tuple(c.resource for c in (self.flash, self.ram) if c is not None and c.exceeded)

    @property
    def checks(self) -> tuple[BudgetCheck, ...]:
        return tuple(c for c in (self.flash, self.ram) if c is not None)


def check_budgets(
    *,
    flash_bytes: int | None,
    ram_bytes: int | None,
    max_flash: int | None,
    max_ram: int | None,
    flash_consumers: tuple[SizeConsumer, ...] = (),
    ram_consumers: tuple[SizeConsumer, ...] = (),
    flash_measured: str = "model (.tflite)",
    ram_measured: str = "tensor arena",
    ram_note: str | None = None,
) -> BudgetsSection:
    """Compare what a target measured with the budgets. Any target can call it with its own figures
    (None: the target has no such figure; a budget on it is then not checked)."""
    flash = None if flash_bytes is None else BudgetCheck("flash", flash_measured, flash_bytes, max_flash, flash_consumers[:_LARGEST])
    ram = None if ram_bytes is None else BudgetCheck("ram", ram_measured, ram_bytes, max_ram, ram_consumers[:_LARGEST], ram_note)
    return BudgetsSection(flash, ram)


# ---- the consumers in a flatbuffer --------------------------------------------------------------


def _tensor_bytes(model: FlatbufferModel, index: int) -> int:
    """Bytes of a tensor's data as stored (constants) or allocated (activations), unpadded."""
    from ...flatbuffer import DTYPE_BITS as _DTYPE_BITS

    t = model.tensors[index]
    count = 1
    for d in t.shape:
        count *= max(int(d), 1)
    return -(-count * _DTYPE_BITS.get(t.dtype, 32) // 8)


def _operators_using(model: FlatbufferModel) -> dict[int, list[str]]:
    using: dict[int, list[str]] = {}
    for op in model.operators:
        for i in (*op.outputs, *op.inputs):
            if i >= 0 and f"{op.opcode} #{op.index}" not in using.setdefault(i, []):
                using[i].append(f"{op.opcode} #{op.index}")
    return using


def _first_opcode(users: Sequence[str]) -> str | None:
    """The opcode of the first "OPCODE #index" in ``users``."""
    return users[0].split(" #", 1)[0] if users else None


def _tensor_module(model: FlatbufferModel, index: int, using: dict[int, list[str]]) -> str | None:
    """The module of one tensor (a consumer of flash or RAM, not an operator): its own name, read for
    the opcode of its first user, so that a fused conv's weights go to the conv rather than to the
    ReLU the name also names."""
    from ...graph.provenance import module_label, operator_module

    return module_label(operator_module(model.tensors[index].name, _first_opcode(using.get(index, ()))))


def _largest(model: FlatbufferModel, constant: bool, limit: int) -> tuple[SizeConsumer, ...]:
    using = _operators_using(model)
    indices = [t.index for t in model.tensors if t.is_constant == constant and (constant or t.index in using)]
    indices.sort(key=lambda i: (-_tensor_bytes(model, i), i))
    return tuple(
        SizeConsumer(
            i, model.tensors[i].name, tuple(model.tensors[i].shape), model.tensors[i].dtype,
            _tensor_bytes(model, i), _tensor_module(model, i, using), tuple(using.get(i, ())),
        )
        for i in indices[:limit]
    )


def largest_constants(model: FlatbufferModel, limit: int = _LARGEST) -> tuple[SizeConsumer, ...]:
    """The constant tensors (weights, biases) that take the most flash, largest first."""
    return _largest(model, True, limit)


def largest_activations(model: FlatbufferModel, limit: int = _LARGEST) -> tuple[SizeConsumer, ...]:
    """The activation tensors (inputs, outputs and intermediates of the main subgraph) that take
    the most arena RAM, largest first, with the operators that write and read them."""
    return _largest(model, False, limit)


def _markdown(budgets: BudgetsSection, target: object, artifacts: object) -> list[str]:
    """Flash and RAM against --max-flash/--max-ram, and the largest consumers of an exceeded one."""
    from ...output.text_safety import escape_markdown as _e

    out = ["### Flash and RAM budgets", "", "| resource | measured | bytes | budget | margin |", "|---|---|---|---|---|"]
    for c in budgets.checks:
        state = "" if c.budget_bytes is None else (" **exceeded**" if c.exceeded else "")
        out.append(f"| {c.resource} | {_e(c.measured)} | {c.used_bytes} | {_e(c.budget_bytes)} | {_e(c.margin_bytes)}{state} |")
    out.append("")
    for c in budgets.checks:
        if c.exceeded:
            out.append(f"- {_e(c.message())}")
    if budgets.exceeded:
        out.append("")
    return out


def _summary(budgets: BudgetsSection, target: object, report: object, lines: object) -> None:
    lines.plain("  budgets: " + "; ".join(c.summary() for c in budgets.checks))
    for c in budgets.checks:
        if c.exceeded:
            lines.alert("budget exceeded", c.message())


def _junit(budgets: BudgetsSection) -> list[tuple]:
    """A case per budget given, so CI shows which one failed."""
    return [("edge_export.budgets", c.resource, c.message() if c.exceeded else None, c.summary(), None)
            for c in budgets.checks if c.budget_bytes is not None]


# Any exceeded budget fails the verdict (exit 1): the failure is the exceeded resources ("flash", "ram").
BUDGETS_REPORT_SECTION = ReportSection("budgets", BudgetsSection, _markdown, _summary, _junit, failed=lambda budgets: budgets.exceeded)
