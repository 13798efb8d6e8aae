"""The report names the int16 tensors whose ranges were widened beyond calibration
(quantization.int16_headroom, int16_headroom.py): the backend's int16x8 model and the model a
mixed-precision search keeps, each with the tensors its own ranges widened."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_harness import validate_report
from quantization_models import Mlp, make

from edge_export import export
from edge_export.config import InputSpec
from edge_export.flatbuffer import read_flatbuffer
from edge_export.options import QuantizeMode
from edge_export.quantization import flatbuffer_recipes
from edge_export.quantization.calibration import CalibrationSet

SPEC = InputSpec((1, 8, 16), name="x")


def _spiky(n: int = 16) -> np.ndarray:
    """Spread 0.4 but one sample of spread 1: half of the samples reach about half as far."""
    rng = np.random.default_rng(3)
    return np.stack([rng.standard_normal(SPEC.shape).astype(np.float32) * s for s in [1.0] + [0.4] * (n - 1)])


@pytest.fixture(scope="module")
def mlp():
    from edge_export.conversion.litert import convert_module

    module = make(Mlp)
    return module, convert_module(module, (torch.zeros(SPEC.shape),))


def _scale_ratios(widened: bytes, calibrated: bytes) -> dict[str, float]:
    def scales(data: bytes) -> dict[str, float]:
        model = read_flatbuffer(data, origin="test")
        return {t.name: t.quant.scales[0] for t in model.tensors if t.quant and len(t.quant.scales) == 1 and not t.is_constant}

    a, b = scales(widened), scales(calibrated)
    return {name: a[name] / b[name] for name in a.keys() & b.keys()}


def test_the_backend_names_the_tensors_it_widened_and_by_how_much(mlp, monkeypatch):
    from edge_export.quantization import int16_headroom

    _, float_bytes = mlp
    calibration = CalibrationSet(tuple((x,) for x in _spiky()), "test", True)
    made = flatbuffer_recipes.quantized_flatbuffer(float_bytes, QuantizeMode.INT16X8, calibration)
    assert made.int16_headroom and all(1.0 < h.factor <= int16_headroom.HEADROOM_CAP for h in made.int16_headroom)
    real = int16_headroom.growth_between
    monkeypatch.setattr(int16_headroom, "growth_between", lambda a, b: dict.fromkeys(real(a, b), 1.0))
    calibrated = flatbuffer_recipes.quantized_flatbuffer(float_bytes, QuantizeMode.INT16X8, calibration)
    assert calibrated.int16_headroom == ()
    # what is named is what the model's scales say, and nothing else moved
    ratios = _scale_ratios(made.data, calibrated.data)
    named = {h.tensor: h.factor for h in made.int16_headroom}
    for name, ratio in ratios.items():
        assert ratio == pytest.approx(named.get(name, 1.0), rel=1e-3), name
    monkeypatch.undo()
    assert flatbuffer_recipes.quantized_flatbuffer(float_bytes, QuantizeMode.INT8, calibration).int16_headroom == ()


def test_a_search_quantizer_remembers_what_each_model_it_made_widened(mlp):
    from edge_export.quantization.mixed_precision.order import promotion_overrides
    from edge_export.quantization.operator_scopes import quantizable_ops
    from edge_export.quantization.sensitivity import RecipeQuantizer

    _, float_bytes = mlp
    quantizer = RecipeQuantizer(float_bytes, CalibrationSet(tuple((x,) for x in _spiky()), "test", True), weight_rounding=False)
    quantizer.growth = dict.fromkeys(quantizer.growth, 1.75)
    hidden, head = [op for op in quantizable_ops(quantizer.float_model) if op.opcode == "FULLY_CONNECTED"]
    mixed = quantizer.quantize("int8", promotion_overrides(quantizer, [hidden, head], "int16"))
    plain = quantizer.quantize("int8")
    hidden_out = quantizer.float_model.tensors[quantizer.float_model.operators[hidden.index].outputs[0]].name
    widened = quantizer.headroom_of_model(mixed)
    assert hidden_out in {h.tensor for h in widened} and {h.factor for h in widened} == {1.75}
    assert quantizer.headroom_of_model(plain) == () and quantizer.headroom_of_model(b"not a model") == ()


def test_an_int16x8_export_reports_its_widened_tensors(mlp, tmp_path):
    module, _ = mlp
    np.savez(tmp_path / "data.npz", x=np.concatenate([_spiky(), _spiky(8) * 0.9]))
    result = export(
        module, example_inputs=(torch.zeros(SPEC.shape),), output=tmp_path / "mlp.tflite", quantize="int16x8",
        calibration_data=tmp_path / "data.npz", samples=4,
    )
    rep = validate_report(json.loads(result.report_json_path.read_text()))
    headroom = rep["quantization"]["int16_headroom"]
    assert headroom and all(1.0 < h["factor"] <= 2.0 for h in headroom)
    markdown = result.report_md_path.read_text()
    assert f"int16 ranges widened beyond calibration (headroom for inputs beyond the samples) on {len(headroom)} tensor(s)" in markdown
    from edge_export.output.text_safety import code_span

    widest = max(headroom, key=lambda h: h["factor"])
    assert f"  - {code_span(widest['tensor'])} x" in markdown  # a model's tensor name, escaped
