"""The device-graph flatbuffer passes every export runs: fold_constant_operators_pass (a ViT-style
attention mask: BROADCAST_TO and SELECT_V2 of constants) and remove_noop_operators_pass (an
identity TRANSPOSE), on converted models; each model computes the same afterwards."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from edge_export.passes.flatbuffer import fold_constant_operators_pass, remove_noop_operators_pass, run_flatbuffer_passes
from edge_export.runtime.interpreter import TFLiteRunner


class MaskedAttention(torch.nn.Module):
    """A class token expanded to the batch, and an all-visible mask built like Hugging Face's (the
    converter leaves a BROADCAST_TO and a SELECT_V2 of constants)."""

    def __init__(self) -> None:
        super().__init__()
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 8))
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        keep = torch.arange(6)[None, None, :, None] >= 0
        mask = torch.where(keep.expand(1, 1, 6, 6), 0.0, float("-inf"))
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), self.fc(x)], 1)
        return ((h @ h.transpose(1, 2))[:, None] + mask).softmax(-1)


class Transposed(torch.nn.Module):
    def forward(self, x):
        return x.transpose(1, 2) + x  # a reader after the TRANSPOSE that does not commute with it


@pytest.fixture(scope="module")
def converted():
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.flatbuffer import align_buffers

    torch.manual_seed(0)
    masked, square = MaskedAttention().eval(), Transposed().eval()
    x, y = torch.randn(1, 5, 8), torch.randn(1, 4, 4)
    return {
        "masked": (masked, x, read_flatbuffer(align_buffers(convert_module(masked, (x,))))),
        "square": (square, y, read_flatbuffer(align_buffers(convert_module(square, (y,))))),
    }


@pytest.mark.slow
def test_constant_broadcast_and_select_are_folded_and_the_model_computes_the_same(converted):
    module, x, model = converted["masked"]
    assert {"BROADCAST_TO", "SELECT_V2"} <= set(model.op_counts)
    result = run_flatbuffer_passes(model, [fold_constant_operators_pass])
    assert result.modified_by == ("fold_constant_operators_pass",)
    assert not {"BROADCAST_TO", "SELECT_V2"} & set(result.model.op_counts)
    assert result.model.num_operators == model.num_operators - 2
    (out,) = TFLiteRunner(result.model).run([x.numpy()])
    np.testing.assert_allclose(out, module(x).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_folding_stops_at_its_size_limit(converted):
    _, _, model = converted["masked"]
    # the mask is 36 values (bool, then float32): a limit below that folds nothing
    assert not run_flatbuffer_passes(model, [partial(fold_constant_operators_pass, max_bytes=16)]).modified


def _with_identity_transpose(model):
    """The square model's TRANSPOSE turned into an identity (perm [0, 1, 2]): a no-op to remove."""
    from edge_export.passes.flatbuffer.model_graph import opcode_name, set_constant

    def make_identity(m) -> bool:
        sg = m.subgraphs[0]
        (op,) = [op for op in sg.operators if opcode_name(m, op) == "TRANSPOSE"]
        set_constant(m, sg, op.inputs[1], np.arange(3, dtype=np.int32))
        return True

    return run_flatbuffer_passes(model, [make_identity]).model


@pytest.mark.slow
def test_an_identity_transpose_is_removed_and_its_reader_reads_the_input(converted):
    _, y, model = converted["square"]
    identity = _with_identity_transpose(model)
    result = run_flatbuffer_passes(identity, [remove_noop_operators_pass])
    assert result.modified and "TRANSPOSE" not in result.model.op_counts
    (out,) = TFLiteRunner(result.model).run([y.numpy()])
    np.testing.assert_allclose(out, (y + y).numpy())  # what the identity-transpose model computes
    # the real transpose is not a no-op
    assert not run_flatbuffer_passes(model, [remove_noop_operators_pass]).modified
