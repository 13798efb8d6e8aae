"""Capture: every PyTorch module's output and every flatbuffer tensor's value, for one sample.

The PyTorch side
----------------
Forward pre-hooks and hooks on every submodule record the call stack, as scope keys spelled the
way litert-torch names tensors (``<class fullname>_<attribute name>`` per level below the root),
so that each module call gets the key its flatbuffer tensors carry, plus its output and the
moment it finished. A ``torch.export`` graph module (``ExportedProgram.module()``) has its
modules inlined, so hooks see nothing in it; there the nodes' own ``nn_module_stack`` gives the
keys and the last node under a module gives its output.

Outputs are copied when captured, so in-place ops (``out += identity``, ``ReLU(inplace=True)``)
later in the forward do not change them; identity of outputs is judged by storage and in-place
version (``tensor_identity``), which is what lets matching tell "returns the very tensor another
module returned" from "returns an equal value".

The flatbuffer side
-------------------
The flatbuffer runs with the reference kernels and every intermediate tensor kept, so each tensor
holds what its own op computed; int8/uint8/int16 tensors are dequantized with their own scale and
zero point (``read_flatbuffer_tensors``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InputSpecError, RuntimeRunError, map_exceptions
from ...flatbuffer import FlatbufferModel, TensorInfo
from ...graph.provenance import clean_module_path

__all__ = [
    "CapturedCall",
    "CapturedSample",
    "ModuleKey",
    "capture_graph_calls",
    "capture_module_calls",
    "capture_sample",
    "class_fullname",
    "graph_root_name",
    "is_exported_graph",
    "read_flatbuffer_tensors",
    "tensor_identity",
]

# A module's scope components below the root, e.g. ("m.Sequential_stem", "torch.nn.modules.conv.Conv2d_0").
ModuleKey = tuple[str, ...]

DEQUANTIZABLE_DTYPES = frozenset({"int8", "uint8", "int16"})
COMPARABLE_DTYPES = frozenset({"float32", "float16"}) | DEQUANTIZABLE_DTYPES


def class_fullname(cls: type) -> str:
    # Same spelling as litert_torch.backend.debuginfo._class_fullname.
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class CapturedCall:
    """What one module (one scope key) did in PyTorch on one sample."""

    key: tuple[str, ...]  # scope components below the root
    path: str
    module_type: str
    finished: int  # completion order of the module's last call
    output: Any  # a copy of the first tensor output of the last call (later in-place ops
    # such as ReLU(inplace=True) must not change what was captured)
    identity: bool = False  # returned one of its inputs unchanged (Dropout in eval, Identity)
    out_id: tuple | None = None  # tensor_identity of the output as returned
    in_id: tuple | None = None  # tensor_identity of the first tensor argument
    calls: int = 1
    keep: tuple = ()  # the original tensors, kept alive so that their storage is not reused


@dataclass
class CapturedSample:
    """Both sides of one sample: module calls by key, the model's outputs, the scope keys two
    modules share, and the flatbuffer's computed tensors (dequantized) by tensor index."""

    calls: dict[tuple[str, ...], CapturedCall]
    outputs: list
    ambiguous: set
    tensors: dict[int, np.ndarray]


def tensor_identity(t: Any) -> tuple | None:
    """What makes two captured tensors the same value: storage, view, and in-place version."""
    import torch

    if not isinstance(t, torch.Tensor):
        return None
    try:
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype), t._version)
    except RuntimeError:  # tensors without storage (e.g. sparse or meta)
        return None


def first_tensor(out: Any):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    items = out.values() if isinstance(out, Mapping) else out if isinstance(out, (tuple, list)) else ()
    for item in items:
        if isinstance(item, torch.Tensor):
            return item
    return None


def _flat_outputs(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    # litert-torch flattens tuple and dict results into the signature's outputs, in order.
    return [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]


def capture_module_calls(
    module: Any, inputs: tuple
) -> tuple[dict[tuple[str, ...], CapturedCall], list, dict, set]:
    """Run the module once with hooks; return calls by scope key, outputs, names, ambiguous keys."""
    import torch

    names = {id(m): n for n, m in module.named_modules()}
    stack: list[str] = []
    calls: dict[tuple[str, ...], CapturedCall] = {}
    owner: dict[tuple[str, ...], str] = {}  # key -> module path, to spot two modules with one key
    ambiguous: set[tuple[str, ...]] = set()
    counter = itertools.count()

    versions: list[int | None] = []

    def pre_hook(mod, args):
        name = names.get(id(mod), "")
        comp = class_fullname(type(mod)) + (("_" + name.split(".")[-1]) if name else "")
        stack.append(comp)
        first = first_tensor(tuple(args))
        versions.append(first._version if first is not None else None)

    def hook(mod, args, out):
        key = tuple(stack[1:])  # below the root, which may be renamed by wrappers
        stack.pop()
        version_before = versions.pop()
        path = names.get(id(mod), "")
        if owner.setdefault(key, path) != path:
            ambiguous.add(key)
        tensor = first_tensor(out)
        first_in = first_tensor(tuple(args))
        prev = calls.get(key)
        # Returning an argument is a no-op only if it was not modified in place (ReLU(inplace)).
        returned_input = tensor is not None and any(a is tensor for a in args)
        unchanged = first_in is not tensor or version_before == tensor._version
        calls[key] = CapturedCall(
            key=key,
            path=path,
            module_type=type(mod).__name__,
            finished=next(counter),
            output=tensor.detach().clone() if tensor is not None else None,
            identity=returned_input and unchanged,
            out_id=tensor_identity(tensor),
            in_id=tensor_identity(first_in),
            calls=(prev.calls + 1) if prev else 1,
            keep=(tensor, first_in),
        )

    handles = []
    for _, sub in module.named_modules():
        handles.append(sub.register_forward_pre_hook(pre_hook))
        handles.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            out = module(*inputs)
    finally:
        for h in handles:
            h.remove()
    return calls, _flat_outputs(out), names, ambiguous


def is_exported_graph(module: Any) -> bool:
    """Whether ``module`` is a torch.export graph whose nodes carry ``nn_module_stack``."""
    import torch

    if not isinstance(module, torch.fx.GraphModule):
        return False
    return any(n.meta.get("nn_module_stack") for n in module.graph.nodes if n.op == "call_function")


def _stack_component(path: str, layer: Any) -> str:
    # Same spelling as litert_torch.backend.debuginfo._get_hierarchy.
    layer_str = layer if isinstance(layer, str) else class_fullname(layer)
    return layer_str + (("_" + path.split(".")[-1]) if path else "")


def capture_graph_calls(gm: Any, inputs: tuple) -> tuple[dict[tuple[str, ...], CapturedCall], list, str, set]:
    """Values of a torch.export graph (``ExportedProgram.module()``), grouped by nn_module_stack.

    Hooks see nothing inside such a graph (its modules are inlined), but every node records the
    module stack it came from, which is what litert-torch names tensors after. A module's output
    is the value of the last node under it; its input is the first argument of its first node.
    """
    import torch

    values: dict[Any, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n] = result
            return result

    with torch.no_grad():
        out = Recorder(gm).run(*inputs)
    first: dict[tuple[str, ...], Any] = {}
    last: dict[tuple[str, ...], tuple[int, Any]] = {}
    meta: dict[tuple[str, ...], tuple[str, str]] = {}
    ambiguous: set[tuple[str, ...]] = set()
    for idx, n in enumerate(gm.graph.nodes):
        stack = list((n.meta.get("nn_module_stack") or {}).values()) if n.op == "call_function" else []
        if not stack:
            continue
        comps = [_stack_component(path, layer) for path, layer in stack[1:]]
        for depth in range(len(comps) + 1):
            key = tuple(comps[:depth])
            path, layer = stack[depth]
            path = clean_module_path(path)
            type_name = (layer if isinstance(layer, str) else layer.__qualname__).rsplit(".", 1)[-1]
            if meta.setdefault(key, (path, type_name))[0] != path:
                ambiguous.add(key)
            first.setdefault(key, n)
            last[key] = (idx * 1000 + (999 - depth), n)  # a parent finishes after its last child

    calls: dict[tuple[str, ...], CapturedCall] = {}
    for key, (finished, node) in last.items():
        tensor = first_tensor(values.get(node))
        arg0 = first[key].args[0] if first[key].args else None
        first_in = first_tensor(values.get(arg0)) if isinstance(arg0, torch.fx.Node) else None
        calls[key] = CapturedCall(
            key=key,
            path=meta[key][0],
            module_type=meta[key][1],
            finished=finished,
            output=tensor.detach() if tensor is not None else None,  # a functional graph
            out_id=tensor_identity(tensor),
            in_id=tensor_identity(first_in),
            keep=(tensor, first_in),
        )
    outputs = _flat_outputs(out)
    if () in calls and outputs:
        # The model's result, even when its last node is not.
        calls[()].output, calls[()].out_id = outputs[0].detach(), tensor_identity(outputs[0])
    return calls, outputs, graph_root_name(gm), ambiguous


def graph_root_name(gm: Any) -> str:
    """The root scope component of a torch.export graph's nodes ("" when no node has a stack)."""
    for n in gm.graph.nodes:
        stack = list((n.meta.get("nn_module_stack") or {}).values()) if n.op == "call_function" else []
        if stack:
            return _stack_component("", stack[0][1])
    return ""


def as_model_array(a: Any) -> np.ndarray:
    arr = np.asarray(a)
    # float64 samples (numpy's default) would make PyTorch run in double.
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr


def check_input_shape(i: int, got: tuple, want: tuple, permuted: bool) -> None:
    if tuple(got) == tuple(want):
        return
    hint = "Give per-layer parity the same input shapes the model was exported with."
    if not permuted and len(got) >= 3 and (got[0], *got[2:], got[1]) == tuple(want):
        hint = (
            f"The flatbuffer takes input {i} channels-last (NHWC): pass channels_last_inputs=({i},) "
            "and keep the samples in PyTorch's NCHW layout."
        )
    elif permuted and len(got) >= 3 and (got[0], got[-1], *got[1:-1]) == tuple(want):
        hint = f"The flatbuffer takes input {i} channels-first: leave it out of channels_last_inputs."
    raise InputSpecError(
        f"Input {i} has shape {list(got)} for LiteRT but the flatbuffer expects {list(want)}.", hint
    )


def dequantize(arr: np.ndarray, info: TensorInfo) -> np.ndarray | None:
    """A flatbuffer tensor as float32 (None for per-channel quantized activations)."""
    if info.dtype in DEQUANTIZABLE_DTYPES:
        if info.quant is None or not info.quant.scales or info.quant.per_channel:
            return None
        scale, zero_point = info.quant.scales[0], info.quant.zero_points[0]
        return ((arr.astype(np.float64) - zero_point) * scale).astype(np.float32)
    return arr.astype(np.float32)


def read_flatbuffer_tensors(runner: Any, fm: FlatbufferModel) -> dict[int, np.ndarray]:
    """Every computed tensor of the last run, dequantized, by tensor index."""
    out = {}
    for op in fm.operators:
        for t in op.outputs:
            if t < 0 or fm.tensors[t].dtype not in COMPARABLE_DTYPES:
                continue
            with map_exceptions(
                {Exception: RuntimeRunError},  # a tensor the interpreter freed despite preserve_all_tensors
                f"LiteRT did not keep intermediate tensor {fm.tensors[t].name!r}: {{error}}",
                "Run with the reference resolver and preserve_all_tensors=True.",
            ):
                arr = runner.tensor(t)
            deq = dequantize(arr, fm.tensors[t])
            if deq is not None:
                out[t] = deq
    return out


def capture_sample(
    module: Any,
    sample: tuple,
    s_idx: int,
    runner: Any,
    fm: FlatbufferModel,
    *,
    from_graph: bool,
    channels_last_inputs: tuple[int, ...],
) -> CapturedSample:
    """Run one sample through PyTorch (hooks, or the graph's nodes) and through LiteRT."""
    import torch

    t_inputs = tuple(torch.as_tensor(as_model_array(a)) for a in sample)
    with map_exceptions(
        {Exception: InputSpecError},  # the user's forward() runs here: its errors are the user's
        f"The PyTorch model failed on sample {s_idx}: {{error}}",
        "Check that the samples match the model's input shapes and dtypes.",
    ):
        if from_graph:
            calls, outs, _, amb = capture_graph_calls(module, t_inputs)
        else:
            calls, outs, _, amb = capture_module_calls(module, t_inputs)
    feed = []
    for i, arr in enumerate(sample):
        arr = as_model_array(arr)
        if i in channels_last_inputs:
            arr = np.transpose(arr, (0, *range(2, arr.ndim), 1))
        check_input_shape(i, arr.shape, runner.inputs[i].shape, i in channels_last_inputs)
        feed.append(arr)
    runner.run_raw(runner.quantize_inputs(feed))
    return CapturedSample(calls, outs, amb, read_flatbuffer_tensors(runner, fm))
