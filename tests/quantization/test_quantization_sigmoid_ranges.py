"""A sigmoid's input range is cut to where its integer output still changes (sigmoid_ranges.py):
class logits around -11 (YOLO's class bias) get a finer int8 step and keep their scores; a SiLU's
input, which its MUL also reads, keeps its top and loses only the bottom where the integer sigmoid
is 0 (a trained YOLO11n's first convolutions reach -90 before their SiLU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.config import QuantizeMode
from edge_export.conversion.litert import convert_module
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization.calibration import CalibrationSet
from edge_export.quantization import flatbuffer_recipes
from edge_export.quantization.sigmoid_ranges import SIGMOID_INPUT_BOUND, cut_sigmoid_input_ranges
from edge_export.runtime.interpreter import TFLiteRunner
from edge_export.validators.metrics import sqnr_db


class Scores(nn.Module):
    """Class logits spread over -30..+3 (a bias of -11, as a detector's initial class bias), read by
    a sigmoid only, beside a SiLU whose input its MUL also reads."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.features = nn.Conv2d(3, 8, 1), nn.Conv2d(3, 8, 1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(8, 3, 1, 1, generator=torch.Generator().manual_seed(0)) * 3)
            self.conv.bias.fill_(-11.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sigmoid(self.conv(x)), nn.functional.silu(self.features(x))


def _samples(n: int, seed: int) -> list[tuple[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((1, 3, 8, 8)).astype(np.float32),) for _ in range(n)]


def test_bounds_are_where_the_integer_output_stops_changing():
    int8, int16 = SIGMOID_INPUT_BOUND["int8"], SIGMOID_INPUT_BOUND["int16"]
    assert abs(1 / (1 + np.exp(int8)) * 256 - 0.5) < 1e-3  # sigmoid(-bound) is half an output step
    assert abs(1 / (1 + np.exp(int16)) * 32768 - 0.5) < 1e-3


@pytest.mark.slow  # a conversion and two int8 quantizations: 7 s on a quiet machine, over a minute under load
def test_logits_read_by_a_sigmoid_only_are_cut_and_keep_their_scores(monkeypatch):
    model = Scores().eval()
    float_bytes = convert_module(model, (torch.zeros(1, 3, 8, 8),))
    float_model = read_flatbuffer(float_bytes)
    multiplied = {t for op in float_model.operators if op.opcode == "MUL" for t in op.inputs}
    sigmoid_inputs = [op.inputs[0] for op in float_model.operators if op.opcode == "LOGISTIC"]
    (logits,) = [float_model.tensors[t].name for t in sigmoid_inputs if t not in multiplied]
    (silu_input,) = [float_model.tensors[t].name for t in sigmoid_inputs if t in multiplied]
    qsvs = {logits: {"min": np.float32([[-30.0]]), "max": np.float32([[3.0]])}, silu_input: {"min": np.float32([[-19.0]]), "max": np.float32([[14.0]])}}
    cut, names = cut_sigmoid_input_ranges(float_model, qsvs, QuantizeMode.INT8)
    assert names == [logits, silu_input]
    assert float(cut[logits]["min"].min()) == np.float32(-SIGMOID_INPUT_BOUND["int8"]) and float(cut[logits]["max"].max()) == 3.0
    # the SiLU's input: its bottom only (the MUL passes its top on)
    assert float(cut[silu_input]["min"].min()) == np.float32(-SIGMOID_INPUT_BOUND["int8"]) and float(cut[silu_input]["max"].max()) == 14.0
    # a range wholly below the bound is left as it is (the cut would leave it no width)
    low = {silu_input: {"min": np.float32([[-40.0]]), "max": np.float32([[-20.0]])}}
    assert cut_sigmoid_input_ranges(float_model, low, QuantizeMode.INT8) == (low, [])

    # end to end at int8: the scores, measured apart from the tool, against PyTorch on held-out
    # inputs, with the cut and without it
    held_out = _samples(16, 2)
    with torch.no_grad():
        reference = np.concatenate([model(torch.from_numpy(x))[0].numpy() for (x,) in held_out])
    kept = _scores_sqnr(float_bytes, held_out, reference)
    monkeypatch.setattr(flatbuffer_recipes, "cut_sigmoid_input_ranges", lambda model, qsvs, mode: (qsvs, []))
    uncut = _scores_sqnr(float_bytes, held_out, reference)
    # the output's own 1/256 step bounds both; the finer logit step still shows
    assert kept >= 20 and kept >= uncut + 1, (kept, uncut)


def _scores_sqnr(float_bytes: bytes, held_out: list, reference: np.ndarray) -> float:
    calibration = CalibrationSet(tuple(_samples(32, 1)), "test", True)
    runner = TFLiteRunner(read_flatbuffer(flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT8, calibration)))
    outputs = np.concatenate([runner.run([x])[0] for (x,) in held_out])  # output 0: the sigmoid's
    return sqnr_db(reference, outputs.reshape(reference.shape))
