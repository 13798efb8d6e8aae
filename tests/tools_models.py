"""Small flatbuffers built once per test process for the inspect / bench / fuzz / micro tests.

Not a conftest.py on purpose: other test folders import helpers with ``from conftest import ...``,
which breaks when several conftest modules are loaded; test modules here import the fixture with
``from tools_models import cnn_models`` and the models are cached per process.

A tiny CNN (conv, pool, linear) is converted in fp32 and quantized with plain PT2E to int8
(int8 I/O); a uint8-I/O variant is made from the int8 one by adding the QUANTIZE ops that
TFLite's modify_model_interface tool adds.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import numpy as np
import pytest


def make_cnn():
    import torch

    class SmallCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
            x = torch.nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2)
            return self.fc(x.flatten(1))

    torch.manual_seed(0)
    return SmallCNN().eval()


def pt2e_int8(module, example, calibration):
    """PT2E static int8 through the product's own recipe; returns (quantized graph, flatbuffer)."""
    from litert_torch.quantize.quant_config import QuantConfig

    from edge_export.config import QuantizeMode
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization.pt2e import prepare_and_convert_pt2e

    converted, quantizer = prepare_and_convert_pt2e(module, example, QuantizeMode.INT8, [(b,) for b in calibration])
    return converted, convert_module(converted, example, quant_config=QuantConfig(pt2e_quantizer=quantizer))


def int8_to_uint8_io(model_bytes: bytes) -> bytes:
    """Give an int8-I/O model uint8 I/O: each boundary tensor becomes uint8 (zero point + 128) and a
    QUANTIZE op converts between it and a new int8 tensor, as modify_model_interface does."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    if schema.BuiltinOperator.QUANTIZE not in codes:
        code = schema.OperatorCodeT()
        code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.QUANTIZE
        code.version = 1
        model.operatorCodes.append(code)
        codes.append(schema.BuiltinOperator.QUANTIZE)
    quantize_index = codes.index(schema.BuiltinOperator.QUANTIZE)
    sg = model.subgraphs[0]

    def split(boundary: int) -> int:
        inner = copy.deepcopy(sg.tensors[boundary])
        inner.name = (inner.name or b"") + b"_int8"
        sg.tensors.append(inner)
        outer = sg.tensors[boundary]
        outer.type = schema.TensorType.UINT8
        outer.quantization.zeroPoint = np.asarray(outer.quantization.zeroPoint) + 128
        return len(sg.tensors) - 1

    def quantize_op(src: int, dst: int):
        op = schema.OperatorT()
        op.opcodeIndex = quantize_index
        op.inputs, op.outputs = [src], [dst]
        return op

    new_first, new_last = [], []
    for boundary in list(sg.inputs):
        inner = split(boundary)
        for op in sg.operators:
            op.inputs = [inner if i == boundary else i for i in op.inputs]
        new_first.append(quantize_op(boundary, inner))
    for boundary in list(sg.outputs):
        inner = split(boundary)
        for op in sg.operators:
            op.outputs = [inner if i == boundary else i for i in op.outputs]
        new_last.append(quantize_op(inner, boundary))
    sg.operators = new_first + list(sg.operators) + new_last
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


@dataclass(frozen=True)
class CNNModels:
    module: object  # the float torch module
    quantized_module: object  # the PT2E-converted module (fake-quant reference)
    example: np.ndarray  # (1, 3, 16, 16) float32
    fp32: bytes
    int8: bytes
    uint8_io: bytes


@functools.lru_cache(maxsize=1)
def build_cnn_models() -> CNNModels:
    import litert_torch
    import torch

    from edge_export.processes.library_output import quiet_libraries

    module = make_cnn()
    rng = np.random.default_rng(0)
    example = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    args = (torch.from_numpy(example),)
    calibration = [torch.from_numpy(rng.standard_normal((1, 3, 16, 16)).astype(np.float32)) for _ in range(8)]
    with quiet_libraries():
        fp32 = litert_torch.convert(module, args).model_content()
        quantized_module, int8 = pt2e_int8(module, args, calibration)
    return CNNModels(module, quantized_module, example, fp32, int8, int8_to_uint8_io(int8))


@pytest.fixture(scope="session")
def cnn_models() -> CNNModels:
    return build_cnn_models()
