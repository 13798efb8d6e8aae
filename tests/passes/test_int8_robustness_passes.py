"""The passes that keep int8 quantization working where float works: saturate_infinite_constants_pass
(an additive -inf causal mask), fold_constant_operators_pass on a mask computed in forward(), and
repair_signature_outputs_pass (a GRU returning h_n, whose int8 candidates the verifier refused)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.config import InputSpec, QuantizeMode
from edge_export.errors import FlatbufferError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.passes.flatbuffer import (
    fold_constant_operators_pass,
    repair_signature_outputs_pass,
    run_flatbuffer_passes,
    saturate_infinite_constants_pass,
)
from edge_export.passes.flatbuffer.saturate_infinite_constants_pass import MASK_MAGNITUDE
from edge_export.runtime.interpreter import TFLiteRunner


class CausalSoftmax(torch.nn.Module):
    """Attention-like scores plus a causal mask of zeros and -inf built in forward(), then softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        mask = torch.tril(torch.ones(8, 8)).log()
        return (self.fc(x) + mask).softmax(-1)


class Gru(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(8, 16, batch_first=True)

    def forward(self, x):
        return self.gru(x)  # output and h_n: h_n is also read inside the graph


def _sqnr(reference: np.ndarray, measured: np.ndarray) -> float:
    return float(10 * np.log10((reference**2).sum() / ((measured - reference) ** 2).sum()))


@pytest.fixture(scope="module")
def mask_model():
    from edge_export.conversion.litert import convert_module

    torch.manual_seed(0)
    module = CausalSoftmax().eval()
    return module, convert_module(module, (torch.randn(2, 8, 8),))


def _constants(model):
    return [model.constant(t.index) for t in model.tensors if t.is_constant and t.dtype == "float32"]


@pytest.mark.slow
def test_the_mask_is_folded_and_its_infinities_saturated(mask_model):
    _, fp32 = mask_model
    model = read_flatbuffer(fp32)
    assert "LOG" in model.op_counts  # the converter computes the mask at run time
    result = run_flatbuffer_passes(fp32, [fold_constant_operators_pass, saturate_infinite_constants_pass])
    assert result.modified_by == ("fold_constant_operators_pass", "saturate_infinite_constants_pass")
    assert not {"LOG", "SELECT_V2"} & set(result.model.op_counts)
    expected = np.where(np.tril(np.ones((8, 8))) > 0, 0.0, -MASK_MAGNITUDE)
    masks = [c for c in _constants(result.model) if c.shape == (8, 8) and np.array_equal(c, expected)]
    assert len(masks) == 1
    assert all(np.isfinite(c).all() for c in _constants(result.model))
    # the folded operators' own constants (the SELECT_V2's condition, the LOG's input) are gone
    read = {i for op in result.model.operators for i in op.inputs}
    assert all(t.index in read for t in result.model.tensors if t.is_constant)


def test_large_finite_weights_are_not_saturated():
    from edge_export.passes.flatbuffer.saturate_infinite_constants_pass import _saturated

    inf = np.float32(np.finfo(np.float32).max)
    assert _saturated(np.array([0.0, -inf], np.float32), 32.0).tolist() == [0.0, -32.0]
    assert _saturated(np.array([100.0, -inf], np.float32), 32.0) is None  # not a mask: left alone
    assert _saturated(np.array([1.0, 2.0], np.float32), 32.0) is None


@pytest.mark.slow
def test_the_masked_softmax_quantizes_fully_integer_with_parity(mask_model):
    from edge_export.quantization import check_integer, synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    module, fp32 = mask_model
    calibration = synthetic_calibration([InputSpec(shape=(2, 8, 8), name="x")], 8, seed=1)
    model = read_flatbuffer(quantize_flatbuffer(fp32, QuantizeMode.INT8, calibration))
    assert check_integer(model).fully_integer
    runner = TFLiteRunner(model)
    xs = [torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    sqnr = _sqnr(np.stack([module(x).detach().numpy() for x in xs]), np.stack([runner.run([x.numpy()])[0] for x in xs]))
    assert sqnr >= 20.0  # the int8 gate; 2.1 dB before the mask was folded and saturated


@pytest.mark.slow
def test_a_gru_s_int8_signature_is_repaired_and_runs():
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    torch.manual_seed(0)
    module, x = Gru().eval(), torch.randn(1, 10, 8)
    calibration = synthetic_calibration([InputSpec(shape=(1, 10, 8), name="x")], 4, seed=1)
    data = quantize_flatbuffer(convert_module(module, (x,)), QuantizeMode.INT8, calibration)
    with pytest.raises(FlatbufferError, match="not an output of subgraph 0"):
        read_flatbuffer(data)  # what every int8 candidate of a GRU ended in
    result = run_flatbuffer_passes(data, [repair_signature_outputs_pass])
    assert result.modified_by == ("repair_signature_outputs_pass",)
    (signature,) = result.model.signatures
    assert set(signature["output_tensors"]) == set(result.model.outputs)
    output, h_n = TFLiteRunner(result.model).run([x.numpy()])
    # the signature's second output is h_n again, the last step of the first (a requantization apart)
    assert h_n.shape == (1, 1, 16)
    np.testing.assert_allclose(h_n[0], output[:, -1], atol=0.02)
    want_output, _ = (t.detach().numpy() for t in module(x))
    cosine = float((want_output * output).sum() / np.linalg.norm(want_output) / np.linalg.norm(output))
    assert cosine > 0.9  # int8 from 4 synthetic calibration samples: close, not exact
    assert run_flatbuffer_passes(result.model, [repair_signature_outputs_pass]).modified_by == ()  # nothing left


class SinePositions(torch.nn.Module):
    """DETR's sine position embedding: positions divided by 10000 ** (2 * (i // 2) / d), a divisor
    computed in forward() from constants, spanning 1 to about 7500."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        dim_t = torch.arange(16, dtype=torch.float32)
        dim_t = 10000 ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / 16)
        return self.fc(x / dim_t)


@pytest.fixture(scope="module")
def sine_positions():
    from edge_export.conversion.litert import convert_module

    torch.manual_seed(0)
    module = SinePositions().eval()
    return module, convert_module(module, (torch.rand(1, 8, 1) * 10,))


def test_constant_arithmetic_is_folded_with_the_kernels_values(sine_positions):
    _, fp32 = sine_positions
    before = read_flatbuffer(fp32)
    assert {"POW", "FLOOR_DIV"} <= set(before.op_counts)
    result = run_flatbuffer_passes(fp32, [fold_constant_operators_pass])
    assert not {"POW", "FLOOR_DIV"} & set(result.model.op_counts)
    x = (np.arange(8, dtype=np.float32) * 1.5).reshape(1, 8, 1)
    np.testing.assert_allclose(TFLiteRunner(result.model).run([x])[0], TFLiteRunner(before).run([x])[0], rtol=1e-6, atol=1e-6)


def test_a_constant_divisor_becomes_a_reciprocal_product_and_int8_runs(sine_positions):
    """Before: int8 DIV node failed at run time (div.cc: data[i] != zero_point), the divisor's small
    values quantized to its zero point. After: a MUL by 1 / divisor, fully integer, parity kept."""
    from edge_export.passes.flatbuffer import multiply_by_reciprocal_pass
    from edge_export.quantization import check_integer, synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    module, fp32 = sine_positions
    folded = run_flatbuffer_passes(fp32, [fold_constant_operators_pass, multiply_by_reciprocal_pass])
    assert "DIV" not in folded.model.op_counts and folded.modified_by[-1] == "multiply_by_reciprocal_pass"
    assert any(t.name.endswith(";reciprocal") for t in folded.model.tensors)
    x = (np.arange(8, dtype=np.float32) * 1.5).reshape(1, 8, 1)
    np.testing.assert_allclose(TFLiteRunner(folded.model).run([x])[0], module(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    calibration = synthetic_calibration([InputSpec(shape=(1, 8, 1), name="x")], 16, seed=1, like=[np.random.default_rng(0).uniform(0, 10, (1, 8, 1)).astype(np.float32)])
    model = read_flatbuffer(quantize_flatbuffer(fp32, QuantizeMode.INT8, calibration))
    assert check_integer(model).fully_integer and "DIV" not in model.op_counts
    runner = TFLiteRunner(model)
    xs = [np.random.default_rng(s).uniform(0, 10, (1, 8, 1)).astype(np.float32) for s in range(4)]
    sqnr = _sqnr(np.stack([module(torch.from_numpy(x)).detach().numpy() for x in xs]), np.stack([runner.run([x])[0] for x in xs]))
    assert sqnr >= 25.0


def test_divisors_that_cannot_be_inverted_are_left_alone():
    from edge_export.passes.flatbuffer.multiply_by_reciprocal_pass import _reciprocal

    class Op:
        inputs, outputs = [0, 1], [2]

    for divisor in ([1.0, 0.0], [2.0, np.inf], [1e-45, 1.0]):
        assert _reciprocal_of(divisor, _reciprocal, Op) is None
    np.testing.assert_array_equal(_reciprocal_of([2.0, 4.0], _reciprocal, Op), np.float32([0.5, 0.25]))


def _reciprocal_of(divisor, reciprocal, op):
    """``multiply_by_reciprocal_pass._reciprocal`` on a DIV by ``divisor`` in a hand-built graph."""
    from ai_edge_litert import schema_py_generated as schema

    from edge_export.passes.flatbuffer.graph_edits import opcode_index

    model = schema.ModelT()
    model.operatorCodes, model.buffers = [], [schema.BufferT()]
    sg = schema.SubGraphT()
    sg.tensors = []
    for name, value in (("x", None), ("d", np.asarray(divisor, np.float32)), ("y", None)):
        tensor = schema.TensorT()
        tensor.name, tensor.type, tensor.shape, tensor.buffer = name, schema.TensorType.FLOAT32, [2], 0
        if value is not None:
            buffer = schema.BufferT()
            buffer.data = np.frombuffer(value.astype("<f4").tobytes(), dtype=np.uint8)
            model.buffers.append(buffer)
            tensor.buffer = len(model.buffers) - 1
        sg.tensors.append(tensor)
    op.opcodeIndex = opcode_index(model, schema.BuiltinOperator.DIV)
    return reciprocal(model, sg, op)


def test_the_mixed_precision_quantizer_starts_from_the_same_float_model(sine_positions):
    """Sensitivity and mixed precision quantize the float model as the flatbuffer backend does: its
    int8 variants have no DIV by a constant either, so they run."""
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.sensitivity import RecipeQuantizer

    _, fp32 = sine_positions
    calibration = synthetic_calibration([InputSpec(shape=(1, 8, 1), name="x")], 8, seed=1)
    model = read_flatbuffer(RecipeQuantizer(fp32, calibration).quantize("int8"))
    assert "DIV" not in model.op_counts
    x = (np.arange(8, dtype=np.float32) * 1.5).reshape(1, 8, 1)
    assert np.isfinite(TFLiteRunner(model).run([x])[0]).all()


class CosineScores(torch.nn.Module):
    """Swinv2's cosine attention: rows normalised by their 2-norm, written x.abs() ** 2 in the graph."""

    def forward(self, x):
        norm = torch.sqrt((x.abs() * x.abs()).sum(-1, keepdim=True) + 1e-6)
        return x / norm


def test_abs_before_a_square_is_dropped_and_int8_is_fully_integer():
    """ai-edge-quantizer has no ABS recipe: the zoo's Swinv2 kept 16 ABS in float (not fully integer)."""
    from edge_export.conversion.litert import convert_module
    from edge_export.passes.flatbuffer import drop_abs_before_square_pass
    from edge_export.quantization import check_integer, synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    module = CosineScores().eval()
    fp32 = convert_module(module, (torch.randn(1, 6, 8),))
    assert "ABS" in read_flatbuffer(fp32).op_counts  # the premise: the converter keeps |x| before the square
    dropped = run_flatbuffer_passes(fp32, [drop_abs_before_square_pass])
    assert "ABS" not in dropped.model.op_counts
    x = np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32)
    np.testing.assert_array_equal(TFLiteRunner(dropped.model).run([x])[0], TFLiteRunner(read_flatbuffer(fp32)).run([x])[0])
    calibration = synthetic_calibration([InputSpec(shape=(1, 6, 8), name="x")], 8, seed=1)
    assert check_integer(read_flatbuffer(quantize_flatbuffer(fp32, QuantizeMode.INT8, calibration))).fully_integer
