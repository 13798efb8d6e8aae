"""Fixtures for the quantization tests: one small CNN, its float flatbuffer and calibration set,
built once per session."""

from __future__ import annotations

import pytest
import torch
from quantization_models import CNN_SPEC, QuantCNN, make


@pytest.fixture(scope="session")
def cnn() -> torch.nn.Module:
    return make(QuantCNN)


@pytest.fixture(scope="session")
def cnn_float_bytes(cnn) -> bytes:
    from edge_export.conversion.litert import convert_module

    return convert_module(cnn, (torch.zeros(CNN_SPEC.shape),))


@pytest.fixture(scope="session")
def cnn_calibration():
    from edge_export.quantization import synthetic_calibration

    return synthetic_calibration([CNN_SPEC], n=16, seed=1)
