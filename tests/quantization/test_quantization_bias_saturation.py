"""An integer bias clipped at the int32 limit is found, named in the report and warned about
(bias_saturation.py): a convolution reading tiny activations (1e-6) with a bias of 10, as a
random-weight detector's class branch does; 16-bit activations make the overflow larger, not smaller;
an ordinary int8 model has none. With nearest rounding (--no-weight-rounding): the default rounding
(weight_rounding.py) coarsens the head's weight scale until the bias fits, and nothing is clipped."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import edge_export
from cli_harness import validate_report
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization.bias_saturation import saturated_biases

pytestmark = pytest.mark.slow  # two quantized exports, ~10-20 s each on a loaded 2-core machine


class VanishingBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = nn.Conv2d(3, 4, 1), nn.Conv2d(4, 4, 1)
        with torch.no_grad():
            self.head.bias.fill_(10.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stem(x) * 1e-6)


@pytest.mark.parametrize("mode", ["int8", "int16x8"])
def test_a_clipped_bias_is_named_in_the_report(tmp_path, mode):
    torch.manual_seed(0)
    path = tmp_path / f"vanishing_{mode}.tflite"
    edge_export.export(VanishingBranch().eval(), example_inputs=(torch.randn(1, 3, 8, 8),), output=path, quantize=mode,
                       quant_backend="flatbuffer", weight_rounding=False)
    report = validate_report(json.loads(path.with_suffix(".report.json").read_text()))
    (clipped,) = report["quantization"]["saturated_biases"]
    assert clipped["opcode"] == "CONV_2D" and clipped["saturated"] == clipped["channels"] == 4
    assert "head" in clipped["tensor"]  # the bias names the layer's module
    assert any("clipped at the int32 limit" in w and "head" in w for w in report["quantization"]["warnings"])
    assert "clipped at the int32 limit" in path.with_suffix(".report.md").read_text()


@pytest.mark.parametrize("mode", ["int8", "int16x8"])
def test_rounded_weights_give_the_bias_room_and_the_branch_keeps_it(tmp_path, mode):
    """The head's weights meet activations of 1e-6: their contribution is nothing beside the bias
    of 10, and a weight scale coarse enough for the bias to fit int32 loses nothing measurable."""
    torch.manual_seed(0)
    path = tmp_path / f"vanishing_{mode}.tflite"
    result = edge_export.export(VanishingBranch().eval(), example_inputs=(torch.randn(1, 3, 8, 8),), output=path, quantize=mode,
                                quant_backend="flatbuffer")
    report = validate_report(json.loads(path.with_suffix(".report.json").read_text()))
    assert report["quantization"]["saturated_biases"] == [] and report["quantization"]["weight_rounding"] == "gptq"
    assert result.exit_code == 0 and report["validation"]["outputs"][0]["metrics"]["sqnr_db"] > 40


def test_an_ordinary_int8_model_has_no_clipped_bias(built_artifacts):
    assert saturated_biases(read_flatbuffer(built_artifacts.int8.read_bytes())) == ()


def test_with_real_data_the_warning_names_near_zero_weights_and_does_not_ask_for_data(monkeypatch):
    from edge_export.quantization import explanations
    from edge_export.quantization.bias_saturation import SaturatedBias

    found = (SaturatedBias(3, "DEPTHWISE_CONV_2D", "blocks.0/depthwise", 2, 32),)
    monkeypatch.setattr(explanations, "saturated_biases", lambda model: found)
    (real,) = explanations.bias_warnings(None, real_data=True)
    (synthetic,) = explanations.bias_warnings(None, real_data=False)
    assert "#3 DEPTHWISE_CONV_2D (blocks.0/depthwise): 2 of 32 channels" in real
    assert "weights are all near zero" in real and "--calibration-data" not in real and "float" in real
    assert "--calibration-data" in synthetic
