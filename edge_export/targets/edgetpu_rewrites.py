"""What the exporter changes so that standard networks map onto the Edge TPU.

Two levels:

* ``prepare_module_for_edgetpu`` swaps PyTorch submodules for numerically equivalent ones that lower to
  operators the Edge TPU runs and that PT2E quantizes fully (no float islands):
    - ``MaxPool2d(padding>0)`` lowers to PADV2 with -inf padding (not on the TPU's list). Replicate
      padding built from SLICE + CONCATENATION gives exactly the same maxima (the padded values
      repeat an edge element that is in the same window) and maps.
    - A stateless activation module called more than once (torchvision's ResNet reuses ``self.relu``)
      makes PT2E's add+relu/conv+relu patterns see one partition with several outputs; it then leaves
      the residual ADDs in float (DEQUANTIZE/ADD/QUANTIZE islands). Each call gets its own copy.
    - ``Hardswish``/``Hardsigmoid`` (HARD_SWISH is not supported) become ``x * relu6(x + 3) / 6``.
    - ``GELU`` (not supported, and left float by PT2E) becomes its tanh form written with a
      sigmoid, ``x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3))``: the same function as
      ``GELU(approximate='tanh')``, within 1e-3 of the exact GELU, and made of MUL/ADD/LOGISTIC.
    - ``SiLU`` becomes ``x * sigmoid(x)`` (LOGISTIC + MUL).
* ``reorder_for_edgetpu`` reorders a flatbuffer's operators (a valid topological order) so that
  every operator that can map and depends only on mapped operators runs before the first one that
  cannot: the compiler cuts the graph once, at the first unsupported operator in execution order.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from ..errors import InternalError
from ..flatbuffer import read_flatbuffer
from ..flatbuffer_packing import pack_model
from ..reports.serialize import json_field

__all__ = [
    "AppliedRewrite",
    "EdgeTPUPreparation",
    "prepare_module_for_edgetpu",
    "reorder_for_edgetpu",
]


@dataclass(frozen=True)
class AppliedRewrite:
    module_path: str
    kind: str
    why: str


@dataclass(frozen=True)
class EdgeTPUPreparation:
    module: Any = json_field(skip=True)  # the rewritten copy; the caller's module is not changed
    rewrites: tuple[AppliedRewrite, ...]


def _replacement_classes() -> dict[str, type]:
    """Module classes are built on first use so that torch is imported only when needed."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class ReplicatePadMaxPool2d(nn.Module):
        """MaxPool2d whose padding repeats edge values (SLICE + CONCATENATION) instead of -inf (PADV2).

        For max pooling with padding < kernel size the two give identical results: every window
        that covers padding also covers the edge element the padding repeats.
        """

        def __init__(self, kernel_size: Any, stride: Any, padding: tuple[int, int]) -> None:
            super().__init__()
            self.pool = nn.MaxPool2d(kernel_size, stride, 0)
            self.pad_h, self.pad_w = padding

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, w = self.pad_h, self.pad_w
            if h:
                x = torch.cat([x[:, :, :1]] * h + [x] + [x[:, :, -1:]] * h, dim=2)
            if w:
                x = torch.cat([x[:, :, :, :1]] * w + [x] + [x[:, :, :, -1:]] * w, dim=3)
            return self.pool(x)

    class PerCallModule(nn.Module):
        """Routes the k-th call of a reused module to its own copy, so each call is its own partition."""

        def __init__(self, module: nn.Module, calls: int) -> None:
            super().__init__()
            self.copies = nn.ModuleList(copy.deepcopy(module) for _ in range(calls))
            self._next = 0

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            index = self._next
            self._next = (index + 1) % len(self.copies)
            return self.copies[index](*args, **kwargs)

    class HardSwishAsRelu6(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * F.hardtanh(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)

    class HardSigmoidAsRelu6(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.hardtanh(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)

    class GeluAsSigmoid(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inner = (x + 0.044715 * (x * x * x)) * (2.0 * math.sqrt(2.0 / math.pi))
            return x * torch.sigmoid(inner)

    class SiluAsSigmoid(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.sigmoid(x)

    return {
        "ReplicatePadMaxPool2d": ReplicatePadMaxPool2d,
        "PerCallModule": PerCallModule,
        "HardSwishAsRelu6": HardSwishAsRelu6,
        "HardSigmoidAsRelu6": HardSigmoidAsRelu6,
        "GeluAsSigmoid": GeluAsSigmoid,
        "SiluAsSigmoid": SiluAsSigmoid,
    }


def _stateless_activation_types() -> tuple[type, ...]:
    from torch import nn

    return (nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.Sigmoid, nn.Tanh, nn.Identity, nn.Dropout)


def _set_submodule(root: Any, path: str, new: Any) -> None:
    parent_path, _, attr = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    setattr(parent, attr, new)


def _count_calls(module: Any, example_inputs: tuple) -> dict[str, int]:
    import torch

    counts: dict[str, int] = {}
    handles = []
    for name, sub in module.named_modules():
        if not name:
            continue

        def hook(_m: Any, _i: Any, _o: Any, name: str = name) -> None:
            counts[name] = counts.get(name, 0) + 1

        handles.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            module(*example_inputs)
    finally:
        for h in handles:
            h.remove()
    return counts


def prepare_module_for_edgetpu(module: Any, example_inputs: tuple | None = None) -> EdgeTPUPreparation:
    """Return a rewritten copy of ``module`` that lowers to Edge TPU operators (see the module doc).

    ``example_inputs`` (one forward pass, no gradients) lets the reused-activation rewrite count
    calls; without them that rewrite is skipped.
    """
    import torch
    from torch import nn

    if isinstance(module, torch.fx.GraphModule):
        return _prepare_graph_for_edgetpu(module)
    classes = _replacement_classes()
    module = copy.deepcopy(module).eval()
    rewrites: list[AppliedRewrite] = []

    for path, sub in list(module.named_modules()):
        if not path:
            continue
        if type(sub) is nn.MaxPool2d:
            pad = sub.padding if isinstance(sub.padding, tuple) else (sub.padding, sub.padding)
            dilation = sub.dilation if isinstance(sub.dilation, tuple) else (sub.dilation, sub.dilation)
            if any(pad) and not sub.ceil_mode and not sub.return_indices and dilation == (1, 1):
                _set_submodule(module, path, classes["ReplicatePadMaxPool2d"](sub.kernel_size, sub.stride, tuple(pad)))
                rewrites.append(
                    AppliedRewrite(path, "maxpool-replicate-padding", "MaxPool2d padding lowers to PADV2 (-inf), not supported")
                )
        elif type(sub) is nn.Hardswish:
            _set_submodule(module, path, classes["HardSwishAsRelu6"]())
            rewrites.append(AppliedRewrite(path, "hardswish-as-relu6", "HARD_SWISH is not supported"))
        elif type(sub) is nn.Hardsigmoid:
            _set_submodule(module, path, classes["HardSigmoidAsRelu6"]())
            rewrites.append(AppliedRewrite(path, "hardsigmoid-as-relu6", "HARD_SWISH/hardsigmoid is not supported"))
        elif type(sub) is nn.GELU:
            _set_submodule(module, path, classes["GeluAsSigmoid"]())
            rewrites.append(
                AppliedRewrite(path, "gelu-as-sigmoid", "GELU is not supported and PT2E leaves it in float (tanh form, error < 1e-3)")
            )
        elif type(sub) is nn.SiLU:
            _set_submodule(module, path, classes["SiluAsSigmoid"]())
            rewrites.append(AppliedRewrite(path, "silu-as-sigmoid", "SiLU is written as LOGISTIC + MUL"))

    if example_inputs is not None:
        counts = _count_calls(module, tuple(example_inputs))
        stateless = _stateless_activation_types()
        for path, sub in list(module.named_modules()):
            calls = counts.get(path, 0)
            if path and calls > 1 and type(sub) in stateless:
                _set_submodule(module, path, classes["PerCallModule"](sub, calls))
                rewrites.append(
                    AppliedRewrite(
                        path,
                        "split-reused-activation",
                        f"{type(sub).__name__} is called {calls} times; PT2E then leaves the adds it follows in float",
                    )
                )
        # Functional calls in forward() (x.mean((2, 3)), F.hardswish, ...) are only visible in the
        # traced graph: export once and apply the graph-level rewrites as well.
        try:
            graph = torch.export.export(module, tuple(example_inputs)).module()
        except Exception:  # tracing problems are reported by the conversion stage itself
            graph = None
        if graph is not None:
            graph_prep = _prepare_graph_for_edgetpu(graph)
            if graph_prep.rewrites:
                module = graph_prep.module
                rewrites.extend(graph_prep.rewrites)
    return EdgeTPUPreparation(module=module, rewrites=tuple(rewrites))


# ---- graph level (an ExportedProgram's GraphModule has no submodules to swap) -------------------


def _replicate_pad_max_pool2d(x: Any, kernel_size: Any, stride: Any, padding: Any) -> Any:
    """max_pool2d with edge-replicating padding (SLICE + CONCATENATION instead of PADV2); the same
    values as -inf padding whenever padding < kernel size (see ReplicatePadMaxPool2d)."""
    import torch

    h, w = padding
    if h:
        x = torch.cat([x[:, :, :1]] * h + [x] + [x[:, :, -1:]] * h, dim=2)
    if w:
        x = torch.cat([x[:, :, :, :1]] * w + [x] + [x[:, :, :, -1:]] * w, dim=3)
    return torch.nn.functional.max_pool2d(x, kernel_size, stride or kernel_size, 0)


def _hardswish(x: Any) -> Any:
    import torch.nn.functional as F

    return x * F.hardtanh(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)


def _hardsigmoid(x: Any) -> Any:
    import torch.nn.functional as F

    return F.hardtanh(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)


def _gelu_sigmoid(x: Any, approximate: str = "none") -> Any:
    import torch

    return x * torch.sigmoid((x + 0.044715 * (x * x * x)) * (2.0 * math.sqrt(2.0 / math.pi)))


def _silu(x: Any) -> Any:
    import torch

    return x * torch.sigmoid(x)


def _spatial_mean(x: Any, keepdim: bool) -> Any:
    """Global average over H, W as AVERAGE_POOL_2D (+ RESHAPE): a MEAN over the NCHW axes 2, 3 is not
    an x/y reduction once the converter has moved the tensor, and the Edge TPU rejects it."""
    import torch.nn.functional as F

    y = F.avg_pool2d(x, (int(x.shape[2]), int(x.shape[3])))
    return y if keepdim else y.flatten(2).squeeze(2)


def _node_module_path(node: Any) -> str:
    from ..provenance import node_module

    found = node_module(node)
    if found is None:
        return f"forward() ({node.name})"
    return found.path or node.name


def _is_global_spatial(node: Any) -> bool:
    """mean(x, [2, 3]) on a 4-D NCHW tensor with a known shape."""
    x = node.args[0]
    val = getattr(x, "meta", {}).get("val")
    if val is None or val.dim() != 4:
        return False
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None:
        return False
    return sorted(int(d) % 4 for d in dims) == [2, 3] and node.kwargs.get("dtype") is None


def _prepare_graph_for_edgetpu(module: Any) -> EdgeTPUPreparation:
    """The same rewrites as for an nn.Module, as an FX pass over the aten calls. Each replaced node
    keeps its metadata so the flatbuffer's tensor names still carry the module path."""
    import torch

    aten = torch.ops.aten
    gm = copy.deepcopy(module)
    rewrites: list[AppliedRewrite] = []
    activations = {
        aten.hardswish.default: (_hardswish, "hardswish-as-relu6", "HARD_SWISH is not supported"),
        aten.hardsigmoid.default: (_hardsigmoid, "hardsigmoid-as-relu6", "hardsigmoid is not supported"),
        aten.gelu.default: (
            _gelu_sigmoid,
            "gelu-as-sigmoid",
            "GELU is not supported and PT2E leaves it in float (tanh form, error < 1e-3)",
        ),
        aten.silu.default: (_silu, "silu-as-sigmoid", "SiLU is written as LOGISTIC + MUL"),
    }
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.max_pool2d.default:
            args = list(node.args) + [None] * (6 - len(node.args))
            x, kernel, stride, padding, dilation, ceil_mode = args[:6]
            padding = list(padding or [0, 0])
            padding = padding * 2 if len(padding) == 1 else padding
            dilation = list(dilation or [1, 1])
            if any(padding) and not ceil_mode and all(d == 1 for d in dilation):
                node.target = _replicate_pad_max_pool2d
                node.args = (x, kernel, stride, tuple(padding))
                node.kwargs = {}
                rewrites.append(
                    AppliedRewrite(
                        _node_module_path(node),
                        "maxpool-replicate-padding",
                        "max_pool2d padding lowers to PADV2 (-inf), not supported",
                    )
                )
        elif node.target is aten.mean.dim and _is_global_spatial(node):
            # (adaptive_avg_pool2d is left alone: it already lowers to an x/y MEAN, and PT2E's
            # annotator for it insists on seeing the original op)
            keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
            node.target = _spatial_mean
            node.args = (node.args[0], keepdim)
            node.kwargs = {}
            rewrites.append(
                AppliedRewrite(
                    _node_module_path(node),
                    "global-mean-as-avgpool",
                    "a mean over H, W lowers to MEAN on non-x/y axes; AVERAGE_POOL_2D maps",
                )
            )
        elif node.target in activations:
            fn, kind, why = activations[node.target]
            node.target = fn
            node.args = node.args[:1]
            node.kwargs = {}
            rewrites.append(AppliedRewrite(_node_module_path(node), kind, why))
    gm.graph.lint()
    gm.recompile()
    return EdgeTPUPreparation(module=gm, rewrites=tuple(rewrites))


# ---- flatbuffer level ---------------------------------------------------------------------------


def reorder_for_edgetpu(data: bytes) -> tuple[bytes, bool]:
    """Move every operator that maps (and depends only on mapped operators) before the first that does
    not. Returns ``(new_bytes, changed)``; the graph computes the same values in a valid order."""
    from ai_edge_litert.tools import flatbuffer_utils

    from .edgetpu import check_edgetpu

    model = read_flatbuffer(data)
    report = check_edgetpu(model, data)
    if report.first_unmapped is None:
        return data, False
    graph_inputs = set(model.inputs)
    producer: dict[int, int] = {}
    for op in model.operators:
        for t in op.outputs:
            producer[t] = op.index
    prefix: list[int] = []
    in_prefix: set[int] = set()
    for op in model.operators:
        # Boundary QUANTIZE/DEQUANTIZE count as supported: they never cut the graph.
        if not report.ops[op.index].supported:
            continue
        deps = {producer[t] for t in op.inputs if t >= 0 and t in producer and t not in graph_inputs}
        if deps <= in_prefix:
            prefix.append(op.index)
            in_prefix.add(op.index)
    order = prefix + [op.index for op in model.operators if op.index not in in_prefix]
    if order == list(range(len(model.operators))):
        return data, False

    model_t = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    sg = model_t.subgraphs[0]
    if len(sg.operators) != len(order):
        raise InternalError("The operator count of the flatbuffer changed while reordering it.")
    sg.operators = [sg.operators[i] for i in order]
    return pack_model(model_t, source=data), True
