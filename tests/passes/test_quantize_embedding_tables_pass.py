"""quantize_embedding_tables_pass: a text encoder's embedding gather reads an integer table instead of
a float one followed by a QUANTIZE, with the same outputs bit for bit, so the model is fully integer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.config import InputSpec, QuantizeMode

VOCAB, WIDTH, TOKENS = 50, 16, 8


class TokenEncoder(torch.nn.Module):
    """Embedding, then a linear layer and a LayerNorm: what a text encoder's first block reads."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.norm = torch.nn.LayerNorm(WIDTH)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(self.embed(ids)))


def _quantized(mode: QuantizeMode) -> bytes:
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    torch.manual_seed(0)
    example = (torch.arange(TOKENS).reshape(1, TOKENS) * 6,)
    fp32 = convert_module(TokenEncoder().eval(), example)
    calibration = synthetic_calibration([InputSpec((1, TOKENS), "int64", name="ids")], 8, seed=1, like=example)
    return quantize_flatbuffer(fp32, mode, calibration)


@pytest.fixture(scope="module")
def int8_model() -> bytes:
    return _quantized(QuantizeMode.INT8)


def _run(data: bytes, ids: np.ndarray) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=bytes(data))
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    interpreter.set_tensor(detail["index"], ids.astype(detail["dtype"]))
    interpreter.invoke()
    return [interpreter.get_tensor(o["index"]) for o in interpreter.get_output_details()]


def _operators(model) -> list[str]:
    from edge_export.passes.flatbuffer.model_graph import opcode_name

    mutable = model.mutable()
    return [opcode_name(mutable, op) for op in mutable.subgraphs[0].operators]


def _rewritten(data: bytes):
    from edge_export.passes.flatbuffer import quantize_embedding_tables_pass, run_flatbuffer_passes

    return run_flatbuffer_passes(data, [quantize_embedding_tables_pass])


def _same_outputs(before: bytes, after: bytes) -> None:
    rng = np.random.default_rng(3)
    for _ in range(12):
        ids = rng.integers(0, VOCAB, (1, TOKENS))
        for x, y in zip(_run(before, ids), _run(after, ids)):
            np.testing.assert_array_equal(x, y)


def test_the_lookup_reads_an_integer_table_and_computes_the_same(int8_model):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization.selection import check_integer

    before = read_flatbuffer(int8_model, "the int8 model")
    assert not check_integer(before).fully_integer  # the float table and the QUANTIZE after its gather
    result = _rewritten(int8_model)
    assert result.modified_by == ("quantize_embedding_tables_pass",)
    after = result.model
    assert check_integer(after).fully_integer
    assert _operators(before).count("QUANTIZE") == _operators(after).count("QUANTIZE") + 1
    assert after.size_bytes < before.size_bytes - VOCAB * WIDTH * 2  # float32 table -> int8
    _same_outputs(int8_model, after.data)


def test_int16_activations_get_an_int16_table():
    data = _quantized(QuantizeMode.INT16X8)
    result = _rewritten(data)
    assert result.modified_by == ("quantize_embedding_tables_pass",)
    _same_outputs(data, result.model.data)


def test_quantized_rows_round_half_to_even_and_saturate():
    from edge_export.passes.flatbuffer.quantize_embedding_tables_pass import quantized_rows

    table = np.array([[0.5, -0.5, 1.5, -1.5, 1000.0, -1000.0]], dtype=np.float32)
    np.testing.assert_array_equal(quantized_rows(table, 1.0, 0, "INT8"), [[0, 0, 2, -2, 127, -128]])
    np.testing.assert_array_equal(quantized_rows(table, 0.5, 3, "INT16"), [[4, 2, 6, 0, 2003, -1997]])


def test_a_lookup_without_a_quantize_after_it_is_left_alone(int8_model):
    """A float model (nothing quantizes the gather) and the rewritten model (nothing left) are unchanged."""
    from edge_export.conversion.litert import convert_module

    example = (torch.zeros(1, TOKENS, dtype=torch.int64),)
    fp32 = convert_module(TokenEncoder().eval(), example)
    assert _rewritten(fp32).modified_by == ()
    assert _rewritten(_rewritten(int8_model).model).modified_by == ()
