"""Rewrite ``nn.LSTM`` (``aten.lstm``) as LiteRT's fused UNIDIRECTIONAL_SEQUENCE_LSTM, one per layer
and direction (``sequence_lstm_operator``).

litert-torch unrolls an LSTM into its cell's operators once per time step: a speaker encoder's
3-layer LSTM over 160 frames became 7,684 operators, took 11 minutes to convert, and its dynamic
int8 errors compounded over the steps. Fused, the operator count and the conversion time grow with
the layers, not the sequence. A bidirectional layer is two fused operators, the second over the
time-reversed input (REVERSE_V2), their outputs concatenated; the final hidden state h_n is each
direction's output at its last step.

The fused form cannot express every LSTM; these are left unrolled, each with a note in the report:
``proj_size`` (LiteRT's projection differs), dropout in training mode, weights computed at run time,
a non-float32 input, a returned or used final cell state ``c_n`` (the fused operator outputs only
the sequence), and an initial state that is a constant other than zeros or the same tensor for h0
and c0 (the kernel keeps its state in variable tensors). Packed sequences never get here:
torch.export cannot trace an LSTM over a PackedSequence (its batch sizes are data).
``nn.GRU`` stays unrolled: LiteRT has no fused GRU operator (its builtins have only the LSTM and
plain RNN sequence operators).
"""

from __future__ import annotations

from typing import Any

from .rewrites import FxRewrite, call_arguments, node_location

__all__ = ["rewrite_lstms_as_sequence_lstm_pass"]

_FUSED = "nn.LSTM as UNIDIRECTIONAL_SEQUENCE_LSTM"
_UNROLLED_WHY = "litert-torch unrolls it into the cell's operators once per time step"
_ZEROS = ("aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default")


def lstm_as_sequence_lstm(x: Any, hx: list, params: list, has_biases: bool, num_layers: int,
                          bidirectional: bool, batch_first: bool) -> tuple[Any, Any]:
    """``aten.lstm.input``'s (output, h_n) through one fused operator per layer and direction."""
    import torch

    from .sequence_lstm_operator import sequence_lstm_operator

    lstm = sequence_lstm_operator()
    directions, per = (2 if bidirectional else 1), (4 if has_biases else 2)
    time = 1 if batch_first else 0
    finals = []
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            w_ih, w_hh, *biases = params[k * per:(k + 1) * per]
            b_ih, b_hh = biases if biases else (None, None)
            h0, c0 = (hx[0][k], hx[1][k]) if hx else (None, None)
            sequence = x.flip(time) if direction else x
            out = lstm(sequence, w_ih, w_hh, b_ih, b_hh, h0, c0, batch_first)
            out = out.flip(time) if direction else out
            outputs.append(out)
            finals.append(out.select(time, 0 if direction else -1))
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
    return x, torch.stack(finals)


def _depends_on_input(node: Any) -> bool:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n.op == "placeholder":
            return True
        if n in seen:
            continue
        seen.add(n)
        todo.extend(n.all_input_nodes)
    return False


def _state_refusal(hx: list) -> tuple[str | None, bool]:
    """(why the initial state keeps the LSTM unrolled or None, whether it is all zeros)."""
    if all(str(n.target) in _ZEROS for n in hx):
        return None, True
    if hx[0] is hx[1]:
        return "h0 and c0 are the same tensor (the fused kernel overwrites each state in place)", False
    if not all(_depends_on_input(n) for n in hx):
        return "its initial state is a constant other than zeros (LiteRT resets variable states to zero)", False
    return None, False


def _refusal(node: Any, kw: dict) -> str | None:
    """Why this ``aten.lstm.input`` call stays unrolled, or None when it can be fused."""
    x, params = kw["input"], kw["params"]
    val = x.meta.get("val")
    if val is None or str(val.dtype) != "torch.float32" or val.dim() != 3:
        return "its input is not a 3-D float32 tensor"
    if kw["train"] and kw["dropout"] > 0:
        return "dropout is active (training mode)"
    if not all(getattr(p, "op", None) == "get_attr" for p in params):
        return "its weights are computed at run time"
    per = 4 if kw["has_biases"] else 2
    if len(params) != per * kw["num_layers"] * (2 if kw["bidirectional"] else 1):
        return "proj_size is set (LiteRT's fused projection is not PyTorch's)"
    if any(u.target is _getitem() and u.args[1] == 2 and u.users for u in node.users):
        return "its final cell state c_n is used (the fused operator outputs only the sequence)"
    return _state_refusal(kw["hx"])[0] if kw["hx"] else None


def _getitem() -> Any:
    import operator

    return operator.getitem


def _fuse(gm: Any, node: Any, kw: dict) -> None:
    for user in [u for u in node.users if u.args[1] == 2]:  # unused c_n (_refusal checked)
        gm.graph.erase_node(user)
    zeros = bool(kw["hx"]) and _state_refusal(kw["hx"])[1]
    node.target = lstm_as_sequence_lstm
    node.args = (kw["input"], [] if zeros else kw["hx"], kw["params"], kw["has_biases"], kw["num_layers"],
                 kw["bidirectional"], kw["batch_first"])
    node.kwargs = {}
    for state in dict.fromkeys(kw["hx"] if zeros else ()):  # the zeros nobody reads now
        if not state.users:
            gm.graph.erase_node(state)


def _record(node: Any, kind: str, why: str, declined: bool = False) -> FxRewrite:
    return FxRewrite(*node_location(node), kind, why, declined)


def rewrite_lstms_as_sequence_lstm_pass(gm: Any) -> tuple[FxRewrite, ...]:
    """Each ``aten.lstm.input`` the fused operator can express becomes one per layer and direction;
    the others (and every GRU) get a record saying why they stay unrolled. Changes
    the GraphModule in place; returns the records (empty: nothing found)."""
    import torch

    aten = torch.ops.aten
    records, fused = [], False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target == aten.gru.input:
            records.append(_record(node, "nn.GRU kept unrolled", "LiteRT has no fused GRU operator; " + _UNROLLED_WHY, True))
        elif node.target == aten.lstm.input:
            kw = call_arguments(node)
            why = _refusal(node, kw)
            if why is not None:
                records.append(_record(node, "nn.LSTM kept unrolled", f"{why}; {_UNROLLED_WHY}", True))
                continue
            layers = f"{kw['num_layers']} layer{'s' if kw['num_layers'] > 1 else ''}" + (", bidirectional" if kw["bidirectional"] else "")
            _fuse(gm, node, kw)
            records.append(_record(node, f"{_FUSED} ({layers})", _UNROLLED_WHY))
            fused = True
    if fused:
        gm.graph.lint()
        gm.recompile()
    return tuple(records)
