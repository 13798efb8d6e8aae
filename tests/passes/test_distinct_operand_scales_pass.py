"""distinct_operand_scales_pass: a PT2E graph whose add reads two slices with the same calibrated
range lowers (it failed in LiteRT's tfl-optimize), and only such operands move, by one float32 step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.config import QuantizeMode
from edge_export.errors import QuantizationError
from edge_export.passes.fx.distinct_operand_scales_pass import distinct_operand_scales_pass
from edge_export.quantization import pt2e


class TokenPooler(torch.nn.Module):
    """The Audio Spectrogram Transformer's pooler: the mean of its two leading tokens, then a head."""

    def __init__(self, pool_same_token: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mix, self.norm = torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)
        self.head_norm, self.head = torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
        self.pool_same_token = pool_same_token

    def forward(self, x):
        h = self.norm(self.mix(x) + x)
        pooled = h[:, 0] + h[:, 0] if self.pool_same_token else (h[:, 0] + h[:, 1]) / 2
        return self.head(self.head_norm(pooled))


def _tokens(seed: int) -> tuple:
    """Inputs whose first two tokens are equal, as an untrained AST's class and distillation tokens."""
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(seed))
    x[:, 1] = x[:, 0]
    return (x,)


def _calibrated(module: torch.nn.Module):
    samples = [_tokens(seed) for seed in range(8)]
    return pt2e.prepare_and_convert_pt2e(module.eval(), samples[0], QuantizeMode.INT8, samples)


@pytest.fixture
def without_the_pass(monkeypatch):
    monkeypatch.setattr(pt2e, "distinct_operand_scales_pass", lambda graph_module: 0)


def _dequantize_scales(graph_module) -> list[float]:
    dq = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    return [n.args[1] for n in graph_module.graph.nodes if n.target == dq]


def test_equal_operand_scales_move_one_float32_step_and_nothing_else(without_the_pass):
    plain, _ = _calibrated(TokenPooler())
    before = _dequantize_scales(plain)
    assert distinct_operand_scales_pass(plain) == 1
    after = _dequantize_scales(plain)
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    assert len(changed) == 1
    old, new = changed[0]
    assert np.float32(new) == np.nextafter(np.float32(old), np.float32(np.inf))
    assert distinct_operand_scales_pass(plain) == 0  # the scales differ now


@pytest.mark.parametrize("pool_same_token", [False, True], ids=["two-equal-tokens", "one-token-twice"])
def test_the_graph_lowers_and_computes_the_float_model(pool_same_token):
    module = TokenPooler(pool_same_token)
    converted, quantizer = _calibrated(module)
    example = _tokens(0)
    data = pt2e.lower_pt2e(converted, quantizer, example)

    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    x = _tokens(100)[0].numpy()
    scale, zero = inp["quantization"]
    interpreter.set_tensor(inp["index"], np.clip(np.round(x / scale + zero), -128, 127).astype(np.int8))
    interpreter.invoke()
    scale, zero = out["quantization"]
    got = (interpreter.get_tensor(out["index"]).astype(np.float32) - zero) * scale
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    assert 10 * np.log10((want**2).sum() / ((want - got) ** 2).sum()) > 20


def test_without_the_pass_litert_refuses_the_graph(without_the_pass):
    """What the pass is for: litert-torch's lowering fails on the same graph without it. (When a
    litert-torch release lowers it, this test fails and the pass can go.)"""
    plain, quantizer = _calibrated(TokenPooler())
    with pytest.raises(QuantizationError, match="same scale constraint"):
        pt2e.lower_pt2e(plain, quantizer, _tokens(0))
