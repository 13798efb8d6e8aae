"""`edge-export inspect`: what a .tflite file holds, read from the file itself (no interpreter).

The report is built from ``FlatbufferModel`` (so the file is verified before anything is said about
it) and rendered either as rich tables or, with ``--json``, through ``serialize.to_json_value``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .flatbuffer import FlatbufferModel, TensorInfo, load_flatbuffer, read_flatbuffer
from .reports.model import MetadataSection

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "InspectionReport",
    "OperatorCount",
    "FloatIsland",
    "inspect_flatbuffer",
    "inspect_model",
    "render_inspection",
]


@dataclass(frozen=True)
class OperatorCount:
    opcode: str
    count: int


@dataclass(frozen=True)
class FloatIsland:
    """A QUANTIZE/DEQUANTIZE inside the graph: where a mixed-precision model enters or leaves float."""

    operator_index: int
    opcode: str
    tensor: str  # the float side: the input of a QUANTIZE, the output of a DEQUANTIZE


@dataclass(frozen=True)
class InspectionReport:
    path: str | None
    size_bytes: int
    num_subgraphs: int
    tensor_count: int
    operator_count: int
    signatures: tuple[dict, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    operators: tuple[OperatorCount, ...]  # most frequent first
    fully_integer: bool
    quantized_tensor_count: int  # integer tensors with quantization parameters (0: a float model)
    float_tensors: tuple[str, ...]  # float tensors inside the graph (I/O excluded)
    float_islands: tuple[FloatIsland, ...]
    min_runtime_version: str | None
    description: str | None
    # TFLite model metadata (model_metadata.read_model_metadata); metadata_note says why it was not decoded
    metadata: MetadataSection | None = None
    metadata_note: str | None = None

    @property
    def io_dtypes(self) -> tuple[str, ...]:
        return tuple(t.dtype for t in (*self.inputs, *self.outputs))


def inspect_model(model: FlatbufferModel, path: str | None = None) -> InspectionReport:
    """Build the report from an already verified model."""
    islands = []
    for op in model.inner_quantize_ops:
        tensor_index = op.inputs[0] if op.opcode == "QUANTIZE" else op.outputs[0]
        islands.append(FloatIsland(op.index, op.opcode, model.tensors[tensor_index].name))
    metadata, metadata_note = _read_metadata(model)
    return InspectionReport(
        path=path,
        size_bytes=model.size_bytes,
        num_subgraphs=model.num_subgraphs,
        tensor_count=len(model.tensors),
        operator_count=model.num_operators,
        signatures=tuple(dict(s) for s in model.signatures),
        inputs=tuple(model.input_tensors),
        outputs=tuple(model.output_tensors),
        operators=tuple(OperatorCount(name, n) for name, n in model.op_counts.items()),
        fully_integer=model.is_fully_integer,
        quantized_tensor_count=sum(1 for t in model.tensors if t.quant is not None and not t.is_float),
        float_tensors=tuple(t.name for t in model.float_tensors),
        float_islands=tuple(islands),
        min_runtime_version=model.min_runtime_version,
        description=model.description,
        metadata=metadata,
        metadata_note=metadata_note,
    )


def _read_metadata(model: FlatbufferModel) -> tuple[MetadataSection | None, str | None]:
    from .errors import UsageError
    from .artifacts.model_metadata import INSTALL_COMMAND, model_has_metadata, read_model_metadata

    if not model_has_metadata(model.data):
        return None, None
    try:
        return read_model_metadata(model), None
    except UsageError:
        return None, f"TFLITE_METADATA present; install MediaPipe's metadata schema to decode it: {INSTALL_COMMAND}"


def inspect_flatbuffer(source: str | Path | bytes) -> InspectionReport:
    """Inspect a .tflite file (path) or its bytes. Raises FlatbufferError on a malformed file."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return inspect_model(read_flatbuffer(bytes(source)))
    model = load_flatbuffer(source)
    return inspect_model(model, path=str(source))


def _quant_text(t: TensorInfo) -> str:
    if t.quant is None:
        return "-"
    if t.quant.per_channel:
        return (
            f"per-channel ({len(t.quant.scales)} on axis {t.quant.quantized_dimension}), "
            f"scale {min(t.quant.scales):.3g}..{max(t.quant.scales):.3g}"
        )
    return f"scale {t.quant.scales[0]:.6g}, zero point {t.quant.zero_points[0]}"


def _shape_text(t: TensorInfo) -> str:
    dims = [str(d) if d >= 0 else "?" for d in t.shape_signature]
    return "[" + ", ".join(dims) + "]"


def _size_text(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB ({n:,} bytes)"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB ({n:,} bytes)"
    return f"{n} bytes"


def render_inspection(report: InspectionReport, console: Console) -> None:
    """Print the report as rich tables. Names, opcodes and paths come from the file and are printed
    literally (``escape``): a tensor named ``[/bold]`` is rich markup, and used to crash inspect."""
    from rich.markup import escape
    from rich.table import Table

    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column(overflow="fold")
    if report.path:
        summary.add_row("File", escape(report.path))
    summary.add_row("Size", _size_text(report.size_bytes))
    summary.add_row("Subgraphs", str(report.num_subgraphs))
    summary.add_row("Tensors", str(report.tensor_count))
    summary.add_row("Operators", str(report.operator_count))
    summary.add_row("Min runtime version", escape(report.min_runtime_version or "not recorded"))
    if report.fully_integer:
        summary.add_row("Fully integer", "[green]yes[/green]")
    elif report.quantized_tensor_count == 0:
        summary.add_row("Fully integer", "no (a float model)")
    else:
        detail = f"{len(report.float_tensors)} float tensors inside the graph"
        if report.float_islands:
            detail += f", {len(report.float_islands)} inner QUANTIZE/DEQUANTIZE ops"
        summary.add_row("Fully integer", f"[yellow]no[/yellow] ({detail})")
    if report.signatures:
        summary.add_row(
            "Signatures",
            escape("; ".join(
                f"{s['key']}({', '.join(s['inputs'])}) -> {', '.join(s['outputs'])}" for s in report.signatures
            )),
        )
    console.print(summary)

    for title, tensors in (("Inputs", report.inputs), ("Outputs", report.outputs)):
        table = Table(title=title, title_justify="left")
        for col in ("#", "name", "dtype", "shape", "quantization"):
            # Names are what an app binds to: fold them in a narrow terminal, never cut them with "…".
            table.add_column(col, overflow="fold")
        for i, t in enumerate(tensors):
            table.add_row(str(i), escape(t.name), t.dtype, _shape_text(t), _quant_text(t))
        console.print(table)

    if report.metadata is not None:
        _render_metadata(report.metadata, console)
    elif report.metadata_note:
        console.print(f"Metadata: {report.metadata_note}", markup=False)

    ops = Table(title="Operators", title_justify="left")
    ops.add_column("operator")
    ops.add_column("count", justify="right")
    for o in report.operators:
        ops.add_row(escape(o.opcode), str(o.count))
    console.print(ops)

    if report.float_islands:
        islands = Table(title="Float islands (inner QUANTIZE/DEQUANTIZE)", title_justify="left")
        islands.add_column("op #", justify="right")
        islands.add_column("operator")
        islands.add_column("float tensor", overflow="fold")
        for f in report.float_islands:
            islands.add_row(str(f.operator_index), f.opcode, escape(f.tensor))
        console.print(islands)
    # Which tensors stayed float matters in a mixed-precision model, not in a float one.
    if report.float_tensors and not report.fully_integer and report.quantized_tensor_count:
        shown = "\n  ".join(report.float_tensors[:8])
        more = f"\n  ... and {len(report.float_tensors) - 8} more" if len(report.float_tensors) > 8 else ""
        console.print(f"Float tensors inside the graph:\n  {shown}{more}", markup=False)


def _values_text(values: tuple[float, ...] | None) -> str:
    return ", ".join(f"{v:g}" for v in values) if values else "-"


def _render_metadata(metadata: MetadataSection, console: Console) -> None:
    """The model metadata: every text in it comes from the file, printed literally."""
    from rich.markup import escape
    from rich.table import Table

    info = Table(title="Metadata (TFLITE_METADATA)", title_justify="left", show_header=False)
    info.add_column(style="bold")
    info.add_column(overflow="fold")
    for label, value in (
        ("name", metadata.name), ("version", metadata.version), ("author", metadata.author),
        ("description", metadata.description), ("min parser version", metadata.min_parser_version),
    ):
        if value:
            info.add_row(label, escape(value))
    for f in metadata.associated_files:
        info.add_row("associated file", escape(f"{f.name} ({f.type}, {f.size_bytes} bytes)"))
    console.print(info)
    table = Table(title="Metadata per tensor", title_justify="left")
    for col in ("tensor", "name", "kind", "normalization mean / std", "colour space", "labels"):
        table.add_column(col, overflow="fold")
    for side, rows in (("input", metadata.inputs), ("output", metadata.outputs)):
        for i, t in enumerate(rows):
            normalization = f"{_values_text(t.normalization_mean)} / {_values_text(t.normalization_std)}" if t.normalization_mean else "-"
            labels = f"{t.labels_file} ({t.labels_count if t.labels_count is not None else '?'} labels)" if t.labels_file else "-"
            table.add_row(f"{side} {i}", escape(t.name), t.kind, normalization, escape(t.color_space or "-"), escape(labels))
    console.print(table)
    for note in metadata.notes:
        console.print(f"Metadata note: {note}", markup=False)
