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

The same rewrites on an exported graph are the FX pass ``passes/fx/rewrite_ops_for_edgetpu_pass.py``;
the reordering is the flatbuffer pass ``passes/flatbuffer/reorder_operators_for_edgetpu_pass.py``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ...graph.applied_rewrites import AppliedRewrite, EdgeTPUPreparation
from ...flatbuffer import FlatbufferModel

__all__ = [
    "AppliedRewrite",
    "EdgeTPUPreparation",
    "prepare_module_for_edgetpu",
    "reorder_for_edgetpu",
]


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

    from ...passes.fx.rewrite_ops_for_edgetpu_pass import rewrite_ops_for_edgetpu_pass

    if isinstance(module, torch.fx.GraphModule):
        return rewrite_ops_for_edgetpu_pass(module)
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
            graph_prep = rewrite_ops_for_edgetpu_pass(graph)
            if graph_prep.rewrites:
                module = graph_prep.module
                rewrites.extend(graph_prep.rewrites)
    return EdgeTPUPreparation(module=module, rewrites=tuple(rewrites))


# ---- flatbuffer level ---------------------------------------------------------------------------


def reorder_for_edgetpu(model: FlatbufferModel) -> tuple[FlatbufferModel, bool]:
    """Move every operator that maps (and depends only on mapped operators) before the first that does
    not. Returns ``(new_model, changed)``; the graph computes the same values in a valid order.

    The Edge TPU target's one call of the flatbuffer pass ``reorder_operators_for_edgetpu_pass``:
    the checker's verdict on ``source`` says which operators map.
    """
    from functools import partial

    from ...passes.flatbuffer import reorder_operators_for_edgetpu_pass, run_flatbuffer_passes
    from .checks import check_edgetpu

    report = check_edgetpu(model)
    if report.first_unmapped is None:
        return model, False
    supported = [mapping.supported for mapping in report.ops]
    result = run_flatbuffer_passes(
        model, [partial(reorder_operators_for_edgetpu_pass, supported=supported)], origin="the reordered model"
    )
    return result.model, result.modified
