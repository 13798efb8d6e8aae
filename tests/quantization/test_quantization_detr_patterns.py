"""Two int8 patterns of DETR's graph, each checked on a small model that has it.

- A max pool with padding: PADV2(x, -inf) then MAX_POOL_2D. The -inf became -32 before int8, and
  PADV2 shares its output's scale with its input: a ReLU's 0 to 1 was quantized over -32 to 1
  (quantization/max_pool_padding.py).
- A BATCH_MATMUL of a constant operand (DETR's decoder queries, constants once folded): per-channel
  constants made LiteRT's integer kernel compute zeros (quantization/constant_matmul_operands.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quantization_models import make
from torch import nn

from edge_export.config import InputSpec
from edge_export.options import QuantizeMode
from edge_export.quantization import flatbuffer_recipes, synthetic_calibration


class PaddedMaxPool(nn.Module):
    """ResNet's stem: a convolution, ReLU, then a 3x3 max pool with padding 1."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(torch.relu(self.conv(x))))


class _ConstantOperand(nn.Module):
    """Attention scores between projected inputs (per head) and a constant, on the left or the right."""

    left = True

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("constant", torch.randn(4, 6, 8) if self.left else torch.randn(4, 8, 6))
        self.project = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads = self.project(x).reshape(1, 10, 4, 8).permute(0, 2, 1, 3)[0]  # (heads, tokens, 8)
        scores = torch.matmul(self.constant, heads.transpose(1, 2)) if self.left else torch.matmul(heads, self.constant)
        return scores.softmax(-1)


class ConstantQueries(_ConstantOperand):
    """Constant queries against projected inputs: the constant is the left operand (DETR's decoder)."""


class ConstantKeys(_ConstantOperand):
    """Projected inputs against constant keys: the constant is the right operand."""

    left = False


def _convert(module: nn.Module, shape: tuple[int, ...]) -> bytes:
    from edge_export.conversion.litert import convert_module

    return convert_module(module, (torch.zeros(shape),))


def _int8_sqnr(module: nn.Module, shape: tuple[int, ...], float_bytes: bytes) -> float:
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization import check_integer
    from edge_export.runtime.interpreter import TFLiteRunner

    calibration = synthetic_calibration([InputSpec(shape, name="x")], n=16, seed=2)
    model = read_flatbuffer(flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT8, calibration), origin="test")
    assert check_integer(model).fully_integer
    runner, signal, noise = TFLiteRunner(model), 0.0, 0.0
    for seed in range(4):
        x = np.random.default_rng(100 + seed).standard_normal(shape).astype(np.float32)
        want = module(torch.from_numpy(x)).detach().numpy().astype(np.float64)
        got = np.asarray(runner.run([x])[0], np.float64)
        signal, noise = signal + np.sum(want**2), noise + np.sum((want - got) ** 2)
    return float(10 * np.log10(signal / max(noise, 1e-30)))


@pytest.fixture(scope="module")
def padded_pool():
    module = make(PaddedMaxPool)
    return module, _convert(module, (1, 3, 16, 16))


def test_the_max_pool_padding_is_found(padded_pool):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization.max_pool_padding import max_pool_paddings

    _, float_bytes = padded_pool
    (found,) = max_pool_paddings(read_flatbuffer(flatbuffer_recipes.prepared_for_int8(float_bytes), origin="test"))
    assert found[2] == -32.0  # the -inf, saturated for int8


def test_the_padded_tensor_takes_its_input_range_and_keeps_a_pad_value_above_it(monkeypatch):
    import edge_export.quantization.max_pool_padding as padding

    def qsv(low, high):
        return {"min": np.float32([[low]]), "max": np.float32([[high]])}

    monkeypatch.setattr(padding, "max_pool_paddings", lambda model: [("x", "padded", -32.0)])
    result, changed = padding.without_max_pool_padding(None, {"x": qsv(0.0, 0.9), "padded": qsv(-32.0, 0.9)})
    assert changed == ["padded"] and result["padded"]["min"].shape == (1, 1) and np.min(result["padded"]["min"]) == 0.0
    # inputs below the pad value: the pad can be the max of a window, so its range stays
    result, changed = padding.without_max_pool_padding(None, {"x": qsv(-40.0, 0.9), "padded": qsv(-40.0, 0.9)})
    assert changed == [] and np.min(result["padded"]["min"]) == -40.0
    assert padding.without_max_pool_padding(None, {"x": qsv(np.nan, 0.9), "padded": qsv(-32.0, 0.9)})[1] == []


def test_a_padded_max_pool_quantizes_with_its_inputs_range(padded_pool):
    """Before: the ReLU's range stretched to -32, 26.8 dB (35.5 after)."""
    module, float_bytes = padded_pool
    assert _int8_sqnr(module, (1, 3, 16, 16), float_bytes) >= 32.0


def test_a_matmul_of_constant_queries_quantizes_per_tensor_and_computes():
    """Before: per-channel constant queries, and the int8 scores were zeros: 1.9 dB (33.7 after)."""
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization.constant_matmul_operands import matmuls_of_constants

    torch.manual_seed(0)
    module = make(ConstantQueries)
    float_bytes = _convert(module, (1, 10, 16))
    assert len(matmuls_of_constants(read_flatbuffer(float_bytes, origin="test"))) == 1
    assert _int8_sqnr(module, (1, 10, 16), float_bytes) >= 25.0


@pytest.mark.parametrize("module_class, constant_on_left", [(ConstantQueries, True), (ConstantKeys, False)])
def test_the_mixed_precision_variants_quantize_the_constant_operand_per_tensor_too(module_class, constant_on_left):
    """Sensitivity and mixed precision build their own recipes: at int8, and with the matmul at int16
    (a constant on the left keeps it int8: LiteRT has no int16 x int8 in that order)."""
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization.constant_matmul_operands import matmuls_of_constants
    from edge_export.quantization.sensitivity import RecipeQuantizer
    from edge_export.runtime.interpreter import TFLiteRunner

    torch.manual_seed(0)
    module = make(module_class)
    float_bytes = _convert(module, (1, 10, 16))
    quantizer = RecipeQuantizer(float_bytes, synthetic_calibration([InputSpec((1, 10, 16), name="x")], n=16, seed=2))
    ((matmul, on_left),) = matmuls_of_constants(quantizer.float_model)
    assert on_left == constant_on_left
    x = np.random.default_rng(7).standard_normal((1, 10, 16)).astype(np.float32)
    want = module(torch.from_numpy(x)).detach().numpy()
    variants = (quantizer.quantize("int8"), quantizer.quantize("int8", {matmul: "int16"}), quantizer.quantize("int16"),
                quantizer.quantize("float", {matmul: "int8"}))  # float with the matmul alone raised, as sensitivity measures it
    for variant in variants:
        got = TFLiteRunner(read_flatbuffer(variant, origin="test")).run([x])[0]
        assert 10 * np.log10((want**2).sum() / ((want - got) ** 2).sum()) >= 25.0
