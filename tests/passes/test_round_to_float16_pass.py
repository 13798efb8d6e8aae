"""round_to_float16_pass: weights and every activation rounded to float16, names and I/O kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.flatbuffer import read_flatbuffer
from edge_export.passes.flatbuffer import round_to_float16_pass, run_flatbuffer_passes
from edge_export.runtime.interpreter import Resolver, TFLiteRunner


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)) * 3000.0)


@pytest.fixture(scope="module")
def converted():
    import litert_torch

    from edge_export.processes.library_output import quiet_libraries

    torch.manual_seed(0)
    module = TwoLayers().eval()
    with quiet_libraries():
        model = read_flatbuffer(litert_torch.convert(module, (torch.randn(1, 8),)).model_content())
    return model, run_flatbuffer_passes(model, [round_to_float16_pass]).model


def test_every_float_activation_and_weight_is_a_float16_value(converted):
    model, rounded = converted
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    runner = TFLiteRunner(rounded, resolver=Resolver.BUILTIN, preserve_all_tensors=True)
    runner.run([x])
    for index, tensor in enumerate(model.tensors):  # the original tensors keep index and name
        assert rounded.tensors[index].name == tensor.name
        if tensor.dtype != "float32":
            continue
        if index in model.inputs:  # the input stays what the app feeds; the graph reads its rounding
            index = next(i for i, t in enumerate(rounded.tensors) if t.name == tensor.name + "/rounded")
        value = rounded.constant(index) if tensor.is_constant else runner.tensor(index)
        assert np.array_equal(value, value.astype(np.float16).astype(np.float32)), tensor.name
    assert rounded.input_names == model.input_names and rounded.output_names == model.output_names
    # two CASTs per activation (each operator's output and the model input)
    activations = sum(1 for op in model.operators for i in op.outputs if not model.tensors[i].is_constant)
    assert [op.opcode for op in rounded.operators].count("CAST") == 2 * (activations + 1)


def test_the_rounded_model_differs_from_float32_by_float16_rounding_only(converted):
    model, rounded = converted
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    exact = TFLiteRunner(model, resolver=Resolver.BUILTIN).run([x])[0]
    half = TFLiteRunner(rounded, resolver=Resolver.BUILTIN).run([x])[0]
    assert not np.array_equal(exact, half)
    assert np.allclose(exact, half, rtol=1e-2, atol=1e-2 * np.abs(exact).max())


def test_a_model_without_float_tensors_is_left_alone():
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT()
    model.buffers = [schema.BufferT()]
    sg = schema.SubGraphT()
    t = schema.TensorT()
    t.type, t.shape, t.buffer, t.name = schema.TensorType.INT8, [1], 0, b"x"
    sg.tensors, sg.inputs, sg.outputs, sg.operators = [t], [0], [0], []
    model.subgraphs = [sg]
    assert round_to_float16_pass(model) is False
    assert len(model.buffers) == 1 and sg.operators == []
