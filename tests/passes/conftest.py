"""The pass tests' model (passes_models.TwoBranches), converted and quantized once per session
(the fx and flatbuffer pass modules share it; nothing mutates it)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from passes_models import SHAPE, TwoBranches


@dataclass(frozen=True)
class Converted:
    module: torch.nn.Module
    example: tuple
    fp32: bytes  # the converter's bytes (buffers as it left them)
    int8: bytes  # the flatbuffer quantizer's bytes (int8 I/O, nothing shared yet)


@pytest.fixture(scope="session")
def converted() -> Converted:
    from edge_export.config import QuantizeMode
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    torch.manual_seed(0)
    module = TwoBranches().eval()
    example = (torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)),)
    fp32 = convert_module(module, example)
    from edge_export.config import InputSpec

    calibration = synthetic_calibration([InputSpec(shape=SHAPE, name="x")], 4, seed=1)
    int8 = quantize_flatbuffer(fp32, QuantizeMode.INT8, calibration)
    return Converted(module, example, fp32, int8)
