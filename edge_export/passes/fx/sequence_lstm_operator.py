"""``edge_export::sequence_lstm``: one LSTM layer in one direction, a PyTorch operator that
litert-torch lowers to LiteRT's fused ``tfl.unidirectional_sequence_lstm`` (one operator for the
whole sequence).

litert-torch has no lowering of ``aten.lstm``: it decomposes it step by step (a 3-layer LSTM over
160 frames came out as 7,684 operators and took 11 minutes to convert). The lowering registered
here builds the TFL operator itself in the MLIR module litert-torch hands to the LiteRT converter:
the weights split by gate (PyTorch stacks them i, f, g, o; LiteRT takes one tensor per gate), the
two biases summed, no peephole, projection or layer norm (``tfl.no_value``). PyTorch's and
LiteRT's cells compute the same thing (sigmoid gates, tanh cell and output activation), so the
float model agrees to float rounding.

The operator's state operands are LiteRT *variable* tensors the kernel overwrites with the final
state; left as the converter writes them, every invocation after the first starts from the previous
one's state (``reset_lstm_states_pass`` gives each one a FILL that resets it). The eager kernel is
PyTorch's own ``torch.lstm`` for one layer, so tracing and FX interpretation compute what
``nn.LSTM`` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sequence_lstm_operator"]

_OPERATOR = "edge_export::sequence_lstm"
_SCHEMA = "(Tensor x, Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh, Tensor? h0, Tensor? c0, bool batch_first) -> Tensor"
_registered: list[Any] = []


def sequence_lstm_operator() -> Any:
    """``torch.ops.edge_export.sequence_lstm.default``, registered (with its lowering) on first use:
    ``(x, w_ih, w_hh, b_ih, b_hh, h0, c0, batch_first) -> output``; x is [B, T, I] when
    batch_first, else [T, B, I]; w_ih [4H, I], w_hh [4H, H], b_ih and b_hh [4H] or None (no bias);
    h0, c0 [B, H] or None (zeros). The biases come apart and are summed in the lowering, where the
    converter folds the sum: summed in the graph, PT2E quantized the sum and the conversion failed."""
    if not _registered:
        _registered.append(_register())
    return _registered[0]


def _register() -> Any:
    import torch

    @torch.library.custom_op(_OPERATOR, mutates_args=(), schema=_SCHEMA)  # a schema: annotations are strings here
    def sequence_lstm(x, w_ih, w_hh, b_ih, b_hh, h0, c0, batch_first):
        batch = x.shape[0 if batch_first else 1]
        zeros = x.new_zeros((1, batch, w_hh.shape[1]))
        hx = (zeros if h0 is None else h0.unsqueeze(0), zeros if c0 is None else c0.unsqueeze(0))
        none = w_ih.new_zeros(w_ih.shape[0])
        params = [w_ih, w_hh, none if b_ih is None else b_ih, none if b_hh is None else b_hh]
        return torch.lstm(x, hx, params, True, 1, 0.0, False, False, batch_first)[0].contiguous()

    @sequence_lstm.register_fake
    def _(x, w_ih, w_hh, b_ih, b_hh, h0, c0, batch_first):
        return x.new_empty((*x.shape[:2], w_hh.shape[1]))

    _register_lowering(torch.ops.edge_export.sequence_lstm.default)
    return torch.ops.edge_export.sequence_lstm.default


def _register_lowering(operator: Any) -> None:
    from litert_torch.backend.lowerings import registry

    registry.lower(operator)(_lower_sequence_lstm)


def _gate_slices(value: Any, hidden: int) -> list[Any]:
    """The four gates' rows (i, f, g, o) of a [4H, ...] constant; the converter folds the slices."""
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    shape = list(ir.RankedTensorType(value.type).shape)
    rest = shape[1:]
    return [
        stablehlo.slice(value, ir.DenseI64ArrayAttr.get([k * hidden] + [0] * len(rest)),
                        ir.DenseI64ArrayAttr.get([(k + 1) * hidden] + rest), ir.DenseI64ArrayAttr.get([1] * len(shape)))
        for k in range(4)
    ]


def _zero_state(batch: int, hidden: int) -> Any:
    import numpy as np
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    return stablehlo.constant(ir.DenseElementsAttr.get(np.zeros((batch, hidden), np.float32)))


def _bias(b_ih: Any, b_hh: Any, gates: int) -> Any:
    import numpy as np
    from litert_converter.mlir import ir
    from litert_converter.mlir.dialects import stablehlo

    present = [b for b in (b_ih, b_hh) if b is not None]
    if not present:
        return stablehlo.constant(ir.DenseElementsAttr.get(np.zeros((gates,), np.float32)))
    return present[0] if len(present) == 1 else stablehlo.add(*present)


def _lower_sequence_lstm(lctx: Any, x: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, h0: Any, c0: Any,
                         batch_first: bool) -> Any:
    from litert_converter.mlir import ir

    out = lctx.node.meta["val"]
    batch, hidden = int(out.shape[0 if batch_first else 1]), int(out.shape[-1])
    f32 = ir.F32Type.get()
    none = ir.Operation.create("tfl.no_value", results=[ir.NoneType.get()], attributes={"value": ir.UnitAttr.get()}).result
    h0 = _zero_state(batch, hidden) if h0 is None else h0
    c0 = _zero_state(batch, hidden) if c0 is None else c0
    # Operand order of tfl.unidirectional_sequence_lstm: input, 4 input weights, 4 recurrent
    # weights, 3 peephole weights, 4 gate biases, projection weights and bias, the two states,
    # 4 layer-norm coefficients.
    operands = [x, *_gate_slices(w_ih, hidden), *_gate_slices(w_hh, hidden), none, none, none,
                *_gate_slices(_bias(b_ih, b_hh, 4 * hidden), hidden), none, none, h0, c0, none, none, none, none]
    attributes = {
        "fused_activation_function": ir.StringAttr.get("TANH"),
        "time_major": ir.BoolAttr.get(not batch_first),
        "cell_clip": ir.FloatAttr.get(f32, 0.0),
        "proj_clip": ir.FloatAttr.get(f32, 0.0),
    }
    result = ir.RankedTensorType.get([int(d) for d in out.shape], f32)
    return ir.Operation.create("tfl.unidirectional_sequence_lstm", results=[result], operands=operands,
                               attributes=attributes, loc=lctx.loc).result
