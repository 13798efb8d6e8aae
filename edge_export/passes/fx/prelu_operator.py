"""``torch.ops.edge_export.prelu``: a PReLU that litert-torch lowers to LiteRT's PRELU operator.

litert-torch decomposes ``aten.prelu`` into ``relu(x) - w * relu(-x)`` (RELU, MUL, MUL, SUB) and
has no composite for it; LiteRT, TFLite Micro, the GPU delegate and the Edge TPU all have a PRELU
kernel. This operator's lowering is a ``stablehlo.custom_call`` named ``tfl.prelu``, which LiteRT's
converter turns into that builtin (the carrier litert-torch's own ``torch.ops.tfl.*`` operators
use). Its semantics are LiteRT's, not PyTorch's: ``alpha`` has one dimension less than ``x`` and
broadcasts against its trailing dimensions (channels last). PT2E leaves an operator it does not
know in float, so :func:`annotate_prelu_operators` gives it int8 input, alpha and output specs.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["prelu_operator", "annotate_prelu_operators"]


@functools.cache
def prelu_operator() -> Any:
    """The registered ``torch.ops.edge_export.prelu.default`` (registered once per process, with
    its litert-torch lowering)."""
    import torch

    # the schema is spelled out: this module's annotations are strings, which infer_schema refuses
    @torch.library.custom_op("edge_export::prelu", mutates_args=(), schema="(Tensor x, Tensor alpha) -> Tensor")
    def prelu(x: Any, alpha: Any) -> Any:
        return torch.where(x > 0, x, alpha * x)  # aten.prelu's own formula, alpha broadcast

    @prelu.register_fake
    def _(x: Any, alpha: Any) -> Any:
        return torch.empty_like(x)

    _register_lowering(torch.ops.edge_export.prelu.default)
    return torch.ops.edge_export.prelu.default


def _register_lowering(op: Any) -> None:
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo
    from litert_torch.backend.lowerings import registry
    from litert_torch.backend.lowerings import utils as lowering_utils

    @registry.lower(op)
    def _lower_prelu(lctx: Any, x: Any, alpha: Any) -> Any:
        return stablehlo.custom_call(
            result=lowering_utils.node_meta_to_ir_types(lctx.node),
            inputs=[x, alpha],
            call_target_name=ir.StringAttr.get("tfl.prelu"),
            has_side_effect=ir.BoolAttr.get(False),
            backend_config=ir.StringAttr.get(str(ir.DictAttr.get({}))),
        )


def _alpha_spec() -> Any:
    """LiteRT's int8 PRELU takes one scale for alpha (prelu.cc): symmetric per tensor."""
    import torch
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantizer import QuantizationSpec

    return QuantizationSpec(
        dtype=torch.int8, quant_min=-127, quant_max=127, qscheme=torch.per_tensor_symmetric,
        observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2**-12),
    )


def annotate_prelu_operators(graph_module: Any, config: Any) -> int:
    """Annotate every edge_export.prelu node for PT2E: input and output as ``config``'s
    activations, alpha per tensor. In place; returns how many nodes were annotated."""
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation

    activation = getattr(config, "input_activation", None)
    if activation is None or getattr(activation, "is_dynamic", False):  # weight-only or dynamic: PRELU has no weight
        return 0
    count = 0
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or str(node.target) != "edge_export.prelu.default":
            continue
        x, alpha = node.args[:2]
        node.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map={x: config.input_activation, alpha: _alpha_spec()},
            output_qspec=config.output_activation, _annotated=True,
        )
        count += 1
    return count
