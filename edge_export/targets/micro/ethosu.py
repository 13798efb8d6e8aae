"""The Arm Ethos-U targets: micro's rules plus the NPU compiler, Vela.

``--target ethos-u55-128`` (and every other MAC configuration Vela accepts, ``ETHOS_U_CONFIGS``)
is the micro target (full-integer int8, int8 NHWC I/O, names stripped with their map beside the
model, TFLite Micro support and arena, CMSIS-NN rules, budgets, C bundle) plus one more step: Vela
(``ethos-u-vela``, the optional extra ``ethos-u``) compiles the int8 model into ``<stem>_vela.tflite``,
in which every operator the NPU supports is folded into ``ethos-u`` custom operators and the rest
stay TFLite operators that TFLite Micro runs on the Cortex-M.

Vela runs twice at most, each time as a subprocess with a timeout (a crash is exit 3, as for every
native run; a model Vela rejects is exit 3 with its message):

- in ``check``, on the model with its tensor names, before parity: which operators stay on the
  CPU, each matched to the int8 model's operator by its output tensor's name and blamed on its
  PyTorch module (``provenance``);
- in ``finish``, on the model as written (names stripped): the ``<stem>_vela.tflite`` artifact and
  the figures of Vela's summary CSV (SRAM, flash, cycles, inferences per second), which the C bundle
  embeds and the budgets check. Without --strip-names (``--keep-names``) the first run is reused.

Parity runs on the int8 model in the TFLite Micro host interpreter: the NPU's custom operator has
no host kernel. Vela's NPU arithmetic follows the TFLite reference kernels, but that is Arm's
claim, not something this run checked; the report says so.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ...errors import ConversionError, RuntimeRunError, TargetError
from ...output.serialize import json_field
from ..base import FinishedRun, FinishedTarget, TargetArtifact, TargetCheck, TargetContext, register_target
from ..registry import ReportSection
from .budgets import BUDGETS_REPORT_SECTION
from .cmsis_nn import CMSIS_NN_REPORT_SECTION
from .report import MICRO_REPORT_SECTION
from .target import MicroTarget

if TYPE_CHECKING:
    from ...options import ExportOptions
    from ...flatbuffer import FlatbufferModel

__all__ = [
    "ETHOS_U_CONFIGS",
    "VELA_INSTALL",
    "CpuOperator",
    "EthosUReport",
    "EthosUTarget",
    "VelaSummary",
    "cpu_operators",
    "ram_bytes",
    "run_vela",
    "vela_path",
]

# Vela 5.2's --accelerator-config choices (ethosu.vela.architecture_features.Accelerator; a test
# checks this list against the installed Vela): the NPU generation and its MACs per cycle.
ETHOS_U_CONFIGS = (
    "ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
    "ethos-u65-256", "ethos-u65-512",
    "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048",
)
VELA_INSTALL = 'pip install "edge-export[ethos-u]"'
VELA_TIMEOUT_S = 300.0
_NPU_OP = "CUSTOM:ethos-u"
PARITY_NOTE = (
    "Parity ran on the int8 model in the TFLite Micro host interpreter: the NPU's custom operator "
    "(ethos-u) cannot run on the host, so the Vela-compiled model itself was not run."
)
_VELA_COUNT = re.compile(r"^(CPU|NPU) operators = (\d+)", re.MULTILINE)


def vela_path(tflite_path: Path) -> Path:
    """``<stem>_vela.tflite`` beside the int8 model (the name Vela itself gives its output)."""
    return tflite_path.with_name(f"{tflite_path.stem}_vela.tflite")


@dataclass(frozen=True)
class CpuOperator:
    """An operator of the int8 model that Vela left to the CPU (TFLite Micro on the Cortex-M)."""

    operator_index: int | None  # in the int8 model (None: an operator Vela made itself)
    opcode: str
    tensor: str | None  # its output tensor's name
    module: str | None  # the PyTorch module that name points to

    def describe(self) -> str:
        where = f" #{self.operator_index}" if self.operator_index is not None else ""
        return f"{self.opcode}{where}" + (f" (module {self.module})" if self.module else "")


@dataclass(frozen=True)
class VelaSummary:
    """Vela's own estimate for one inference (its summary CSV), for the system configuration and
    memory mode it used (its defaults from Arm/vela.ini unless configured)."""

    accelerator: str  # Vela's spelling, e.g. Ethos_U55_128
    system_config: str
    memory_mode: str
    clock_hz: int
    sram_bytes: int  # feature maps (and weights cached) in SRAM
    flash_bytes: int  # weights and command stream in (on- and off-chip) flash
    dram_bytes: int  # what the memory mode keeps in DRAM instead (the U65/U85 defaults: the weights)
    cycles: int  # estimated NPU cycles for one inference (operators left on the CPU are not counted)
    inferences_per_second: float
    macs: int


@dataclass(frozen=True)
class EthosUReport:
    """The report's ``target.ethos_u``: where Vela placed the int8 model's operators and what the
    compiled model needs."""

    accelerator: str  # --target, e.g. ethos-u55-128
    vela_version: str
    vela_model: str  # path of <stem>_vela.tflite
    vela_model_bytes: int
    operators: int  # the int8 model's operators
    cpu: tuple[CpuOperator, ...]  # the ones Vela left on the CPU
    npu_subgraphs: int  # ethos-u custom operators in the compiled model
    vela_npu_operators: int | None  # Vela's own counts (its internal operators, after its rewrites)
    vela_cpu_operators: int | None
    summary: VelaSummary
    parity_note: str = PARITY_NOTE
    # The compiled model and the bytes it was compiled from, for ``finish`` (not in the JSON).
    compiled: bytes = json_field(default=b"", skip=True, repr=False, compare=False)
    compiled_from: bytes = json_field(default=b"", skip=True, repr=False, compare=False)

    JSON_KEYS = (
        "accelerator", "vela_version", "vela_model", "vela_model_bytes", "operators", "npu_operators",
        "cpu_operators", "cpu", "npu_subgraphs", "vela_npu_operators", "vela_cpu_operators", "summary", "parity_note",
    )

    @property
    def cpu_operators(self) -> int:
        return len(self.cpu)

    @property
    def npu_operators(self) -> int:
        return self.operators - sum(1 for op in self.cpu if op.operator_index is not None)


@dataclass(frozen=True)
class VelaRun:
    """One compilation: the compiled bytes, Vela's summary and its stdout's operator counts."""

    data: bytes
    summary: VelaSummary
    npu_count: int | None
    cpu_count: int | None


def _vela_version() -> str | None:
    """The installed ethos-u-vela's version, or None when Vela cannot be imported."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    try:
        if importlib.util.find_spec("ethosu.vela") is None:
            return None
        return version("ethos-u-vela")
    except (ImportError, PackageNotFoundError, ValueError):
        return None


def require_vela(target: str) -> str:
    """Vela's version; exit 2 with the install command when it is missing."""
    found = _vela_version()
    if found is None:
        raise TargetError(
            f"--target {target} compiles the model with Arm's Vela compiler (the ethos-u-vela package), "
            "which is not installed in this Python environment.",
            f"Install it with: {VELA_INSTALL}",
        )
    return found


def _csv_summary(path: Path) -> VelaSummary:
    import csv

    with path.open(newline="") as f:
        row = next(csv.DictReader(f))

    def kib(key: str) -> int:  # Vela writes memory in KiB, as floats
        return round(float(row.get(key) or 0) * 1024)

    return VelaSummary(
        accelerator=row["accelerator_configuration"],
        system_config=row["system_config"],
        memory_mode=row["memory_mode"],
        clock_hz=round(float(row["core_clock"])),
        sram_bytes=kib("sram_memory_used"),
        flash_bytes=kib("off_chip_flash_memory_used") + kib("on_chip_flash_memory_used"),
        dram_bytes=kib("dram_memory_used"),
        cycles=round(float(row["cycles_total"])),
        inferences_per_second=float(row["inferences_per_second"]),
        macs=round(float(row["nn_macs"])),
    )


def _vela_message(text: str) -> str:
    """Vela's own error lines (it prints "Error: ..." and the reason), without its warnings."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning")]
    errors = [i for i, ln in enumerate(lines) if "error" in ln.lower()]
    picked = lines[errors[0]: errors[0] + 4] if errors else lines[-4:]
    return " ".join(picked)[:600]


def run_vela(data: bytes, accelerator: str, timeout_s: float = VELA_TIMEOUT_S) -> VelaRun:
    """Compile ``data`` (an int8 .tflite) for ``accelerator`` with Vela in a subprocess, in a
    temporary folder; Vela's default system configuration and memory mode."""
    from ...processes.isolation import NativeCrashError, _signal_name

    with tempfile.TemporaryDirectory(prefix="edge-export-vela-") as tmp:
        folder = Path(tmp)
        source = folder / "model.tflite"
        source.write_bytes(data)
        out = folder / "out"
        cmd = [sys.executable, "-m", "ethosu.vela", str(source), "--accelerator-config", accelerator,
               "--output-dir", str(out), "--show-cpu-operations"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=folder)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeRunError(
                f"Vela did not finish compiling the model for {accelerator} within {timeout_s:.0f} s and was stopped.",
                "Try a smaller model, or report the model to Arm's Vela project.",
            ) from exc
        text = proc.stdout + "\n" + proc.stderr
        if proc.returncode < 0:
            signal_name = _signal_name(-proc.returncode)
            raise NativeCrashError(
                f"Vela crashed ({signal_name}) while compiling the model for {accelerator}.",
                "Run it by hand (python -m ethosu.vela MODEL --accelerator-config ...) on the int8 .tflite to see more, "
                "and report it to Arm's Vela project.",
                stage="Vela compilation", backend="Vela", signal_name=signal_name,
            )
        compiled = out / "model_vela.tflite"
        summaries = sorted(out.glob("model_summary_*.csv"))
        if proc.returncode != 0 or not compiled.is_file() or not summaries:
            raise ConversionError(
                f"Vela could not compile the model for {accelerator} (exit status {proc.returncode}): {_vela_message(text)}",
                "Change the operator Vela names, or try another --target (micro runs it on the CPU alone).",
            )
        counts = {kind: int(n) for kind, n in _VELA_COUNT.findall(proc.stdout)}
        return VelaRun(compiled.read_bytes(), _csv_summary(summaries[0]), counts.get("NPU"), counts.get("CPU"))


def cpu_operators(compiled: FlatbufferModel, named: FlatbufferModel) -> tuple[CpuOperator, ...]:
    """The operators Vela left outside its ``ethos-u`` operators, matched to the int8 model's
    operators by their output tensor's name (Vela keeps the names of the tensors it does not fold)
    and blamed on the PyTorch module that name points to."""
    from ...graph.provenance import flatbuffer_operator_module, module_label, operator_module

    by_output = {}
    for op in named.operators:
        for index in op.outputs:
            name = named.tensors[index].name
            if name:
                by_output.setdefault(name, op)
    found: list[CpuOperator] = []
    for op in compiled.operators:
        if op.opcode == _NPU_OP or not op.outputs:
            continue
        name = compiled.tensors[op.outputs[0]].name
        source = by_output.get(name)
        if source is not None:  # its module as the CMSIS-NN check finds it (output, weights, inputs)
            module = module_label(flatbuffer_operator_module(named, source))
        else:
            module = module_label(operator_module(name, op.opcode)) if name else None
        found.append(CpuOperator(
            source.index if source is not None else None,
            source.opcode if source is not None else op.opcode,
            name or None,
            module,
        ))
    return tuple(found)


def ram_bytes(section: EthosUReport, int8_arena: int) -> int:
    """RAM the compiled model needs: Vela's SRAM figure (the NPU's feature maps, which TFLite Micro
    places in its arena), plus the int8 model's measured arena when operators stay on the CPU (a
    conservative bound for their tensors, which are not measured apart)."""
    return section.summary.sram_bytes + (int8_arena if section.cpu else 0)


def _markdown(ethos: EthosUReport, target: object, artifacts: object) -> list[str]:
    """Vela's placement (NPU or CPU, each CPU operator with its module) and its figures."""
    from ...output.text_safety import code_span as _code
    from ...output.text_safety import escape_markdown as _e

    s = ethos.summary
    out = [
        f"### Ethos-U ({_e(ethos.accelerator)}, Vela {_e(ethos.vela_version)})", "",
        f"{_e(ethos.npu_operators)} of {_e(ethos.operators)} operators on the NPU ({_e(ethos.npu_subgraphs)} ethos-u "
        f"operator(s)), {_e(ethos.cpu_operators)} on the CPU; compiled model {_code(ethos.vela_model)} "
        f"({_e(ethos.vela_model_bytes)} bytes).", "",
        "| SRAM | flash | DRAM | cycles | inferences/s | MACs | system config | memory mode |",
        "|---|---|---|---|---|---|---|---|",
        f"| {_e(s.sram_bytes)} bytes | {_e(s.flash_bytes)} bytes | {_e(s.dram_bytes)} bytes | {_e(s.cycles)} | {_e(f'{s.inferences_per_second:.0f}')} "
        f"| {_e(s.macs)} | {_e(s.system_config)} | {_e(s.memory_mode)} |",
        "",
    ]
    if ethos.cpu:
        out += ["| on the CPU | module | output tensor |", "|---|---|---|"]
        for op in ethos.cpu:
            where = f" #{op.operator_index}" if op.operator_index is not None else ""
            out.append(f"| {_e(op.opcode)}{where} | {_code(op.module) if op.module else ''} | {_code(op.tensor) if op.tensor else ''} |")
        out.append("")
    out += [f"*{_e(ethos.parity_note)}*", ""]
    return out


def _summary(e: EthosUReport, target: object, report: object, lines: object) -> None:
    dram = f"DRAM {e.summary.dram_bytes} bytes, " if e.summary.dram_bytes else ""
    lines.plain(f"  {e.accelerator} (Vela {e.vela_version}): {e.npu_operators} of {e.operators} ops on the NPU, "
                f"{e.cpu_operators} on the CPU; SRAM {e.summary.sram_bytes} bytes, flash {e.summary.flash_bytes} bytes, {dram}"
                f"{e.summary.cycles} cycles ({e.summary.inferences_per_second:.0f} inferences/s) -> {e.vela_model}")
    for op in e.cpu[:10]:
        lines.plain(f"    cpu: {op.describe()}")


ETHOS_U_REPORT_SECTION = ReportSection("ethos_u", EthosUReport, _markdown, _summary)


class EthosUTarget(MicroTarget):
    """``--target ethos-u55-128`` etc.: micro's rules, then Vela; its plugin per configuration."""

    family: ClassVar[str] = "ethos-u"
    report_sections = (MICRO_REPORT_SECTION, ETHOS_U_REPORT_SECTION, BUDGETS_REPORT_SECTION, CMSIS_NN_REPORT_SECTION)
    check_label = "Checking TFLite Micro support and compiling with Vela"

    def __init__(self, accelerator: str) -> None:
        self.name = accelerator

    def implied_options(self, options: ExportOptions) -> tuple[ExportOptions, list[str]]:
        require_vela(self.name)  # before any tracing: a missing compiler is a setup problem (exit 2)
        return super().implied_options(options)

    def output_paths(self, options: ExportOptions, tflite_path: Path) -> list[tuple[str, Path]]:
        return [*super().output_paths(options, tflite_path), ("the Vela-compiled model (named after -o)", vela_path(tflite_path))]

    def check(self, context: TargetContext) -> TargetCheck:
        checked = super().check(context)  # TFLite Micro runs what Vela leaves on the CPU
        compiled = run_vela(context.model.data, self.name)
        report = self._report(compiled, context.model, context.model.data, context.tflite_path)
        # --emit-op-resolver: the operators of the compiled model (ethos-u and what stays on the CPU)
        from ...flatbuffer import read_flatbuffer
        from .kernels import emit_op_resolver

        ops = read_flatbuffer(compiled.data, origin="the Vela-compiled model").op_counts
        artifacts = tuple(
            replace(a, data=emit_op_resolver(ops).encode()) if a.key == "op_resolver" else a for a in checked.artifacts
        )
        micro = checked.report["micro"]
        if micro.c_bundle is not None:
            # The bundle's arena constant must also hold what Vela plans in SRAM (with CPU operators:
            # plus their tensors), whichever is larger than the int8 model's measured arena.
            from .bundle import arena_with_margin

            need = max(micro.c_bundle.arena_measured_bytes, ram_bytes(report, micro.report.arena_bytes))
            micro = replace(micro, c_bundle=replace(micro.c_bundle, arena_size=arena_with_margin(need)))
        return replace(checked, report={**checked.report, "micro": micro, "ethos_u": report}, artifacts=artifacts)

    def _report(self, compiled: VelaRun, named: FlatbufferModel, source: bytes, tflite_path: Path) -> EthosUReport:
        from ...flatbuffer import read_flatbuffer

        model = read_flatbuffer(compiled.data, origin="the Vela-compiled model")
        return EthosUReport(
            accelerator=self.name,
            vela_version=_vela_version() or "unknown",
            vela_model=str(vela_path(tflite_path)),
            vela_model_bytes=len(compiled.data),
            operators=len(named.operators),
            cpu=cpu_operators(model, named),
            npu_subgraphs=model.op_counts.get(_NPU_OP, 0),
            vela_npu_operators=compiled.npu_count,
            vela_cpu_operators=compiled.cpu_count,
            summary=compiled.summary,
            compiled=compiled.data,
            compiled_from=source,
        )

    def finish(self, run: FinishedRun) -> FinishedTarget:
        """Vela on the model as written: the ``<stem>_vela.tflite`` artifact and its figures (the
        CPU operators stay those found on the named model), budgets on them, and the C bundle
        embedding the compiled model."""
        named: EthosUReport = run.checked.report["ethos_u"]
        section = named
        if named.compiled_from != run.model.data:  # names stripped: compile what is written
            compiled = run_vela(run.model.data, self.name)
            written = self._report(compiled, run.named_model, run.model.data, run.tflite_path)
            section = replace(written, cpu=named.cpu, operators=named.operators)
        # micro's finish (tensor-name map, budgets, bundle) reads this run's section
        run = replace(run, checked=replace(run.checked, report={**run.checked.report, "ethos_u": section}))
        finished = super().finish(run)
        artifact = TargetArtifact("vela_tflite", vela_path(run.tflite_path), section.compiled)
        return FinishedTarget({**finished.report, "ethos_u": section}, (*finished.artifacts, artifact))

    def _bundle_model(self, run: FinishedRun) -> tuple[bytes, str, tuple[str, ...]]:
        """Firmware with an Ethos-U runs the Vela-compiled model: its bytes and operators (the
        ethos-u custom operator and what stays on the CPU)."""
        from ...flatbuffer import read_flatbuffer

        section: EthosUReport = run.checked.report["ethos_u"]
        model = read_flatbuffer(section.compiled, origin="the Vela-compiled model")
        return section.compiled, Path(section.vela_model).name, tuple(model.op_counts)

    def _budgets(self, run: FinishedRun):
        """Flash: the Vela-compiled .tflite (its weights and command stream plus the CPU
        operators' constants). RAM: Vela's SRAM figure (the NPU's feature maps, which TFLite Micro
        places in its tensor arena), plus, when operators stay on the CPU, the arena TFLite Micro
        measured for the int8 model: a conservative bound for the CPU operators' tensors."""
        from .budgets import check_budgets, largest_activations, largest_constants

        section: EthosUReport = run.checked.report["ethos_u"]
        micro = run.checked.report.get("micro")
        ram = ram_bytes(section, micro.report.arena_bytes if micro is not None else 0)
        measured = "Vela's SRAM estimate" + (" plus the int8 model's TFLite Micro arena (operators stay on the CPU)" if section.cpu else "")
        return check_budgets(
            flash_bytes=len(section.compiled),
            ram_bytes=ram,
            max_flash=run.options.target_options.max_flash,
            max_ram=run.options.target_options.max_ram,
            flash_consumers=largest_constants(run.named_model),
            ram_consumers=largest_activations(run.named_model),
            flash_measured="Vela-compiled model (<stem>_vela.tflite)",
            ram_measured=measured,
            ram_note="The largest weights and activations of the int8 model: Vela compresses weights and plans "
                     "feature maps itself, so these show what to shrink, not an exact breakdown.",
        )


for _config in ETHOS_U_CONFIGS:
    register_target(EthosUTarget(_config))
