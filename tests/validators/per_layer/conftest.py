"""Models from layer_models.py, converted once per session for the per-layer parity tests."""

from __future__ import annotations

import copy

import pytest
import torch
from layer_models import INPUT_SHAPE, Net, make_net, pt2e_int8, samples_for
from torch import nn

from edge_export.conversion.litert import convert_module, plan_channels_last, wrap_channels_last


@pytest.fixture(scope="session")
def net() -> Net:
    return make_net()


@pytest.fixture(scope="session")
def example() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(*INPUT_SHAPE),)


@pytest.fixture(scope="session")
def net_fp32_bytes(net, example) -> bytes:
    return convert_module(net, example)


@pytest.fixture(scope="session")
def net_channels_last_bytes(net, example) -> bytes:
    wrapped = wrap_channels_last(copy.deepcopy(net), plan_channels_last([4], [2]))
    return convert_module(wrapped, (example[0].permute(0, 2, 3, 1).contiguous(),))


@pytest.fixture(scope="session")
def net_int8_bytes(net, example) -> bytes:
    return pt2e_int8(net, example, samples_for(INPUT_SHAPE, 8, seed=7))


@pytest.fixture(scope="session")
def encoder() -> nn.Module:
    torch.manual_seed(2)
    return nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()


@pytest.fixture(scope="session")
def encoder_fp32_bytes(encoder) -> bytes:
    torch.manual_seed(3)
    return convert_module(encoder, (torch.randn(1, 5, 16),))
