"""The microcontroller target: TFLite Micro (TFLM) operator support, arena size, host runs.

What TFLM can run is narrower than LiteRT: only the kernels an application registers in its
``MicroMutableOpResolver``, integer I/O in practice, and every byte of activation memory in one
tensor arena whose size the firmware fixes at build time. This module checks a flatbuffer against
those rules (``check_micro``), runs it through the TFLM host interpreter of the ``tflite-micro``
package for parity and to measure the arena it really needs (``MicroRunner``), and writes the C++
resolver lines for its operators (``emit_op_resolver`` / ``write_op_resolver``).

Where TFLM_SUPPORTED_OPS comes from: the tflite-micro package does not expose its resolver's list
to Python. The table below is the builtin-operator list of TFLM's host ``PythonOpsResolver``
(tflite-micro ``python/tflite_micro/python_ops_resolver.cc``, which calls one ``AddXxx()`` of
``micro_mutable_op_resolver.h`` per operator), brought up to the installed package: every entry
has a ``Register_<OP>`` kernel exported by the installed ``tflite_micro/_runtime.so``
(tflite-micro 0.dev20261023; ``installed_tflm_kernels`` reads them, and a test checks the table
against them), and BATCH_MATMUL, REDUCE_MIN, REDUCE_ALL and REVERSE_V2 (newer than the public
resolver file) were confirmed by running models through the host interpreter. GELU, SIGN and
REDUCE_ANY were confirmed missing ("Didn't find op for builtin opcode").
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterable, Sequence

import numpy as np

from ...config import IODtype
from ...errors import RuntimeRunError, TargetError, UsageError, first_line
from ...flatbuffer import FlatbufferModel, read_flatbuffer
from ...runtime.interpreter import IOTensor, from_model_outputs, to_model_inputs
from .budgets import BUDGET_OPTIONS, BUDGETS_REPORT_SECTION
from .cmsis_nn import CMSIS_NN_REPORT_SECTION
from .report import MICRO_REPORT_SECTION, CBundleSection, MicroReport, MicroSection
from ..base import TargetOption
from ..base import (
    FinishedRun,
    FinishedTarget,
    TargetArtifact,
    TargetCheck,
    TargetContext,
    TargetPlugin,
    imply_full_integer_int8,
    imply_io_dtype,
    register_target,
)

if TYPE_CHECKING:
    from ...options import ExportOptions

__all__ = [
    "TFLM_OP_RESOLVER_METHODS",
    "TFLM_SUPPORTED_OPS",
    "TFLM_CUSTOM_OP_METHODS",
    "MicroReport",
    "check_micro",
    "estimate_arena_bytes",
    "MicroRunner",
    "emit_op_resolver",
    "write_op_resolver",
    "installed_tflm_kernels",
    "MicroTarget",
]

# Builtin operator (schema name) -> MicroMutableOpResolver method that registers its kernel.
TFLM_OP_RESOLVER_METHODS: dict[str, str] = {
    "ABS": "AddAbs",
    "ADD": "AddAdd",
    "ADD_N": "AddAddN",
    "ARG_MAX": "AddArgMax",
    "ARG_MIN": "AddArgMin",
    "ASSIGN_VARIABLE": "AddAssignVariable",
    "AVERAGE_POOL_2D": "AddAveragePool2D",
    "BATCH_MATMUL": "AddBatchMatMul",
    "BATCH_TO_SPACE_ND": "AddBatchToSpaceNd",
    "BROADCAST_ARGS": "AddBroadcastArgs",
    "BROADCAST_TO": "AddBroadcastTo",
    "CALL_ONCE": "AddCallOnce",
    "CAST": "AddCast",
    "CEIL": "AddCeil",
    "CONCATENATION": "AddConcatenation",
    "CONV_2D": "AddConv2D",
    "COS": "AddCos",
    "CUMSUM": "AddCumSum",
    "DEPTH_TO_SPACE": "AddDepthToSpace",
    "DEPTHWISE_CONV_2D": "AddDepthwiseConv2D",
    "DEQUANTIZE": "AddDequantize",
    "DIV": "AddDiv",
    "DYNAMIC_UPDATE_SLICE": "AddDynamicUpdateSlice",
    "ELU": "AddElu",
    "EMBEDDING_LOOKUP": "AddEmbeddingLookup",
    "EQUAL": "AddEqual",
    "EXP": "AddExp",
    "EXPAND_DIMS": "AddExpandDims",
    "FILL": "AddFill",
    "FLOOR": "AddFloor",
    "FLOOR_DIV": "AddFloorDiv",
    "FLOOR_MOD": "AddFloorMod",
    "FULLY_CONNECTED": "AddFullyConnected",
    "GATHER": "AddGather",
    "GATHER_ND": "AddGatherNd",
    "GREATER": "AddGreater",
    "GREATER_EQUAL": "AddGreaterEqual",
    "HARD_SWISH": "AddHardSwish",
    "IF": "AddIf",
    "L2_NORMALIZATION": "AddL2Normalization",
    "L2_POOL_2D": "AddL2Pool2D",
    "LEAKY_RELU": "AddLeakyRelu",
    "LESS": "AddLess",
    "LESS_EQUAL": "AddLessEqual",
    "LOG": "AddLog",
    "LOG_SOFTMAX": "AddLogSoftmax",
    "LOGICAL_AND": "AddLogicalAnd",
    "LOGICAL_NOT": "AddLogicalNot",
    "LOGICAL_OR": "AddLogicalOr",
    "LOGISTIC": "AddLogistic",
    "MAX_POOL_2D": "AddMaxPool2D",
    "MAXIMUM": "AddMaximum",
    "MEAN": "AddMean",
    "MINIMUM": "AddMinimum",
    "MIRROR_PAD": "AddMirrorPad",
    "MUL": "AddMul",
    "NEG": "AddNeg",
    "NOT_EQUAL": "AddNotEqual",
    "PACK": "AddPack",
    "PAD": "AddPad",
    "PADV2": "AddPadV2",
    "PRELU": "AddPrelu",
    "QUANTIZE": "AddQuantize",
    "READ_VARIABLE": "AddReadVariable",
    "REDUCE_ALL": "AddReduceAll",
    "REDUCE_MAX": "AddReduceMax",
    "REDUCE_MIN": "AddReduceMin",
    "RELU": "AddRelu",
    "RELU6": "AddRelu6",
    "RESHAPE": "AddReshape",
    "RESIZE_BILINEAR": "AddResizeBilinear",
    "RESIZE_NEAREST_NEIGHBOR": "AddResizeNearestNeighbor",
    "REVERSE_V2": "AddReverseV2",
    "ROUND": "AddRound",
    "RSQRT": "AddRsqrt",
    "SELECT_V2": "AddSelectV2",
    "SHAPE": "AddShape",
    "SIN": "AddSin",
    "SLICE": "AddSlice",
    "SOFTMAX": "AddSoftmax",
    "SPACE_TO_BATCH_ND": "AddSpaceToBatchNd",
    "SPACE_TO_DEPTH": "AddSpaceToDepth",
    "SPLIT": "AddSplit",
    "SPLIT_V": "AddSplitV",
    "SQRT": "AddSqrt",
    "SQUARE": "AddSquare",
    "SQUARED_DIFFERENCE": "AddSquaredDifference",
    "SQUEEZE": "AddSqueeze",
    "STRIDED_SLICE": "AddStridedSlice",
    "SUB": "AddSub",
    "SUM": "AddSum",
    "SVDF": "AddSvdf",
    "TANH": "AddTanh",
    "TRANSPOSE": "AddTranspose",
    "TRANSPOSE_CONV": "AddTransposeConv",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "AddUnidirectionalSequenceLSTM",
    "UNPACK": "AddUnpack",
    "VAR_HANDLE": "AddVarHandle",
    "WHILE": "AddWhile",
    "ZEROS_LIKE": "AddZerosLike",
}
TFLM_SUPPORTED_OPS = frozenset(TFLM_OP_RESOLVER_METHODS)
# Custom operators (opcode CUSTOM with this name) that TFLM ships kernels for.
TFLM_CUSTOM_OP_METHODS: dict[str, str] = {
    "TFLite_Detection_PostProcess": "AddDetectionPostprocess",
    "CIRCULAR_BUFFER": "AddCircularBuffer",
    # The Arm Ethos-U NPU's operator in a Vela-compiled model (registered when TFLM is built with
    # the Ethos-U driver; the host interpreter has no kernel for it).
    "ethos-u": "AddEthosU",
}

_DTYPE_BYTES = {"float32": 4, "float16": 2, "int32": 4, "int64": 8, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
# Bookkeeping TFLM keeps in the arena besides activations, measured on the host interpreter's
# RecordingMicroAllocator: a TfLiteEvalTensor (24 bytes) per tensor, a NodeAndRegistration
# (64 bytes) per operator, per-channel multipliers and shifts (8 bytes per channel).
_EVAL_TENSOR_BYTES = 24
_NODE_BYTES = 64
_ARENA_ALIGNMENT = 16
# Beyond this the model is not a microcontroller model; stop growing the trial arena.
_MAX_ARENA_BYTES = 64 << 20


def _method_for(op: str) -> str | None:
    if op.startswith("CUSTOM:"):
        return TFLM_CUSTOM_OP_METHODS.get(op.split(":", 1)[1])
    return TFLM_OP_RESOLVER_METHODS.get(op)


def installed_tflm_kernels() -> frozenset[str]:
    """Builtin operators the installed tflite-micro host runtime has a Register_<OP> kernel for.

    Read from the exported symbols of its extension module (the package has no Python API for it).
    """
    from importlib.util import find_spec

    from ai_edge_litert import schema_py_generated as schema

    spec = find_spec("tflite_micro.python.tflite_micro._runtime")
    if spec is None or spec.origin is None:
        raise TargetError(
            "The tflite-micro package is not installed, so the micro target cannot be checked or run.",
            "Install it with `pip install edge-export[micro]`.",
        )
    names = set(re.findall(rb"Register_([A-Z0-9_]+?)Ev", Path(spec.origin).read_bytes()))
    builtins = {k for k in vars(schema.BuiltinOperator) if not k.startswith("_")}
    return frozenset(n.decode() for n in names) & builtins


def _tensor_bytes(model: FlatbufferModel, index: int) -> int:
    t = model.tensors[index]
    size = math.prod(max(d, 1) for d in t.shape) * _DTYPE_BYTES.get(t.dtype, 4)
    return -(-size // _ARENA_ALIGNMENT) * _ARENA_ALIGNMENT


def estimate_arena_bytes(model: FlatbufferModel) -> int:
    """Peak of live activation bytes over the operator order, plus TFLM's per-tensor/per-op
    bookkeeping. TFLM's greedy memory planner can do a little better or worse; MicroRunner
    measures the real figure."""
    first_use: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for i in model.inputs:
        first_use[i] = 0
    for step, op in enumerate(model.operators):
        for t in (*op.inputs, *op.outputs):
            if t < 0 or model.tensors[t].is_constant:
                continue
            first_use.setdefault(t, step)
            last_use[t] = step
    for o in model.outputs:
        last_use[o] = len(model.operators)
    peak = 0
    for step in range(len(model.operators) + 1):
        live = sum(_tensor_bytes(model, t) for t, s in first_use.items() if s <= step <= last_use.get(t, s))
        peak = max(peak, live)
    channels = sum(
        len(model.tensors[op.inputs[1]].quant.scales)
        for op in model.operators
        if len(op.inputs) > 1 and op.inputs[1] >= 0 and model.tensors[op.inputs[1]].quant is not None
    )
    overhead = _EVAL_TENSOR_BYTES * len(model.tensors) + _NODE_BYTES * len(model.operators) + 8 * channels
    return peak + overhead


def check_micro(model: FlatbufferModel, *, arena_bytes: int | None = None) -> MicroReport:
    """Check a verified model against TFLite Micro's rules. Never raises for a rule the model breaks:
    the report lists the problems (the pipeline turns them into a TargetError or a failed gate)."""
    ops: list[str] = []
    for sg_ops in model.subgraph_operators or (model.operators,):
        for op in sg_ops:
            if op.opcode not in ops:
                ops.append(op.opcode)
    return MicroReport(
        ops=tuple(ops),
        unsupported_ops=tuple(op for op in ops if _method_for(op) is None),
        input_dtypes=tuple(t.dtype for t in model.input_tensors),
        output_dtypes=tuple(t.dtype for t in model.output_tensors),
        fully_integer=model.is_fully_integer,
        float_tensors=tuple(t.name for t in model.float_tensors),
        arena_estimate_bytes=estimate_arena_bytes(model),
        arena_bytes=arena_bytes,
    )


def emit_op_resolver(ops: Iterable[str], variable: str = "resolver", *, function: str | None = None) -> str:
    """C++ lines registering exactly these operators (names as in FlatbufferModel.op_counts), in a
    function named ``function`` (default ``RegisterEdgeExportOps``)."""
    ops = list(dict.fromkeys(ops))
    missing = [op for op in ops if _method_for(op) is None]
    if missing:
        raise TargetError(
            f"Cannot write a TFLite Micro op resolver: TFLite Micro has no kernel for {', '.join(missing)}.",
            "Change the model so that it does not use these operators, or register your own kernels.",
        )
    if not variable.isidentifier():
        raise UsageError(f"{variable!r} is not a C++ identifier.", "Use a name such as `resolver`.")
    methods = sorted({_method_for(op) for op in ops})
    n = len(methods)
    fn = function or ("RegisterEdgeExportOps" if variable == "resolver" else f"Register_{variable}")
    lines = [
        f"// TFLite Micro op resolver for the {n} operators of this model (written by edge-export).",
        '#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"',
        "",
        "// Registers exactly the operators the model uses. Before creating the MicroInterpreter:",
        f"//   static tflite::MicroMutableOpResolver<{n}> {variable};",
        f"//   if ({fn}({variable}) != kTfLiteOk) {{ /* handle the error */ }}",
        f"inline TfLiteStatus {fn}(tflite::MicroMutableOpResolver<{n}>& {variable}) {{",
    ]
    lines += [f"  if ({variable}.{m}() != kTfLiteOk) return kTfLiteError;" for m in methods]
    lines += ["  return kTfLiteOk;", "}"]
    return "\n".join(lines) + "\n"


def write_op_resolver(path: str | Path, ops: Iterable[str]) -> Path:
    """Write emit_op_resolver's lines to ``path`` (for ``--emit-op-resolver PATH``)."""
    p = Path(path)
    text = emit_op_resolver(ops)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    except OSError as exc:
        raise UsageError(f"Cannot write the op resolver to {p}: {exc.strerror}.", "Choose a writable path.") from exc
    return p


_MISSING_OP = re.compile(r"Didn't find op for (?:builtin opcode|custom opcode) '([^']+)'")
_FAILED_NODE = re.compile(r"Node (\S+) \(number (\d+)\) failed to (prepare|invoke|init)")
_ARENA_TOTAL = re.compile(r"Arena allocation total (\d+) bytes")


class MicroRunner:
    """Runs a flatbuffer in the TFLite Micro host interpreter, float in / float out like TFLiteRunner.

    With ``arena_size=None`` the runner finds the arena the model needs: it asks TFLM's recording
    allocator for the bytes it used, then confirms the smallest size that allocates (``arena_bytes``).
    That is the figure on this 64-bit host; on a 32-bit microcontroller TFLM's own structures are
    smaller (pointers), so it is a slight over-estimate there, and kernels optimized for a chip
    (CMSIS-NN, ...) may ask for scratch buffers of their own.
    """

    name = "TFLite Micro host interpreter"

    def __init__(self, model: FlatbufferModel | bytes, *, arena_size: int | None = None) -> None:
        # Bytes are verified in pure Python first (a model object was when read): TFLM does not verify.
        self.model = model if isinstance(model, FlatbufferModel) else read_flatbuffer(model)
        self._bytes = self.model.data
        self.report = check_micro(self.model)
        if arena_size is None:
            self.arena_bytes = self._find_arena()
        else:
            self.arena_bytes = int(arena_size)
        self._interp = self._create(self.arena_bytes)
        self.report = self.report.with_arena(self.arena_bytes)
        self.inputs, self.outputs = self._io()

    # -- construction ---------------------------------------------------------------------------
    def _try_create(self, arena: int):
        """(interpreter or None, TFLM's log text)."""
        from tflite_micro import runtime

        from ...processes.library_output import quiet_libraries

        with quiet_libraries() as captured:
            try:
                interp = runtime.Interpreter.from_bytes(self._bytes, arena_size=int(arena))
            except (RuntimeError, ValueError):
                interp = None
        return interp, captured.text

    def _module_of(self, index: int) -> str:
        """`` in module 'path' (Type)`` of operator ``index`` (TFLM's node number), from its tensors' names."""
        from ...graph.provenance import describe_location, flatbuffer_operator_module

        if not 0 <= index < len(self.model.operators):
            return ""
        found = flatbuffer_operator_module(self.model, self.model.operators[index])
        return describe_location(found.path, found.type_name, None) if found else ""

    def _rejection(self, log: str, arena: int) -> RuntimeRunError:
        from ...conversion.operator_origins import describe_operator_origins

        missing = _MISSING_OP.findall(log)
        if missing:
            names = describe_operator_origins(self.model, tuple(dict.fromkeys(missing)))  # with their modules
            return RuntimeRunError(
                f"The TFLite Micro interpreter rejected the model: it has no kernel for {names}.",
                "Replace the layer that produces this operator, or register a custom TFLM kernel for it.",
            )
        node = _FAILED_NODE.search(log)
        if node:
            return RuntimeRunError(
                f"The TFLite Micro interpreter rejected the model: operator {node.group(1)} "
                f"(number {node.group(2)}){self._module_of(int(node.group(2)))} failed to {node.group(3)}. "
                f"TFLM said: {_first_lines(log)}",
                "TFLM kernels support fewer types and options than LiteRT; export with full-integer "
                "int8 (--quantize int8 --io-dtype int8).",
            )
        unsupported = self.report.unsupported_ops
        named = f" (it has no kernel for {', '.join(unsupported)})" if unsupported else ""
        return RuntimeRunError(
            f"The TFLite Micro interpreter could not allocate the model with a {arena}-byte arena{named}. "
            f"TFLM said: {_first_lines(log) or 'nothing'}",
            "Run `edge-export inspect` on the file to see its operators.",
        )

    def _create(self, arena: int):
        interp, log = self._try_create(arena)
        if interp is None:
            raise self._rejection(log, arena)
        return interp

    def _find_arena(self) -> int:
        # A generous first try, growing while TFLM only complains about memory.
        arena = max(16 * 1024, 4 * self.report.arena_estimate_bytes, 2 * len(self._bytes))
        while True:
            interp, log = self._try_create(arena)
            if interp is not None:
                break
            if _MISSING_OP.search(log) or _FAILED_NODE.search(log) or arena >= _MAX_ARENA_BYTES:
                raise self._rejection(log, arena)
            arena = min(arena * 4, _MAX_ARENA_BYTES)
        from ...processes.library_output import quiet_libraries

        with quiet_libraries() as captured:
            interp.print_allocations()
        match = _ARENA_TOTAL.search(captured.text)
        used = int(match.group(1)) if match else arena
        # The recorded total excludes the arena's own alignment; search the smallest size that
        # allocates between the recorded figure and the size that worked.
        if self._allocates(used):
            return used
        lo, hi = used, arena
        while hi - lo > _ARENA_ALIGNMENT:
            mid = (lo + hi) // 2
            if self._allocates(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def _allocates(self, arena: int) -> bool:
        """Whether TFLM allocates the model in ``arena`` bytes, probed in a forked child: for sizes
        up to 16 bytes below the smallest that allocates, TFLM (the pinned tflite-micro) writes past
        the arena and segfaults instead of failing (measured on a Linear-ReLU-Linear model, where the
        search lands in that window). A probe that crashes is a size that does not allocate."""
        from ...processes.isolation import NativeCrashError, run_isolated

        try:
            return run_isolated(
                lambda: self._try_create(arena)[0] is not None,
                stage="TFLite Micro arena probe",
                backend="the TFLite Micro interpreter",
            )
        except NativeCrashError:
            return False

    def _io(self) -> tuple[list[IOTensor], list[IOTensor]]:
        m = self.model

        def make(kind: str, positions_in_subgraph: list[int], names: list[str]) -> list[IOTensor]:
            getter = self._interp.get_input_details if kind == "input" else self._interp.get_output_details
            result = []
            for name, pos in zip(names, positions_in_subgraph):
                d = getter(pos)
                q = d.get("quantization_parameters") or {}
                scales = list(q.get("scales", []))
                zps = list(q.get("zero_points", []))
                scale = float(scales[0]) if len(scales) == 1 and scales[0] else None
                result.append(
                    IOTensor(
                        name=name,
                        index=pos,  # TFLM addresses inputs/outputs by position, not tensor index
                        shape=tuple(int(s) for s in d["shape"]),
                        dtype=np.dtype(d["dtype"]).name,
                        scale=scale,
                        zero_point=int(zps[0]) if scale is not None else None,
                    )
                )
            return result

        # Subgraph order (forward()'s arguments, flattened outputs), like TFLiteRunner.
        in_pos, out_pos = list(range(len(m.inputs))), list(range(len(m.outputs)))
        return make("input", in_pos, list(m.input_names)), make("output", out_pos, list(m.output_names))

    # -- running --------------------------------------------------------------------------------
    def run_raw(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Arrays already in the model's input dtypes, in forward() order; outputs as stored."""
        if len(arrays) != len(self.inputs):
            raise RuntimeRunError(f"The flatbuffer has {len(self.inputs)} inputs but {len(arrays)} arrays were given.")
        from ...processes.library_output import quiet_libraries

        with quiet_libraries() as captured:
            try:
                for spec, arr in zip(self.inputs, arrays):
                    self._interp.set_input(np.ascontiguousarray(arr, dtype=spec.dtype).reshape(spec.shape), spec.index)
                self._interp.invoke()
                outputs = [np.array(self._interp.get_output(o.index)) for o in self.outputs]
            except (RuntimeError, ValueError) as exc:
                error = exc
            else:
                error = None
        if error is not None:
            node = _FAILED_NODE.search(captured.text)
            where = f" in operator {node.group(1)} (number {node.group(2)})" if node else ""
            raise RuntimeRunError(
                f"The TFLite Micro interpreter failed to run the model{where}: {first_line(error).rstrip('.')}. "
                f"TFLM said: {_first_lines(captured.text) or 'nothing'}",
                "Check that the inputs match the shapes the model was exported with.",
            ) from error
        return outputs

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Float in, float out: quantizes inputs and dequantizes outputs where the model is integer."""
        return from_model_outputs(self.outputs, self.run_raw(to_model_inputs(self.inputs, arrays)))


def _first_lines(text: str, limit: int = 3) -> str:
    """TFLM's log (not an exception: for those see errors.first_line), a few lines joined."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[:limit])[:400]


# ---- the target ---------------------------------------------------------------------------------


class MicroTarget(TargetPlugin):
    """``--target micro``: full-integer int8 with int8 NHWC I/O and inner tensor names stripped (their
    map written beside the model), checked against TFLite Micro's kernels, parity and the arena
    measured in its host interpreter, and the op resolver lines on request."""

    name = "micro"
    report_sections = (MICRO_REPORT_SECTION, BUDGETS_REPORT_SECTION, CMSIS_NN_REPORT_SECTION)
    options: ClassVar[tuple[TargetOption, ...]] = (
        TargetOption("emit_op_resolver", "--emit-op-resolver", "micro: write the C++ MicroMutableOpResolver lines for the model's operators here.", Path, check=str),
        *BUDGET_OPTIONS,
        TargetOption(
            "emit_c", "--emit-c",
            "micro: write the firmware bundle (model array, op resolver, arena size, test vectors) into DIR "
            "(default with --target micro: <stem>_micro/ beside the .tflite).",
            Path, metavar="DIR", check=str,
        ),
        TargetOption("no_emit_c", "--no-emit-c", "micro: write no firmware bundle.", bool, False),
    )
    requires_full_integer = True
    # TFLite Micro ignores metadata: it would only cost flash (--labels stays a parity option).
    carries_metadata = False
    mixed_precision_promotions = ("int16",)  # int16x8 kernels (reference and CMSIS-NN); no float wanted
    check_label = "Checking TFLite Micro support"

    def implied_options(self, options: ExportOptions) -> tuple[ExportOptions, list[str]]:
        options, implied = imply_full_integer_int8(options, self.name)
        if options.io_dtype not in (None, IODtype.INT8):
            raise UsageError(
                f"--target {self.name} needs int8 model inputs and outputs, but --io-dtype {options.io_dtype.value} was given.",
                f"Drop --io-dtype ({self.name} implies int8).",
            )
        options, io_note = imply_io_dtype(options, self.name, IODtype.INT8)
        implied += io_note
        if options.part_scales:  # a joined output keeps its parts' scales only as a float output
            options = replace(options, part_scales=False)
            implied.append(f"--target {self.name} implies --no-part-scales (its outputs are int8, one scale each)")
        if not options.channels_last:
            # Sensors and camera pipelines deliver NHWC; NCHW I/O would cost a TRANSPOSE at each
            # image input and output (flash, arena and time on the device).
            options = replace(options, channels_last=True)
            implied.append(f"--target {self.name} implies NHWC image I/O (--channels-last)")
        if not options.strip_names and not options.keep_names:
            # Names are ~15% of a small int8 CNN's flash and TFLM never reads them; the tensor-name
            # map written beside the model keeps per-layer debugging possible.
            options = replace(options, strip_names=True)
            implied.append(
                f"--target {self.name} implies --strip-names (the names go to <stem>.tensors.json; --keep-names keeps them)"
            )
        if options.emit_c and options.no_emit_c:
            raise UsageError(
                f"--emit-c {options.emit_c} and --no-emit-c contradict each other.",
                "Keep one: --emit-c DIR writes the firmware bundle there, --no-emit-c writes none.",
            )
        return options, implied

    def output_paths(self, options: ExportOptions, tflite_path: Path) -> list[tuple[str, Path]]:
        from ...artifacts.tensor_names import tensor_names_path

        paths = [("--emit-op-resolver", Path(options.emit_op_resolver))] if options.emit_op_resolver else []
        if options.strip_names:
            paths.append(("the tensor-name map (named after -o)", tensor_names_path(tflite_path)))
        bundle = _bundle_layout(options, tflite_path)
        if bundle is not None:
            folder, name = bundle
            if folder.exists() and not folder.is_dir():
                raise UsageError(
                    f"Cannot write the firmware bundle into {folder}: it is a file, not a folder.",
                    "Pass --emit-c with a folder path (it is created), or --no-emit-c.",
                )
            if folder.absolute() == tflite_path.absolute():
                raise UsageError(
                    f"--emit-c {folder} is the path of the .tflite itself.",
                    "Pass --emit-c a folder of its own (e.g. the default, <stem>_micro/ beside the .tflite).",
                )
            from .bundle import bundle_paths

            label = f"the firmware bundle ({'--emit-c' if options.emit_c else f'implied by --target {self.name}; --no-emit-c skips it'})"
            paths += [(label, p) for p in bundle_paths(folder, name)]
        return paths

    def check(self, context: TargetContext) -> TargetCheck:
        from ...errors import ConversionError

        report = check_micro(context.model)
        if report.unsupported_ops:
            from ...conversion.operator_origins import describe_operator_origins

            # each refused operator with the aten call, module and line it came from
            origins = describe_operator_origins(context.model, report.unsupported_ops, context.source_module)
            raise ConversionError(
                f"The model cannot run on TFLite Micro: it has no kernel for {origins}. " + " ".join(report.problems),
                "Replace those operators in the model (or pick --target cpu).",
            )
        from ...processes.isolation import run_isolated

        model = context.model

        def measure():  # raises RuntimeRunError naming the operator TFLM rejects
            runner = MicroRunner(model)
            return runner.arena_bytes, runner.report

        # TFLM runs in a child process (as every native run of a candidate model): a crash is exit 3.
        arena, micro_report = run_isolated(measure, stage="TFLite Micro arena measurement", backend="the TFLite Micro interpreter")

        artifacts = ()
        resolver_path = context.options.emit_op_resolver
        if resolver_path:
            artifacts = (TargetArtifact("op_resolver", Path(resolver_path), emit_op_resolver(micro_report.ops).encode()),)
        bundle = _bundle_layout(context.options, context.tflite_path)
        c_bundle = None
        if bundle is not None:
            from .bundle import TEST_TOLERANCE_STEPS, TEST_VECTOR_COUNT, arena_with_margin, bundle_paths

            folder, name = bundle
            c_bundle = CBundleSection(
                folder=str(folder),
                name=name,
                files=tuple(p.name for p in bundle_paths(folder, name)),
                arena_measured_bytes=arena,
                arena_size=arena_with_margin(arena),
                test_vectors=TEST_VECTOR_COUNT,
                tolerance_steps=TEST_TOLERANCE_STEPS,
            )
        section = MicroSection(micro_report, str(resolver_path) if resolver_path else None, c_bundle)
        from .cmsis_nn import check_cmsis_nn

        return TargetCheck(
            {"micro": section, "cmsis_nn": check_cmsis_nn(model)}, artifacts,
            runner=lambda: MicroRunner(model, arena_size=arena),
            runner_label="the TFLite Micro interpreter",
        )

    def finish(self, run: FinishedRun) -> FinishedTarget:
        """On the model as written (after --strip-names): the tensor-name map of a stripped model,
        flash (the written .tflite) and RAM (the arena TFLM measured) against --max-flash/--max-ram,
        and the firmware bundle, whose comments carry the report's headline and whose test vectors'
        expected outputs come from the host interpreter running that model."""
        artifacts: tuple[TargetArtifact, ...] = ()
        if run.options.strip_names:
            from ...artifacts.tensor_names import build_tensor_name_map, tensor_names_path

            artifacts += (
                TargetArtifact("tensor_names", tensor_names_path(run.tflite_path), build_tensor_name_map(run.named_model, run.model)),
            )
        entries = {"budgets": self._budgets(run)}
        section = run.checked.report.get("micro")
        bundle = getattr(section, "c_bundle", None)
        if bundle is None:
            return FinishedTarget(entries, artifacts)
        from ...version import __version__
        from ...processes.isolation import run_isolated
        from . import bundle as cb

        model, seed = run.model, run.options.seed
        vectors = run_isolated(
            lambda: make_test_vectors(model, bundle.arena_measured_bytes, bundle.test_vectors, seed),
            stage="TFLite Micro test vectors",
            backend="the TFLite Micro interpreter",
        )
        name, folder = bundle.name, Path(bundle.folder)
        headline = _report_headline(run.report_with(entries))
        data, source, ops = self._bundle_model(run)
        model_h, model_cc = cb.render_model_data(
            name, data, source=source, headline=headline,
            arena_measured=bundle.arena_measured_bytes, arena_size=bundle.arena_size, tool_version=__version__,
        )
        resolver = cb.render_op_resolver(name, emit_op_resolver(ops, function=f"{name}_register_ops"))
        test_h, test_cc = cb.render_test_data(name, vectors, headline=headline)
        test_main = cb.render_test_main(name, len({_method_for(op) for op in ops}), vectors.inputs, vectors.outputs)
        texts = (model_h, model_cc, resolver, test_h, test_cc, test_main)
        keys = ("c_model_data_h", "c_model_data_cc", "c_op_resolver_h", "c_test_data_h", "c_test_data_cc", "c_test_cc")
        paths = cb.bundle_paths(folder, name)
        artifacts += tuple(TargetArtifact(key, path, text.encode()) for key, path, text in zip(keys, paths, texts))
        return FinishedTarget(entries, artifacts)

    def _bundle_model(self, run: FinishedRun) -> tuple[bytes, str, tuple[str, ...]]:
        """The model the firmware bundle embeds: its bytes, file name and operators (an Ethos-U
        target embeds the Vela-compiled model instead)."""
        return run.model.data, run.tflite_path.name, tuple(run.checked.report["micro"].report.ops)

    def _budgets(self, run: FinishedRun):
        """Flash (the written .tflite) and RAM (the arena TFLM measured) against --max-flash/--max-ram."""
        from .budgets import check_budgets, largest_activations, largest_constants

        micro = run.checked.report.get("micro")
        arena = micro.report.arena_bytes if micro is not None else None
        return check_budgets(
            flash_bytes=run.model.size_bytes,
            ram_bytes=arena,
            max_flash=run.options.max_flash,
            max_ram=run.options.max_ram,
            flash_consumers=largest_constants(run.named_model),
            ram_consumers=largest_activations(run.named_model),
            ram_measured="tensor arena (measured by the TFLite Micro host interpreter)",
            ram_note=(
                "The arena also holds TFLite Micro's own structures and kernel scratch, planned by TFLM with "
                "tensors sharing memory when their lifetimes do not overlap: these are the largest activations, "
                "not an exact breakdown."
            ),
        )


def make_test_vectors(model: FlatbufferModel, arena_bytes: int, count: int, seed: int):
    """``count`` seeded inputs in the model's own input dtypes and shapes (quantized inputs over
    their whole integer range; unquantized integer inputs, such as indices, 0 or 1) and the outputs
    the TFLite Micro host interpreter returns for them, as stored (int8 for a micro export)."""
    from .bundle import TestVectors

    runner = MicroRunner(model, arena_size=arena_bytes)
    rng = np.random.default_rng(seed)
    per_vector = []
    for _ in range(count):
        arrays = []
        for spec in runner.inputs:
            dtype = np.dtype(spec.dtype)
            if dtype.kind in "iu" and spec.scale is not None:
                info = np.iinfo(dtype)
                arrays.append(rng.integers(info.min, int(info.max) + 1, size=spec.shape, dtype=dtype))
            elif dtype.kind in "iub":
                arrays.append(rng.integers(0, 2, size=spec.shape).astype(dtype))
            else:
                arrays.append(rng.standard_normal(spec.shape).astype(dtype))
        per_vector.append((arrays, runner.run_raw(arrays)))
    inputs = tuple(np.stack([v[0][i] for v in per_vector]) for i in range(len(runner.inputs)))
    outputs = tuple(np.stack([np.asarray(v[1][j]) for v in per_vector]) for j in range(len(runner.outputs)))
    return TestVectors(inputs, outputs)


def _report_headline(report) -> str:
    """The verdict and the worst output's SQNR, for the bundle's comments."""
    validation = report.validation
    worst = validation.worst() if hasattr(validation, "worst") else None
    if worst is None:
        return f"verdict {report.verdict} (parity not checked)"
    sqnr = "n/a" if worst.sqnr_db is None or not math.isfinite(worst.sqnr_db) else f"{worst.sqnr_db:.1f} dB"
    return f"verdict {report.verdict}, worst output SQNR {sqnr} ({worst.output}), {validation.samples} samples on {validation.runtime}"


def _bundle_layout(options: ExportOptions, tflite_path: Path) -> tuple[Path, str] | None:
    """(folder, C name) of the firmware bundle, or None with --no-emit-c."""
    if options.no_emit_c:
        return None
    from .bundle import c_identifier

    folder = Path(options.emit_c) if options.emit_c else tflite_path.with_name(f"{tflite_path.stem}_micro")
    return folder, c_identifier(tflite_path.stem)


register_target(MicroTarget())
