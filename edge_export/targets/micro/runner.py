"""A flatbuffer run in the TFLite Micro host interpreter of the ``tflite-micro`` package: float in,
float out for parity, the arena it really needs measured (``MicroRunner``), and the firmware
bundle's test vectors computed through it (``make_test_vectors``)."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ...errors import RuntimeRunError, first_line
from ...flatbuffer import FlatbufferModel, read_flatbuffer
from ...runtime.interpreter import IOTensor, from_model_outputs, to_model_inputs
from .checks import ARENA_ALIGNMENT, check_micro
from .kernel_types import KernelTypeMismatch, kernel_type_fix

__all__ = ["MicroRunner", "make_test_vectors", "type_refusal_hint"]

# Beyond this the model is not a microcontroller model; stop growing the trial arena.
_MAX_ARENA_BYTES = 64 << 20

_MISSING_OP = re.compile(r"Didn't find op for (?:builtin opcode|custom opcode) '([^']+)'")
_FAILED_NODE = re.compile(r"Node (\S+) \(number (\d+)\) failed to (prepare|invoke|init)")
_ARENA_TOTAL = re.compile(r"Arena allocation total (\d+) bytes")
# TFLM's ways of saying a kernel has no version for a tensor's type (kernel_types.py's measurement
# saw each): "input->type != expected_type (INT8 != FLOAT32)", "Type INT16 (7) not supported.",
# "DIV only supports FLOAT32, INT32, quantized INT8 now, got type INT16 (7).", "Only float32 and
# int8 types are supported.", "Unsupported type INT16", "alpha->type == kTfLiteInt8 was not true.",
# "data_type == kTfLiteFloat32 || ... was not true.", "Output type is 7, requires float or int8.".
_TYPE_REFUSAL = re.compile(
    r"->type != \w+ \(\w+ != \w+\)|type == kTfLite\w+.*was not true|[Tt]ype\b[^|]*\bnot (?:currently )?supported"
    r"|\bonly (?:currently )?supports?\b|\bOnly [\w, ]+ are supported|Unsupported type|[Tt]ype is \d+, requires"
)


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
                type_refusal_hint(log, self.report.kernel_type_mismatches)
                or "TFLM kernels support fewer types and options than LiteRT; export with full-integer "
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
        while hi - lo > ARENA_ALIGNMENT:
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
                type_refusal_hint(captured.text, self.report.kernel_type_mismatches)
                or "Check that the inputs match the shapes the model was exported with.",
            ) from error
        return outputs

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Float in, float out: quantizes inputs and dequantizes outputs where the model is integer."""
        return from_model_outputs(self.outputs, self.run_raw(to_model_inputs(self.inputs, arrays)))


def type_refusal_hint(log: str, mismatches: Sequence[KernelTypeMismatch]) -> str | None:
    """The hint for a failed operator whose kernel lacks the type it gets: the fix for it when
    check_micro's ``mismatches`` list it (whatever TFLM said: its MIRROR_PAD refuses int16 without a
    word), else the general one when TFLM words the failure as a type; None for any other failure."""
    node = _FAILED_NODE.search(log)
    if node is None:
        return None
    known = next((m for m in mismatches if m.operator_index == int(node.group(2))), None)
    if known is not None:
        return kernel_type_fix(known)
    if not _TYPE_REFUSAL.search(log):
        return None
    return (
        f"TFLite Micro's {node.group(1)} kernel does not take the tensor type this model gives it (TFLM's "
        "message names it; its kernels take fewer types than LiteRT's): replace the operator with one "
        "TFLM runs in that type, or export without --mixed-precision so that every activation is int8."
    )


def _first_lines(text: str, limit: int = 3) -> str:
    """TFLM's log (not an exception: for those see errors.first_line), a few lines joined."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[:limit])[:400]


def make_test_vectors(model: FlatbufferModel, arena_bytes: int, count: int, seed: int):
    """``count`` seeded inputs in the model's own input dtypes and shapes (quantized inputs over
    their whole integer range; unquantized integer inputs, such as indices, 0 or 1) and the outputs
    the TFLite Micro host interpreter returns for them, as stored (int8 for a micro export)."""
    from .bundle_selftest import TestVectors

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
