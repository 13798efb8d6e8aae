"""sequence_lstm_int8: a model with fused LSTMs is fully int8 through TFLite's quantizer (int16 cell
state, the state resets kept), and near its float model; the flatbuffer backend sends it there only
when every other operator is one that quantizer is trusted with."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.errors import UsageError
from edge_export.quantization.sequence_lstm_int8 import quantize_sequence_lstm_model, takes_sequence_lstm_model

STEPS, FEATURES = 24, 6


class Tagger(torch.nn.Module):
    """2-layer LSTM and a linear head per step; ``normalized`` ends in an L2 norm (SUM, SQRT, DIV)."""

    def __init__(self, normalized: bool = False) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(FEATURES, 16, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(16, 4)
        self.normalized = normalized

    def forward(self, x):
        y = self.head(self.lstm(x)[0])
        return y / y.norm(dim=-1, keepdim=True) if self.normalized else y


def _samples(n: int, seed: int) -> list[np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(STEPS, dtype=torch.float32)[None, :, None]
    # smooth sequences with the scale of features, not white noise
    return [(torch.sin(t / 3 + torch.randn(1, 1, FEATURES, generator=g)) * 2 + 0.2 * torch.randn(1, STEPS, FEATURES, generator=g)).numpy()
            for _ in range(n)]


def _float_model(normalized: bool) -> tuple[torch.nn.Module, bytes]:
    from edge_export.conversion.litert import convert_module
    from edge_export.passes.fx.pipeline import prepare_graph_for_litert

    torch.manual_seed(0)
    module = Tagger(normalized).eval()
    example = (torch.from_numpy(_samples(1, 0)[0]),)
    return module, convert_module(prepare_graph_for_litert(module, example).module, example)


@pytest.fixture(scope="module")
def tagger():
    module, fp32 = _float_model(False)
    return module, fp32, quantize_sequence_lstm_model(fp32, [[s] for s in _samples(16, 1)])


@pytest.mark.slow
def test_the_quantized_model_is_fully_int8_with_the_states_reset_and_near_float(tagger):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.validators.metrics import sqnr_db

    module, _, int8 = tagger
    model = read_flatbuffer(int8)
    assert model.is_fully_integer
    # the state resets: BROADCAST_TOs of the zero points (TFLite Micro's FILL takes only float32)
    assert model.op_counts["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 2 and model.op_counts["BROADCAST_TO"] == 4 and "FILL" not in model.op_counts
    lstm = next(op for op in model.operators if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert model.tensors[lstm.inputs[0]].dtype == "int8" and model.tensors[lstm.inputs[19]].dtype == "int16"  # the cell state
    runner = TFLiteRunner(model)
    heldout = _samples(4, 2)  # not the calibration samples
    first = [runner.run([x])[0] for x in heldout]
    for x, y in zip(heldout, first):
        np.testing.assert_array_equal(runner.run([x])[0], y)  # again: the same, from the reset state
        with torch.no_grad():
            assert sqnr_db(module(torch.from_numpy(x)).numpy(), y) >= 25.0


@pytest.mark.slow
def test_an_operator_tflites_quantizer_is_not_trusted_with_keeps_the_model_on_ai_edge_quantizer(tagger):
    assert takes_sequence_lstm_model(tagger[1])
    assert not takes_sequence_lstm_model(_float_model(True)[1])  # SUM, SQRT and DIV: 1.3 dB in TFLite's int8


def test_int16_activations_and_an_empty_calibration_set_are_refused(tagger):
    with pytest.raises(UsageError, match="no 16x8 LSTM"):
        quantize_sequence_lstm_model(tagger[1], [[s] for s in _samples(2, 1)], "int16x8")
    with pytest.raises(UsageError, match="needs calibration samples"):
        quantize_sequence_lstm_model(tagger[1], [])


class Counter(torch.nn.Module):
    """An LSTM whose cells count up by one a step (gates saturated open): |c| reaches 100, past the
    integer kernel's cell range (|c| < 64), as a trained LSTM's did (92)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(FEATURES, 8, batch_first=True)
        with torch.no_grad():
            self.lstm.bias_ih_l0[:24] = 20.0  # input, forget and cell gates at 1 whatever the input
            self.lstm.weight_ih_l0[:24] = 0.0
            self.lstm.weight_hh_l0.zero_()

    def forward(self, x):
        return self.lstm(x)[0]


@pytest.mark.slow
def test_a_cell_state_beyond_the_integer_kernels_range_saturates_instead_of_wrapping():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.passes.fx.pipeline import prepare_graph_for_litert
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.validators.metrics import sqnr_db

    torch.manual_seed(0)
    module = Counter().eval()
    g = torch.Generator().manual_seed(0)
    samples = [torch.randn(1, 100, FEATURES, generator=g) for _ in range(9)]
    fp32 = convert_module(prepare_graph_for_litert(module, (samples[0],)).module, (samples[0],))
    model = read_flatbuffer(quantize_sequence_lstm_model(fp32, [[s.numpy()] for s in samples[:8]]))
    lstm = next(op for op in model.operators if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert model.tensors[lstm.inputs[19]].quant.scales[0] == 2.0**-9  # the quantizer chose 2**-5
    with torch.no_grad():
        want = module(samples[8]).numpy()
    assert sqnr_db(want, TFLiteRunner(model).run([samples[8].numpy()])[0]) >= 25.0


@pytest.mark.slow
def test_the_device_graph_passes_every_target_runs_keep_the_state_resets(tagger):
    """Folded as an operator of constants, a reset BROADCAST_TO left the state carrying over between
    calls: 26.8 dB through TFLite Micro instead of 46.0 dB."""
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.passes.flatbuffer.device_graph import simplify_device_graph
    from edge_export.runtime.interpreter import TFLiteRunner

    for model_bytes, reset in ((tagger[2], "BROADCAST_TO"), (tagger[1], "FILL")):
        simplified = simplify_device_graph(read_flatbuffer(model_bytes))
        assert simplified.op_counts[reset] == 4
        runner, x, y = TFLiteRunner(simplified), _samples(1, 3)[0], _samples(1, 4)[0]
        first = runner.run([x])[0]
        runner.run([y])
        np.testing.assert_array_equal(runner.run([x])[0], first)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "backend", "why"), [
    ("int16x8", "flatbuffer", "LiteRT has no kernel for an LSTM with 16-bit activations"),
    ("int8", "pt2e", "PT2E does not quantize inside the fused operator"),
])
def test_a_fused_lstm_left_float_is_reported_with_why_and_what_makes_it_integer(mode, backend, why):
    """int16x8 (no LiteRT kernel) and PT2E int8 (no quantization inside the operator) leave the
    fused LSTM float: the model's LSTM really computes in float, and the report's warning says why."""
    from edge_export.config import QuantBackend, QuantizeMode
    from edge_export.conversion.litert import convert_module
    from edge_export.passes.fx.pipeline import prepare_graph_for_litert
    from edge_export.quantization import QuantizationRequest, quantize_model
    from edge_export.quantization.calibration import CalibrationSet

    torch.manual_seed(0)
    example = (torch.from_numpy(_samples(1, 0)[0]),)
    graph = prepare_graph_for_litert(Tagger().eval(), example).module
    calibration = CalibrationSet(tuple((s,) for s in _samples(16, 1)), "test sequences", True)
    result = quantize_model(graph, example, QuantizationRequest(
        QuantizeMode(mode), calibration=calibration, backend=QuantBackend(backend),
    ), float_model_bytes=convert_module(graph, example) if backend == "flatbuffer" else None)
    model = result.model
    lstms = [op for op in model.operators if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    assert len(lstms) == 2 and all(model.tensors[op.inputs[0]].dtype == "float32" for op in lstms)
    (note,) = [w for w in result.warnings if "fused LSTM" in w]
    assert note.startswith(f"The fused LSTM (UNIDIRECTIONAL_SEQUENCE_LSTM, in lstm) stays float under --quantize {mode}")
    assert ("--quant-backend pt2e:" in note) == (backend == "pt2e")
    assert why in note and ("--quantize int8 makes it fully integer" in note or "--quant-backend flatbuffer or auto" in note)


@pytest.mark.slow
def test_litert_has_no_lstm_kernel_for_16_bit_activations(tagger):
    """What the int16x8 warning rests on: the int8 model with its first LSTM's input made int16
    (16x8) is refused by LiteRT at prepare, since the kernel's integer path is for int8 inputs only.
    If a LiteRT release adds the kernel, this fails and the warning must change."""
    from edge_export.errors import RuntimeRunError
    from edge_export.flatbuffer import pack_model, read_model
    from edge_export.passes.flatbuffer.graph_edits import opcode_name
    from edge_export.runtime.interpreter import TFLiteRunner

    int8 = tagger[2]
    model = read_model(int8)
    sg = model.subgraphs[0]
    lstm = next(op for op in sg.operators if opcode_name(model, op) == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    x = sg.tensors[lstm.inputs[0]]
    x.type, x.quantization.scale, x.quantization.zeroPoint = 7, [float(x.quantization.scale[0]) / 256], [0]  # INT16
    with pytest.raises(RuntimeRunError, match=r"UNIDIRECTIONAL_SEQUENCE_LSTM\) failed to prepare"):
        TFLiteRunner(pack_model(model, source=int8))
