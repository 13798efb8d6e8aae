"""Run a flatbuffer on the host with ai-edge-litert's interpreter.

The runner speaks float to its callers: it quantizes float inputs with each input tensor's own scale
and zero point and dequantizes integer outputs, so that parity code compares like with like whatever
the model's I/O types are.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import RuntimeRunError, map_exceptions
from ..flatbuffer import FlatbufferModel, read_flatbuffer
from ..output.serialize import json_field

__all__ = [
    "Resolver",
    "IOTensor",
    "TFLiteRunner",
    "CompiledModelRunner",
    "quantize_array",
    "dequantize_array",
    "to_model_inputs",
    "from_model_outputs",
]


class Resolver(str, enum.Enum):
    XNNPACK = "xnnpack"  # optimized kernels plus the default XNNPACK delegate (what apps run)
    BUILTIN = "builtin"  # optimized kernels, no default delegates
    REFERENCE = "reference"  # reference kernels: slow, but every op and intermediate is visible


@dataclass(frozen=True)
class IOTensor:
    name: str  # signature name, e.g. args_0 / output_0
    index: int = json_field(skip=True)  # interpreter tensor index (not in the JSON)
    shape: tuple[int, ...]
    dtype: str
    scale: float | None
    zero_point: int | None

    @property
    def quantized(self) -> bool:
        return self.scale is not None and self.scale != 0.0


def quantize_array(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    q = np.round(np.asarray(x, dtype=np.float64) / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize_array(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return ((q.astype(np.float64) - zero_point) * scale).astype(np.float32)


_INTEGER_IO = ("int8", "uint8", "int16")


def to_model_inputs(specs: Sequence[IOTensor], arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Float arrays to what the model takes: quantized with each input's scale and zero point."""
    out = []
    for spec, arr in zip(specs, arrays):
        arr = np.asarray(arr)
        if spec.quantized and spec.dtype in _INTEGER_IO and arr.dtype.kind == "f":
            out.append(quantize_array(arr, spec.scale, spec.zero_point, np.dtype(spec.dtype)))
        else:
            out.append(arr.astype(spec.dtype, copy=False))
    return out


def from_model_outputs(specs: Sequence[IOTensor], arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Model outputs back to float, dequantized with each output's scale and zero point."""
    return [
        dequantize_array(arr, spec.scale, spec.zero_point) if spec.quantized and spec.dtype in _INTEGER_IO else arr
        for spec, arr in zip(specs, arrays)
    ]


def _resolver_type(resolver: Resolver):
    from ai_edge_litert.interpreter import OpResolverType

    return {
        Resolver.XNNPACK: OpResolverType.AUTO,
        Resolver.BUILTIN: OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        Resolver.REFERENCE: OpResolverType.BUILTIN_REF,
    }[resolver]


_RUNTIME_NAMES = {
    Resolver.XNNPACK: "ai-edge-litert interpreter (CPU, XNNPACK)",
    Resolver.BUILTIN: "ai-edge-litert interpreter (CPU, builtin kernels)",
    Resolver.REFERENCE: "ai-edge-litert interpreter (CPU, reference kernels)",
}


_FAILED_NODE = re.compile(r"Node number (\d+) \((\w+)\) failed to (?:prepare|invoke)")


def blame_failing_operator(error: RuntimeRunError, model: FlatbufferModel) -> RuntimeRunError:
    """``error`` with the operator LiteRT names ("Node number 6 (STABLEHLO_SCATTER) failed to
    prepare") and the PyTorch module its output tensor came from; unchanged when it names none."""
    from ..graph.provenance import describe_location, operator_module

    found = _FAILED_NODE.search(str(error.__cause__ or error))
    index = int(found.group(1)) if found else -1
    if not 0 <= index < len(model.operators):
        return error
    op = model.operators[index]
    # its output's name, else (a model output is named after the signature) its inputs'
    names = [model.tensors[i].name for i in (*op.outputs, *op.inputs) if i >= 0]
    module = next((m for m in (operator_module(n, op.opcode) for n in names) if m is not None), None)
    where = describe_location(module.path, module.type_name, None) if module else ""
    unblamed = error.message.rstrip(".")
    blamed = RuntimeRunError(f"{unblamed}. The operator that failed is #{index} {op.opcode}{where}.", error.hint)
    # for operator_origins.name_failing_call, where the PyTorch module is known (the aten call, the line)
    blamed.failed_operator, blamed.unblamed = index, unblamed
    return blamed


class TFLiteRunner:
    """Runs one flatbuffer. ``run`` takes and returns arrays in signature order (a
    ``targets.base.Runner``; ``name`` is the runtime the parity report names)."""

    def __init__(
        self,
        model: FlatbufferModel | bytes,
        *,
        resolver: Resolver = Resolver.XNNPACK,
        num_threads: int | None = None,
        preserve_all_tensors: bool = False,
        delegates: Sequence[object] | None = None,
    ) -> None:
        # The model object was verified when read; bytes (a file, a converter's output, a compiled
        # Edge TPU model) are verified here first: the native interpreter may crash on a malformed buffer.
        self.model = model if isinstance(model, FlatbufferModel) else read_flatbuffer(model)
        self.name = _RUNTIME_NAMES[Resolver(resolver)]
        from ai_edge_litert.interpreter import Interpreter

        kwargs = {}
        if delegates:
            kwargs["experimental_delegates"] = list(delegates)
        # LiteRT's pybind layer raises ValueError or RuntimeError, and a delegate anything: all of
        # them mean this model cannot run here, not a bug in edge-export.
        try:
            with map_exceptions(
                {Exception: RuntimeRunError},
                "The LiteRT interpreter could not load the model: {error}",
                "The model may use an operator this LiteRT version lacks; run `edge-export inspect` on it.",
            ):
                self._interp = Interpreter(
                    model_content=self.model.data,
                    experimental_op_resolver_type=_resolver_type(resolver),
                    num_threads=num_threads,
                    experimental_preserve_all_tensors=preserve_all_tensors,
                    **kwargs,
                )
                self._interp.allocate_tensors()
        except RuntimeRunError as exc:
            raise blame_failing_operator(exc, self.model) from exc.__cause__
        self.inputs, self.outputs = self._io_tensors()

    def _io_tensors(self) -> tuple[list[IOTensor], list[IOTensor]]:
        interp = self._interp
        details = {d["index"]: d for d in interp.get_input_details() + interp.get_output_details()}
        # Subgraph order (forward()'s arguments, flattened outputs), named by the signature.
        in_pairs = list(zip(self.model.input_names, self.model.inputs))
        out_pairs = list(zip(self.model.output_names, self.model.outputs))

        def make(pairs):
            result = []
            for name, index in pairs:
                d = details[index]
                scale, zp = d.get("quantization", (0.0, 0))
                result.append(
                    IOTensor(
                        name=name,
                        index=index,
                        shape=tuple(int(s) for s in d["shape"]),
                        dtype=np.dtype(d["dtype"]).name,
                        scale=float(scale) if scale else None,
                        zero_point=int(zp) if scale else None,
                    )
                )
            return result

        return make(in_pairs), make(out_pairs)

    def run_raw(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Feed arrays already in the model's input dtypes; return outputs as stored."""
        if len(arrays) != len(self.inputs):
            raise RuntimeRunError(
                f"The flatbuffer has {len(self.inputs)} inputs but {len(arrays)} arrays were given."
            )
        with map_exceptions(
            {Exception: RuntimeRunError},  # as above: LiteRT's and numpy's casts raise several kinds
            "The LiteRT interpreter failed to run the model: {error}",
            "Check that the inputs match the shapes and dtypes the model was exported with.",
        ):
            for spec, arr in zip(self.inputs, arrays):
                self._interp.set_tensor(spec.index, np.ascontiguousarray(arr, dtype=spec.dtype))
            self._interp.invoke()
            return [np.array(self._interp.get_tensor(o.index)) for o in self.outputs]

    def quantize_inputs(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return to_model_inputs(self.inputs, arrays)

    def dequantize_outputs(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return from_model_outputs(self.outputs, arrays)

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Float in, float out: quantizes inputs and dequantizes outputs where the model is integer."""
        return self.dequantize_outputs(self.run_raw(self.quantize_inputs(arrays)))

    # Intermediate tensors, for per-layer parity (needs preserve_all_tensors=True).
    def tensor(self, index: int) -> np.ndarray:
        return np.array(self._interp.get_tensor(index))

    @property
    def interpreter(self):
        return self._interp


class CompiledModelRunner:
    """Runs one flatbuffer through LiteRT 2.x's CompiledModel API (what LiteRT 2.x apps call), on
    the CPU accelerator: the GPU accelerator finds no adapter on a host without a GPU and the NPU
    alone fails, so the host checks the API and its CPU path (XNNPACK), not a phone's GPU.

    A ``targets.base.Runner``: float in and float out, in signature order, quantizing and
    dequantizing like ``TFLiteRunner`` with the I/O scales the model object reads.
    """

    name = "ai-edge-litert CompiledModel (CPU accelerator, XNNPACK)"

    def __init__(self, model: FlatbufferModel | bytes, *, num_threads: int = 1) -> None:
        self.model = model if isinstance(model, FlatbufferModel) else read_flatbuffer(model)
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import CpuOptions, Options

        with map_exceptions(
            {Exception: RuntimeRunError},
            "LiteRT's CompiledModel could not load the model: {error}",
            "The model may use an operator this LiteRT version lacks; run `edge-export inspect` on it.",
        ):
            options = Options(HardwareAccelerator.CPU, cpu_options=CpuOptions(num_threads=num_threads))
            self._compiled = CompiledModel.from_buffer(self.model.data, options=options)
            signatures = self._compiled.get_signature_list()
            self._signature = next(iter(signatures))
            self._input_names = list(signatures[self._signature]["inputs"])
            self._output_names = list(signatures[self._signature]["outputs"])
            self._signature_index = self._compiled.get_signature_index(self._signature)
        self.inputs, self.outputs = self._io_tensors()

    def _io_tensors(self) -> tuple[list[IOTensor], list[IOTensor]]:
        # The signature's tensors are the subgraph's inputs/outputs; the model object's names pair
        # them (a model without a signature has none, and CompiledModel refuses it above).
        by_name = dict(zip(self.model.input_names, self.model.input_tensors))
        by_name.update(zip(self.model.output_names, self.model.output_tensors))

        def make(names):
            result = []
            for position, name in enumerate(names):
                t = by_name[name]
                quant = t.quant
                scale = float(quant.scales[0]) if quant is not None and len(quant.scales) == 1 and quant.scales[0] else None
                zero_point = int(quant.zero_points[0]) if scale is not None else None
                result.append(IOTensor(name=name, index=position, shape=tuple(t.shape), dtype=t.dtype, scale=scale, zero_point=zero_point))
            return result

        # Parity feeds and reads in subgraph order (forward()'s order): keep that order here.
        ins = [n for n in self.model.input_names if n in self._input_names]
        outs = [n for n in self.model.output_names if n in self._output_names]
        return make(ins), make(outs)

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(arrays) != len(self.inputs):
            raise RuntimeRunError(f"The flatbuffer has {len(self.inputs)} inputs but {len(arrays)} arrays were given.")
        with map_exceptions(
            {Exception: RuntimeRunError},
            "LiteRT's CompiledModel failed to run the model: {error}",
            "Check that the inputs match the shapes and dtypes the model was exported with.",
        ):
            feeds = to_model_inputs(self.inputs, arrays)
            input_map = {}
            for spec, arr in zip(self.inputs, feeds):
                buffer = self._compiled.create_input_buffer_by_name(self._signature, spec.name)
                buffer.write(np.ascontiguousarray(arr, dtype=spec.dtype))
                input_map[spec.name] = buffer
            output_map = {spec.name: self._compiled.create_output_buffer_by_name(self._signature, spec.name) for spec in self.outputs}
            self._compiled.run_by_name(self._signature, input_map, output_map)
            raw = []
            for spec in self.outputs:
                count = int(np.prod(spec.shape)) if spec.shape else 1
                raw.append(np.asarray(output_map[spec.name].read(count, np.dtype(spec.dtype))).reshape(spec.shape))
        return from_model_outputs(self.outputs, raw)
