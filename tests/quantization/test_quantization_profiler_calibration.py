"""The flatbuffer backend calibrates with LiteRT's profiler (min/max kept in C++ as the model runs)
instead of ai-edge-quantizer's default mode (every tensor copied back into Python after each
sample): the quantized model must be the same, byte for byte, only faster (docs/BENCHMARKS.md 23.7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quantization_models import CNN_SPEC, TinyEncoder, make
from test_quantization_discontinuous import StepsInsideANetwork

from edge_export.config import InputSpec
from edge_export.options import QuantizeMode
from edge_export.quantization import flatbuffer_recipes, synthetic_calibration


class TokenClassifier(torch.nn.Module):
    """Integer ids through an embedding table, a LayerNorm and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.embed(ids)).mean(dim=1))


def _default_mode_ranges(quantizer, float_model, float_bytes, data, observer):
    """ai-edge-quantizer's default calibration (preserve all tensors), min/max updates."""
    from ai_edge_quantizer import calibrator
    from ai_edge_quantizer.utils import qsv_utils

    calib = calibrator.Calibrator(float_bytes, num_threads=2, qsv_update_func=qsv_utils.min_max_update)
    calib.calibrate(data, quantizer._recipe_manager)
    return calib.get_model_qsvs()


def _float_model(module: torch.nn.Module, spec: InputSpec, dtype=torch.float32) -> bytes:
    from edge_export.conversion.litert import convert_module

    example = torch.zeros(spec.shape, dtype=dtype)
    return convert_module(module, (example,))


CASES = {
    "cnn": None,  # the session's small CNN (conftest.cnn_float_bytes)
    "encoder": lambda: (_float_model(make(TinyEncoder), InputSpec((1, 6, 16), name="x")), InputSpec((1, 6, 16), name="x")),
    "step function": lambda: (_float_model(_steps(), InputSpec((1, 3, 8, 8), name="x")), InputSpec((1, 3, 8, 8), name="x")),
    "token ids": lambda: (_float_model(make(TokenClassifier), InputSpec((1, 7), dtype="int64", name="ids"), torch.int64),
                          InputSpec((1, 7), dtype="int64", name="ids")),
}


def _steps() -> torch.nn.Module:
    torch.manual_seed(0)
    return StepsInsideANetwork().eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_profiler_ranges_give_the_same_model_as_the_default_calibration(case, monkeypatch, request):
    float_bytes, spec = (request.getfixturevalue("cnn_float_bytes"), CNN_SPEC) if CASES[case] is None else CASES[case]()
    calibration = synthetic_calibration([spec], n=8, seed=3)
    modes = ("int8", "int16x8") if case == "encoder" else ("int8",)  # int16x8 takes the same min/max
    for mode in map(QuantizeMode, modes):
        profiled = flatbuffer_recipes.quantize_flatbuffer(float_bytes, mode, calibration)
        with monkeypatch.context() as patch:
            patch.setattr(flatbuffer_recipes, "_min_max_ranges", _default_mode_ranges)
            default = flatbuffer_recipes.quantize_flatbuffer(float_bytes, mode, calibration)
        assert profiled == default, f"{case} at {mode.value}"


def test_profiler_ranges_take_the_default_modes_form(cnn_float_bytes, cnn_calibration):
    """float32 bounds with one value per tensor axis: float64 bounds would round scales differently."""
    from ai_edge_quantizer import quantizer as aeq

    from edge_export.flatbuffer import read_flatbuffer

    model = read_flatbuffer(cnn_float_bytes, origin="test")
    data = flatbuffer_recipes._signature_data(model, cnn_calibration)
    qz = aeq.Quantizer(bytearray(cnn_float_bytes), flatbuffer_recipes._recipe(QuantizeMode("int8")))
    profiled = flatbuffer_recipes._min_max_ranges(qz, model, cnn_float_bytes, data, "minmax")
    default = _default_mode_ranges(qz, model, cnn_float_bytes, data, "minmax")
    assert set(profiled) == set(default)
    for name, qsv in default.items():
        for bound in ("min", "max"):
            assert profiled[name][bound].dtype == np.float32
            assert profiled[name][bound].shape == np.shape(qsv[bound])
            np.testing.assert_array_equal(profiled[name][bound], qsv[bound])
