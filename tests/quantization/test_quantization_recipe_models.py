"""The sensitivity ranking and the mixed-precision search measure the models an export would write:
RecipeQuantizer builds each recipe's model as quantize_flatbuffer builds the export's (rounded
filters, sigmoid inputs cut, a joined output's parts keeping their scales). Before, its models had
one scale over a detector's boxes and scores, so the ranking and the search judged a collapsed
output that the export never writes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.config import QuantizeMode
from edge_export.conversion.litert import convert_module
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization.calibration import CalibrationSet
from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer
from edge_export.quantization.operator_scopes import quantizable_ops
from edge_export.quantization.sensitivity import RecipeQuantizer
from edge_export.runtime.interpreter import TFLiteRunner
from edge_export.validators.metrics import sqnr_db

pytestmark = pytest.mark.slow  # a conversion, a calibration and four quantizations: ~10 s quiet


class SiluDetector(nn.Module):
    """One [1, 4 + nc, anchors] output: boxes 0-320 pixels beside sigmoid class scores whose logits
    span about -13..+6 (a detector's negative class bias), after a SiLU body."""

    def __init__(self, nc: int = 6) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.SiLU())
        self.box, self.cls = nn.Conv2d(8, 4, 1), nn.Conv2d(8, nc, 1)
        with torch.no_grad():
            self.cls.weight.mul_(40)
            self.cls.bias.fill_(-4.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.body(x)
        return torch.cat([torch.sigmoid(self.box(f)) * 320, torch.sigmoid(self.cls(f))], 1).flatten(2)


def _samples(n: int, seed: int) -> tuple[tuple[np.ndarray], ...]:
    rng = np.random.default_rng(seed)
    return tuple((rng.standard_normal((1, 3, 16, 16)).astype(np.float32),) for _ in range(n))


@pytest.fixture(scope="module")
def detector():
    torch.manual_seed(0)
    model = SiluDetector().eval()
    float_bytes = convert_module(model, (torch.zeros(1, 3, 16, 16),))
    calibration = CalibrationSet(_samples(16, 1), "test", True)
    return model, float_bytes, calibration, RecipeQuantizer(float_bytes, calibration)


def _activation_params(model_bytes: bytes) -> dict[str, tuple]:
    model = read_flatbuffer(model_bytes)
    return {t.name: (t.dtype, tuple(np.round(t.quant.scales, 9)), t.quant.zero_points) for t in model.tensors if not t.is_constant and t.quant is not None}


def _scores_sqnr(model: nn.Module, model_bytes: bytes) -> float:
    held_out = _samples(8, 2)
    runner = TFLiteRunner(read_flatbuffer(model_bytes))
    exported = np.stack([runner.run([x])[0] for (x,) in held_out])
    with torch.no_grad():
        reference = np.stack([model(torch.from_numpy(x)).numpy() for (x,) in held_out])
    return sqnr_db(reference[:, :, 4:], exported[:, :, 4:])


def test_the_all_int8_recipe_is_the_exports_int8_model(detector):
    _, float_bytes, calibration, quantizer = detector
    exported = quantize_flatbuffer(float_bytes, QuantizeMode.INT8, calibration)
    recipe = quantizer.quantize("int8")
    assert [op.opcode for op in read_flatbuffer(recipe).operators] == [op.opcode for op in read_flatbuffer(exported).operators]
    # every activation's dtype, scale and zero point: the same sigmoid cuts, the same part scales
    assert _activation_params(recipe) == _activation_params(exported)
    assert read_flatbuffer(recipe).output_join_ops  # the boxes and the scores keep their own scales


def test_a_mixed_recipe_keeps_the_parts_and_cuts_at_the_widest_precision(detector):
    model, _, _, quantizer = detector
    ops = quantizable_ops(quantizer.float_model)
    cls_conv = next(op for op in ops if op.opcode == "CONV_2D" and "cls" in op.tensor)
    mixed = quantizer.quantize("int8", {cls_conv: "int16"})
    assert read_flatbuffer(mixed).output_join_ops
    assert _scores_sqnr(model, mixed) >= 20
    # the logits (-13..+6) feed an int16 sigmoid there: cut at int16's bound (11.09), not at int8's (6.24)
    logits = {t.name: t for t in read_flatbuffer(mixed).tensors}[cls_conv.tensor]
    assert logits.dtype == "int16" and 10 < logits.quant.scales[0] * 32768 < 12, logits.quant
    # without part scales the joined output has one scale, and its scores collapse
    one_scale = RecipeQuantizer(quantizer.float_bytes, quantizer.calibration, weight_rounding=False, part_scales=False)
    assert not read_flatbuffer(one_scale.quantize("int8")).output_join_ops
    assert _scores_sqnr(model, one_scale.quantize("int8")) < _scores_sqnr(model, quantizer.quantize("int8")) - 10
