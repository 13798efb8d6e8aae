"""Find, run and read Coral's ``edgetpu_compiler``; load the Edge TPU delegate (libedgetpu).

The compiler is an external x86-64 binary that is often absent: every entry point here returns a
``CompilerResult`` that says "not compiled" and why rather than failing the export; the pipeline
decides (``--require-compiler``) whether that is an error. When it runs, it runs with a timeout, its
exit status is checked, and its stdout and ``<name>_edgetpu.log`` are parsed into numbers and the
operation table, which ``compare_with_prediction`` holds against the checker's prediction.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...errors import ConversionError, TargetError, first_line
from .mapping import EdgeTPUReport, OpStatus, TableRow

__all__ = [
    "COMPILER_NAME",
    "EDGETPU_DELEGATE_LIBRARY",
    "CompilerOutput",
    "CompilerResult",
    "find_compiler",
    "run_compiler",
    "compile_for_edgetpu",
    "parse_compiler_output",
    "parse_operation_log",
    "compare_with_prediction",
    "require_compiled",
    "reattach_metadata",
    "load_edgetpu_delegate",
]

COMPILER_NAME = "edgetpu_compiler"
EDGETPU_DELEGATE_LIBRARY = "libedgetpu.so.1"
_OUTPUT_TAIL = 4000  # characters of compiler output kept for the report


@dataclass(frozen=True)
class CompilerOutput:
    """What the compiler's stdout (or its operation log) says. Missing facts stay None."""

    version: str | None = None
    compile_time_ms: int | None = None
    input_model: str | None = None
    output_model: str | None = None
    input_size_bytes: int | None = None
    output_size_bytes: int | None = None
    on_chip_used_bytes: int | None = None
    on_chip_remaining_bytes: int | None = None
    off_chip_used_bytes: int | None = None
    num_subgraphs: int | None = None
    total_ops: int | None = None
    ops_on_tpu: int | None = None
    ops_on_cpu: int | None = None
    log_path: str | None = None
    table: tuple[TableRow, ...] = ()
    errors: tuple[str, ...] = ()  # lines the compiler prints on failure


@dataclass(frozen=True)
class CompilerResult:
    compiled: bool
    reason: str  # why not compiled ("" when compiled)
    compiler: str | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    compiled_model: str | None = None  # path of <name>_edgetpu.tflite
    output: CompilerOutput = field(default_factory=CompilerOutput)
    stdout_tail: str = ""
    stderr_tail: str = ""

    @property
    def ops_on_tpu(self) -> int | None:
        return self.output.ops_on_tpu

    @property
    def ops_on_cpu(self) -> int | None:
        return self.output.ops_on_cpu


# ---- parsing ------------------------------------------------------------------------------------

_UNITS = {"B": 1, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "KB": 1000, "MB": 1000**2, "GB": 1000**3}
_SIZE = r"([0-9.]+\s*[KMG]?i?B)"
_PATTERNS = {
    "version": re.compile(r"Edge TPU Compiler version\s+(\S+)"),
    "compile_time_ms": re.compile(r"Model compiled successfully in\s+(\d+)\s*ms"),
    "input_model": re.compile(r"^Input(?: model)?:\s+(.+?)\s*$", re.M),
    "output_model": re.compile(r"^Output(?: model)?:\s+(.+?)\s*$", re.M),
    "input_size_bytes": re.compile(r"^Input size:\s+" + _SIZE, re.M),
    "output_size_bytes": re.compile(r"^Output size:\s+" + _SIZE, re.M),
    "on_chip_used_bytes": re.compile(r"On-chip memory used for caching model parameters:\s+" + _SIZE),
    "on_chip_remaining_bytes": re.compile(r"On-chip memory remaining for caching model parameters:\s+" + _SIZE),
    "off_chip_used_bytes": re.compile(r"Off-chip memory used for streaming uncached model parameters:\s+" + _SIZE),
    "num_subgraphs": re.compile(r"Number of Edge TPU subgraphs:\s+(\d+)"),
    "total_ops": re.compile(r"Total number of operations:\s+(\d+)"),
    "ops_on_tpu": re.compile(r"Number of operations that will run on Edge TPU:\s+(\d+)"),
    "ops_on_cpu": re.compile(r"Number of operations that will run on CPU:\s+(\d+)"),
    "log_path": re.compile(r"^Operation log:\s+(.+?)\s*$", re.M),
}
_SIZE_FIELDS = {k for k in _PATTERNS if k.endswith("_bytes")}
_INT_FIELDS = {"compile_time_ms", "num_subgraphs", "total_ops", "ops_on_tpu", "ops_on_cpu"}
_TABLE_HEADER = re.compile(r"^\s*Operator\s+Count\s+Status\s*$")
_TABLE_ROW = re.compile(r"^\s*([A-Z][A-Z0-9_]*(?::\S+)?)\s+(\d+)\s+(\S.*?)\s*$")
_ERROR_LINES = re.compile(
    r"(ERROR:.*|.*Internal compiler error.*|.*Model not quantized.*|.*static-sized tensors.*|"
    r".*[Ll]arge activation tensors.*|.*Compilation failed.*|.*unsupported.*version.*)"
)


def _size_to_bytes(text: str) -> int | None:
    m = re.fullmatch(r"([0-9.]+)\s*([KMG]?i?B)", text.strip(), re.I)
    if not m:
        return None
    unit = _UNITS.get(m.group(2).upper())
    return int(round(float(m.group(1)) * unit)) if unit else None


def _parse_table(text: str) -> tuple[TableRow, ...]:
    rows: list[TableRow] = []
    in_table = False
    for line in text.splitlines():
        if _TABLE_HEADER.match(line):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.strip():
            continue  # a blank line follows the header
        m = _TABLE_ROW.match(line)
        if not m:
            in_table = False  # the table ended (e.g. "Compilation child process completed ...")
            continue
        rows.append(TableRow(operator=m.group(1), count=int(m.group(2)), status=m.group(3)))
    return tuple(rows)


def parse_compiler_output(text: str) -> CompilerOutput:
    """Parse the compiler's stdout (also accepts the operation log's text)."""
    values: dict[str, Any] = {}
    for name, pattern in _PATTERNS.items():
        m = pattern.search(text)
        if not m:
            continue
        raw = m.group(1)
        if name in _SIZE_FIELDS:
            values[name] = _size_to_bytes(raw)
        elif name in _INT_FIELDS:
            values[name] = int(raw)
        else:
            values[name] = raw
    table = _parse_table(text)
    # With every op mapped the compiler prints no TPU/CPU split; the table (or the total) gives it.
    if values.get("ops_on_tpu") is None and table:
        values["ops_on_tpu"] = sum(r.count for r in table if r.status == OpStatus.MAPPED.value)
        values["ops_on_cpu"] = sum(r.count for r in table if r.status != OpStatus.MAPPED.value)
    elif values.get("ops_on_tpu") is None and values.get("total_ops") is not None and values.get("num_subgraphs"):
        values["ops_on_tpu"], values["ops_on_cpu"] = values["total_ops"], 0
    errors = tuple(dict.fromkeys(m.group(0).strip() for m in _ERROR_LINES.finditer(text)))
    return CompilerOutput(table=table, errors=errors, **values)


def parse_operation_log(text: str) -> CompilerOutput:
    """Parse ``<name>_edgetpu.log``: version, input/output paths and the operation table."""
    return parse_compiler_output(text)


def _merge(stdout: CompilerOutput, log: CompilerOutput | None) -> CompilerOutput:
    if log is None:
        return stdout
    # The log's table lists every operator (stdout shows it only with -s or when ops fall back).
    table = log.table or stdout.table
    merged = replace(stdout, table=table)
    if stdout.ops_on_tpu is None and table:
        merged = replace(
            merged,
            ops_on_tpu=sum(r.count for r in table if r.status == OpStatus.MAPPED.value),
            ops_on_cpu=sum(r.count for r in table if r.status != OpStatus.MAPPED.value),
        )
    return merged


# ---- finding and running ------------------------------------------------------------------------


def find_compiler(explicit_path: str | None = None) -> str | None:
    """The compiler to use: ``explicit_path`` (must be an executable file) or ``edgetpu_compiler`` on
    PATH; None when there is none on PATH. An explicit path that does not work is a TargetError."""
    if explicit_path:
        p = Path(explicit_path).expanduser()
        if p.is_dir():
            p = p / COMPILER_NAME
        if not p.is_file() or not os.access(p, os.X_OK):
            raise TargetError(
                f"--edgetpu-compiler {explicit_path} is not an executable file.",
                "Give the path of the edgetpu_compiler binary (from Coral's apt repository), or drop "
                "the option to look it up on PATH.",
            )
        return str(p)
    return shutil.which(COMPILER_NAME)


def _tail(text: str) -> str:
    return text[-_OUTPUT_TAIL:]


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data


def run_compiler(
    tflite_path: str | Path, out_dir: str | Path, compiler: str, timeout_s: float = 180.0
) -> CompilerResult:
    """Run ``compiler -s -o out_dir -t timeout tflite_path`` and read its stdout and operation log."""
    src = Path(tflite_path)
    if not src.is_file():
        raise TargetError(f"Cannot compile {src}: no such file.", "Write the .tflite model first.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # The compiler's own -t timer covers compilation only; our timeout also covers a hung process.
    cmd = [compiler, "-s", "-o", str(out), "-t", str(max(1, int(timeout_s))), str(src)]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s + 5.0, check=False)
    except subprocess.TimeoutExpired as exc:
        return CompilerResult(
            compiled=False,
            reason=f"{COMPILER_NAME} did not finish within {timeout_s:.0f} s and was stopped.",
            compiler=compiler,
            elapsed_s=time.monotonic() - start,
            stdout_tail=_tail(_decode(exc.stdout)),
            stderr_tail=_tail(_decode(exc.stderr)),
        )
    except OSError as exc:
        return CompilerResult(
            compiled=False,
            reason=f"{COMPILER_NAME} at {compiler} could not be started: {exc.strerror or exc}.",
            compiler=compiler,
        )
    elapsed = time.monotonic() - start
    stdout, stderr = _decode(proc.stdout), _decode(proc.stderr)
    parsed = parse_compiler_output(stdout + "\n" + stderr)
    compiled_path = out / f"{src.stem}_edgetpu.tflite"
    log_path = out / f"{src.stem}_edgetpu.log"
    log = parse_operation_log(log_path.read_text(errors="replace")) if log_path.is_file() else None
    merged = _merge(parsed, log)
    if log_path.is_file():
        merged = replace(merged, log_path=str(log_path))
    common = dict(
        compiler=compiler,
        exit_code=proc.returncode,
        elapsed_s=elapsed,
        output=merged,
        stdout_tail=_tail(stdout),
        stderr_tail=_tail(stderr),
    )
    if proc.returncode != 0:
        detail = "; ".join(merged.errors) or (stderr.strip().splitlines() or stdout.strip().splitlines() or [""])[-1]
        return CompilerResult(
            compiled=False,
            reason=f"{COMPILER_NAME} failed with exit status {proc.returncode}" + (f": {detail}" if detail else "."),
            **common,
        )
    if not compiled_path.is_file():
        return CompilerResult(
            compiled=False,
            reason=f"{COMPILER_NAME} exited 0 but wrote no {compiled_path.name}.",
            **common,
        )
    return CompilerResult(compiled=True, reason="", compiled_model=str(compiled_path), **common)


def compile_for_edgetpu(
    tflite_path: str | Path,
    out_dir: str | Path,
    *,
    explicit_compiler: str | None = None,
    timeout_s: float = 180.0,
) -> CompilerResult:
    """Find the compiler and run it, or say why the model was not compiled."""
    compiler = find_compiler(explicit_compiler)
    if compiler is None:
        return CompilerResult(
            compiled=False,
            reason=(
                f"{COMPILER_NAME} is not on PATH, so the model was not compiled for the Edge TPU "
                "(the mapping above is a prediction). Install it from Coral's package repository "
                "(x86-64 Linux) or pass --edgetpu-compiler PATH."
            ),
        )
    return run_compiler(tflite_path, out_dir, compiler, timeout_s)


def reattach_metadata(compiled: bytes, metadata: Any) -> bytes:
    """The compiled model with the run's TFLite model metadata attached again.

    The compiler writes a new flatbuffer without the source model's metadata (the ``TFLITE_METADATA``
    buffer and the zip of associated files after it), so apps would lose the labels and the
    normalization of the model they deploy. The compiled model keeps the source's inputs and outputs
    in order, which is what the metadata's tensor entries follow, so the same metadata applies.
    ``metadata`` is the run's ``model_metadata.ModelMetadata``. The compiled model is re-packed by
    the aligned writer (what MediaPipe's populator, the documented way for compiled models, also
    does with a plain writer); the edgetpu-custom operator's data is copied as it is.
    """
    from ...artifacts.model_metadata import attach_metadata

    return attach_metadata(bytes(compiled), metadata, origin=f"the {COMPILER_NAME} output with metadata").data


def require_compiled(result: CompilerResult) -> None:
    """For ``--require-compiler``: raise when the model was not compiled."""
    if result.compiled:
        return
    if result.compiler is None:
        raise TargetError(result.reason, "Drop --require-compiler to accept the predicted mapping.")
    raise ConversionError(
        f"The Edge TPU compile failed: {result.reason}",
        "See the mapping report for the first unsupported operation, or run edgetpu_compiler by hand "
        "on the written .tflite for its full output.",
    )


def compare_with_prediction(report: EdgeTPUReport, result: CompilerResult) -> list[str]:
    """Disagreements between the checker's prediction and the compiler's result (empty if none)."""
    if not result.compiled and result.output.total_ops is None and not result.output.table:
        return []
    out = result.output
    found: list[str] = []

    def differ(what: str, predicted: int, actual: int | None) -> None:
        if actual is not None and actual != predicted:
            found.append(f"{what}: predicted {predicted}, compiler says {actual}")

    differ("total operations", report.num_ops, out.total_ops)
    differ("operations on the Edge TPU", report.num_on_tpu, out.ops_on_tpu)
    differ("operations on the CPU", report.num_on_cpu, out.ops_on_cpu)
    differ("Edge TPU subgraphs", report.num_segments, out.num_subgraphs)
    if out.table:
        predicted = {(r.operator, r.status): r.count for r in report.table}
        actual: dict[tuple[str, str], int] = {}
        for r in out.table:
            actual[(r.operator, r.status)] = actual.get((r.operator, r.status), 0) + r.count
        for key in sorted(set(predicted) | set(actual)):
            p, a = predicted.get(key, 0), actual.get(key, 0)
            if p != a:
                found.append(f"{key[0]} '{key[1]}': predicted {p}, compiler says {a}")
    return found


# ---- the delegate -------------------------------------------------------------------------------


def load_edgetpu_delegate(library: str = EDGETPU_DELEGATE_LIBRARY) -> Any:
    """Load the Edge TPU delegate for ``--delegate edgetpu``; TargetError when libedgetpu is missing."""
    import ctypes

    from ai_edge_litert.interpreter import load_delegate

    try:
        # Probe first: load_delegate's own failure path leaves a half-built object that errors in __del__.
        ctypes.CDLL(library)
        return load_delegate(library)
    except (ValueError, OSError, RuntimeError) as exc:
        raise TargetError(
            f"--delegate edgetpu needs the Edge TPU runtime library ({library}), which is not "
            f"installed or could not be loaded here ({first_line(exc, 160)}).",
            "Install libedgetpu1-std from Coral's package repository and connect an Edge TPU, or "
            "run the parity check on the CPU (drop --delegate edgetpu).",
        ) from exc
