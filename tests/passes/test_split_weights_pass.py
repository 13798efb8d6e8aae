"""split_weights_pass on a float model with every kind of operator it splits (a conv with a fused
ReLU, a depthwise conv, a fully connected head): the float model computes what it did, names and
provenance survive, and ai-edge-quantizer's int8 rounding reproduces W_hi exactly."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.flatbuffer import read_flatbuffer
from edge_export.passes.flatbuffer import run_flatbuffer_passes, split_weights_pass
from edge_export.passes.flatbuffer.split_weights_pass import (
    HI_SUFFIX,
    LO_SUFFIX,
    SPLIT_WEIGHT_OPCODES,
    int8_per_channel,
    splittable_operators,
)

SHAPE = (1, 3, 12, 12)


class ConvDepthwiseHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = nn.functional.relu6(self.depthwise(x))
        return self.head(x.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def fp32() -> bytes:
    from edge_export.conversion.litert import convert_module

    return convert_module(ConvDepthwiseHead().eval(), (torch.zeros(SHAPE),))


@pytest.fixture(scope="module")
def split(fp32):
    from edge_export.flatbuffer import read_model

    chosen = splittable_operators(read_model(fp32))
    return chosen, run_flatbuffer_passes(fp32, [partial(split_weights_pass, operators=chosen)])


def _run(model, xs):
    from edge_export.runtime.interpreter import Resolver, TFLiteRunner

    runner = TFLiteRunner(model, resolver=Resolver.BUILTIN)
    return np.stack([runner.run([x])[0] for x in xs])


def test_every_weighted_operator_is_splittable_and_split(fp32, split):
    chosen, result = split
    before = read_flatbuffer(fp32)
    assert sorted(before.operators[i].opcode for i in chosen) == ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"]
    assert result.modified_by == ("split_weights_pass",)
    after = result.model
    counts = {code: sum(op.opcode == code for op in after.operators) for code in SPLIT_WEIGHT_OPCODES}
    assert counts == {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2}
    assert sum(op.opcode == "ADD" for op in after.operators) == 3 + sum(op.opcode == "ADD" for op in before.operators)


def test_the_split_float_model_computes_what_the_original_does(fp32, split):
    xs = [np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32) for i in range(4)]
    ref, out = _run(read_flatbuffer(fp32), xs), _run(split[1].model, xs)
    assert np.abs(out - ref).max() <= 1e-6 * np.abs(ref).max()  # W_hi + W_lo == W: only the sums' order differs


def test_outputs_and_names_survive_and_the_halves_name_the_original_module(fp32, split):
    from edge_export.graph.provenance import operator_module

    before, after = read_flatbuffer(fp32), split[1].model
    assert after.output_names == before.output_names and after.input_names == before.input_names
    original = {op.index: before.tensors[op.outputs[0]].name for op in before.operators}
    names = {t.name for t in after.tensors}
    for index in split[0]:
        op = before.operators[index]
        for suffix in (HI_SUFFIX, LO_SUFFIX):
            assert original[index] + suffix in names
            ref = operator_module(original[index], op.opcode)
            assert operator_module(original[index] + suffix, op.opcode) == ref
    # the original output tensor is now the ADD's, with the fused activation moved onto it
    adds = [op for op in after.operators if op.opcode == "ADD"]
    assert {after.tensors[op.outputs[0]].name for op in adds} >= {original[i] for i in split[0]}
    conv_module = operator_module(original[split[0][0]], "CONV_2D")
    assert conv_module is not None and conv_module.path == "conv"


def test_w_hi_is_exactly_what_ai_edge_quantizer_writes_back(fp32, split):
    """Quantizing the split model to int8 reproduces W_hi: the int8 codes are those the pass
    rounded to and the dequantized values equal W_hi up to the float32 rounding of the scale."""
    from edge_export.config import InputSpec
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.sensitivity import RecipeQuantizer

    model = split[1].model
    quantized = read_flatbuffer(RecipeQuantizer(model.data, synthetic_calibration([InputSpec(shape=SHAPE, name="x")], 4, seed=1)).quantize("int16"))
    assert quantized.is_fully_integer
    by_name = {t.name: t for t in quantized.tensors}
    checked = 0
    for t in model.tensors:
        if not t.name.endswith(HI_SUFFIX) or not t.is_constant:
            continue
        hi = model.constant(t.index)
        reader = next(op for op in model.operators if len(op.inputs) > 1 and op.inputs[1] == t.index)
        axis = SPLIT_WEIGHT_OPCODES[reader.opcode]
        q_t = by_name[t.name]
        codes = quantized.constant(q_t.index).astype(np.float32)
        scale = np.asarray(q_t.quant.scales, dtype=np.float32).reshape([-1 if d == axis else 1 for d in range(hi.ndim)])
        np.testing.assert_array_equal(codes, np.clip(np.rint(hi / scale), -127, 127))
        np.testing.assert_allclose(codes * scale, hi, rtol=1e-6, atol=0)
        np.testing.assert_array_equal(int8_per_channel(hi, axis), hi)  # idempotent: already on the grid
        checked += 1
    assert checked == 3


def test_an_operator_without_a_constant_filter_is_an_internal_error(fp32):
    from edge_export.errors import InternalError
    from edge_export.flatbuffer import read_model

    model = read_model(fp32)
    not_weighted = next(i for i, op in enumerate(model.subgraphs[0].operators) if i not in splittable_operators(model))
    with pytest.raises(InternalError, match="no constant float filter"):
        split_weights_pass(model, [not_weighted])
    assert split_weights_pass(model, []) is False


class SharedFilter(nn.Module):
    """One conv applied twice: both operators read the same filter tensor."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.relu(self.conv(x)))


@pytest.mark.parametrize("both", [True, False])
def test_a_filter_two_operators_share_is_split_from_its_original_values(both):
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_model

    fp32 = convert_module(SharedFilter().eval(), (torch.zeros(SHAPE),))
    chosen = splittable_operators(read_model(fp32))
    assert len(chosen) == 2
    split = run_flatbuffer_passes(fp32, [partial(split_weights_pass, operators=chosen if both else chosen[:1])]).model
    xs = [np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32) for i in range(2)]
    ref, out = _run(read_flatbuffer(fp32), xs), _run(split, xs)
    assert np.abs(out - ref).max() <= 1e-6 * np.abs(ref).max()
    # no float constant is left that no operator reads (the quantizer would keep it float)
    read = {t for op in split.operators for t in op.inputs}
    assert all(t.index in read for t in split.tensors if t.is_constant)
