"""rewrite_lstms_as_sequence_lstm_pass: nn.LSTM becomes one fused UNIDIRECTIONAL_SEQUENCE_LSTM per
layer and direction, computes what nn.LSTM computes (in PyTorch and in LiteRT, on every
invocation), and the layers the fused operator cannot express stay unrolled with the reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.passes.fx import rewrite_lstms_as_sequence_lstm_pass

FEATURES, HIDDEN, STEPS, BATCH = 6, 8, 12, 2


class Recurrent(torch.nn.Module):
    """One nn.LSTM; ``returns`` is "output", "output_h" or "output_h_c"; h0/c0 are inputs when given."""

    def __init__(self, layers: int = 1, batch_first: bool = True, returns: str = "output", **lstm: object) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(FEATURES, HIDDEN, num_layers=layers, batch_first=batch_first, **lstm)
        self.returns = returns

    def forward(self, x, h0=None, c0=None):
        out, (h, c) = self.lstm(x, None if h0 is None else (h0, c0))
        return {"output": out, "output_h": (out, h), "output_h_c": (out, (h, c))}[self.returns]


def _inputs(module: Recurrent, states: bool, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    shape = (BATCH, STEPS, FEATURES) if module.lstm.batch_first else (STEPS, BATCH, FEATURES)
    x = torch.randn(shape, generator=g)
    if not states:
        return (x,)
    layers = module.lstm.num_layers * (2 if module.lstm.bidirectional else 1)
    return (x, torch.randn(layers, BATCH, HIDDEN, generator=g), torch.randn(layers, BATCH, HIDDEN, generator=g))


def _rewritten(module: torch.nn.Module, example: tuple):
    graph = torch.export.export(module, example).module()
    return graph, rewrite_lstms_as_sequence_lstm_pass(graph)


def _flat(outputs) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [t for o in outputs for t in _flat(o)]


# Each layer count both batch-first and time-major, with and without initial states, returning the
# output alone and with h_n (returning c_n keeps the LSTM unrolled: FALLBACKS).
CASES = [
    (1, True, False, "output"), (1, False, True, "output_h"), (2, True, True, "output"),
    (2, False, False, "output_h"), (3, True, False, "output_h"), (3, False, True, "output"),
]


@pytest.mark.parametrize(("layers", "batch_first", "states", "returns"), CASES)
def test_the_rewritten_graph_computes_what_nn_lstm_computes(layers, batch_first, states, returns):
    torch.manual_seed(layers)
    module = Recurrent(layers, batch_first, returns).eval()
    example = _inputs(module, states)
    graph, records = _rewritten(module, example)
    assert [r.kind for r in records] == [f"nn.LSTM as UNIDIRECTIONAL_SEQUENCE_LSTM ({layers} layer{'s' if layers > 1 else ''})"]
    assert records[0].module_path == "lstm" and records[0].source
    assert torch.ops.aten.lstm.input not in {n.target for n in graph.graph.nodes}
    other = _inputs(module, states, seed=1)  # not the traced example
    with torch.no_grad():
        for got, want in zip(_flat(graph(*other)), _flat(module(*other)), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert rewrite_lstms_as_sequence_lstm_pass(graph) == ()  # nothing left


def test_a_bidirectional_lstm_is_two_fused_operators_per_layer_over_the_reversed_sequence():
    torch.manual_seed(0)
    module = Recurrent(2, False, "output_h", bidirectional=True).eval()
    graph, records = _rewritten(module, _inputs(module, True))
    assert [r.kind for r in records] == ["nn.LSTM as UNIDIRECTIONAL_SEQUENCE_LSTM (2 layers, bidirectional)"]
    other = _inputs(module, True, seed=3)
    with torch.no_grad():
        for got, want in zip(_flat(graph(*other)), _flat(module(*other)), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_an_lstm_without_biases_is_fused_too():
    torch.manual_seed(0)
    module = Recurrent(2, False, "output_h", bias=False).eval()
    graph, records = _rewritten(module, _inputs(module, False))
    assert [r.kind for r in records] == ["nn.LSTM as UNIDIRECTIONAL_SEQUENCE_LSTM (2 layers)"]
    other = _inputs(module, False, seed=4)
    with torch.no_grad():
        for got, want in zip(_flat(graph(*other)), _flat(module(*other)), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


class SameState(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)

    def forward(self, x, h0):
        return self.lstm(x, (h0, h0))[0]


class ConstantState(SameState):
    def forward(self, x):
        ones = torch.ones(1, x.shape[0], HIDDEN)
        return self.lstm(x, (ones, ones * 2))[0]


class Gru(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(FEATURES, HIDDEN, batch_first=True)

    def forward(self, x):
        return self.gru(x)[0]


def _x() -> torch.Tensor:
    return torch.randn(BATCH, STEPS, FEATURES, generator=torch.Generator().manual_seed(0))


def _h0() -> torch.Tensor:
    return torch.randn(1, BATCH, HIDDEN, generator=torch.Generator().manual_seed(1))


FALLBACKS = [
    ("proj_size", lambda: Recurrent(proj_size=4), lambda: (_x(),), "proj_size is set"),
    ("training dropout", lambda: Recurrent(2, dropout=0.5).train(), lambda: (_x(),), "dropout is active"),
    ("c_n returned", lambda: Recurrent(2, returns="output_h_c"), lambda: (_x(),), "final cell state c_n is used"),
    ("h0 is c0", SameState, lambda: (_x(), _h0()), "h0 and c0 are the same tensor"),
    ("constant state", ConstantState, lambda: (_x(),), "a constant other than zeros"),
    ("gru", Gru, lambda: (_x(),), "LiteRT has no fused GRU operator"),
]


@pytest.mark.parametrize(("build", "example", "reason"), [f[1:] for f in FALLBACKS], ids=[f[0] for f in FALLBACKS])
def test_what_the_fused_operator_cannot_express_stays_unrolled_and_says_why(build, example, reason):
    torch.manual_seed(0)
    module = build()
    if not module.training or reason != "dropout is active":
        module.eval()
    graph, records = _rewritten(module, example())
    assert len(records) == 1 and "kept unrolled" in records[0].kind and records[0].declined
    assert reason in records[0].why and "once per time step" in records[0].why
    assert not any(getattr(n.target, "__name__", "") == "lstm_as_sequence_lstm" for n in graph.graph.nodes)


class Zoo(torch.nn.Module):
    """Four LSTMs in one model, converted once: 1 layer batch-first from zeros (output only);
    2 layers time-major from input states (output and h_n); 3 layers batch-first from input
    states (output and h_n); a 1-layer bidirectional one."""

    def __init__(self) -> None:
        super().__init__()
        self.one = Recurrent(1, True, "output")
        self.two = Recurrent(2, False, "output_h")
        self.three = Recurrent(3, True, "output_h")
        self.both = Recurrent(1, True, "output_h", bidirectional=True)

    def forward(self, x, x_time_major, h2, c2, h3, c3):
        return self.one(x), self.two(x_time_major, h2, c2), self.three(x, h3, c3), self.both(x)


def _zoo_inputs(seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, STEPS, FEATURES, generator=g)
    states = [torch.randn(n, BATCH, HIDDEN, generator=g) for n in (2, 2, 3, 3)]
    return (x, torch.randn(STEPS, BATCH, FEATURES, generator=g), *states)


@pytest.fixture(scope="module")
def zoo():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer

    torch.manual_seed(0)
    module = Zoo().eval()
    graph, records = _rewritten(module, _zoo_inputs(0))
    return module, records, read_flatbuffer(convert_module(graph, _zoo_inputs(0)))


def test_the_converted_lstms_are_fused_operators_that_compute_nn_lstm_on_every_call(zoo):
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.validators.metrics import sqnr_db

    module, records, model = zoo
    assert len(records) == 4 and all("as UNIDIRECTIONAL_SEQUENCE_LSTM" in r.kind for r in records)
    assert model.op_counts["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 1 + 2 + 3 + 2
    assert sum(model.op_counts.values()) < 60  # unrolled, these 12 steps were hundreds of operators
    runner = TFLiteRunner(model)
    for seed in (1, 2, 1):  # the same input again after another: each call starts from its own state
        inputs = _zoo_inputs(seed)
        with torch.no_grad():
            want = _flat(module(*inputs))
        got = runner.run([t.numpy() for t in inputs])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert sqnr_db(w.numpy(), g) >= 100.0


def test_three_layers_over_160_steps_convert_to_a_few_operators_at_float_parity():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.validators.metrics import sqnr_db

    class SpeakerEncoder(torch.nn.Module):  # the shape: 3 layers over 160 frames, h_n kept
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(40, 64, num_layers=3, batch_first=True)

        def forward(self, x):
            out, (h, _) = self.lstm(x)
            return out, h

    torch.manual_seed(0)
    module = SpeakerEncoder().eval()
    x = torch.randn(1, 160, 40, generator=torch.Generator().manual_seed(0))
    graph, _ = _rewritten(module, (x,))
    model = read_flatbuffer(convert_module(graph, (x,)))
    assert model.op_counts["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 3 and sum(model.op_counts.values()) < 100
    with torch.no_grad():
        out, h = module(x)
    got = TFLiteRunner(model).run([x.numpy()])
    assert sqnr_db(out.numpy(), got[0]) >= 100.0 and sqnr_db(h.numpy(), got[1]) >= 100.0


def test_the_state_reset_is_a_fill_per_state_and_undoing_it_leaves_the_converter_graph(zoo):
    from edge_export.flatbuffer import read_model
    from edge_export.passes.flatbuffer.graph_edits import opcode_name
    from edge_export.passes.flatbuffer.reset_lstm_states_pass import drop_lstm_state_resets, reset_lstm_states_pass

    model = read_model(zoo[2].data)
    sg = model.subgraphs[0]
    fills = [op for op in sg.operators if opcode_name(model, op) == "FILL"]
    # zero initial states only: the one-layer LSTM's two and the bidirectional one's four
    assert len(fills) == 2 * (1 + 2)
    assert all(sg.tensors[op.outputs[0]].isVariable for op in fills)
    assert reset_lstm_states_pass(model) is False  # each state is written now
    assert drop_lstm_state_resets(model) is True
    assert not [op for op in sg.operators if opcode_name(model, op) == "FILL"]
    assert reset_lstm_states_pass(model) is True and len(sg.operators) == len(zoo[2].mutable().subgraphs[0].operators)
    np.testing.assert_array_equal(
        [opcode_name(model, op) for op in sg.operators],
        [opcode_name(model, op) for op in read_model(zoo[2].data).subgraphs[0].operators],
    )


def test_only_a_fused_lstms_state_may_be_a_written_variable(zoo):
    from edge_export.errors import FlatbufferError
    from edge_export.flatbuffer import pack_model, read_flatbuffer, read_model
    from edge_export.passes.flatbuffer.graph_edits import opcode_name

    model = read_model(zoo[2].data)
    sg = model.subgraphs[0]
    concat = next(op for op in sg.operators if opcode_name(model, op) == "CONCATENATION")
    sg.tensors[concat.outputs[0]].isVariable = True  # a variable no LSTM reads as its state
    with pytest.raises(FlatbufferError, match="writes over tensor"):
        read_flatbuffer(pack_model(model), origin="the mutated model")
