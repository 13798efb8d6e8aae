"""Test helpers for the Edge TPU tests: PT2E int8 export of small models built in code, through the
product's own PT2E recipe (edge_export.quantization.pt2e), without the rest of the pipeline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_CACHE: dict[str, bytes] = {}


def export_int8(
    module, example_inputs, *, channels_last: bool = True, calib_batches: int = 4, seed: int = 0, annotation_fixes: bool = True
) -> bytes:
    """Quantize ``module`` with PT2E (int8 activations, per-channel int8 weights) and convert it;
    ``annotation_fixes=False`` gives litert-torch's plain recipe (see prepare_and_convert_pt2e)."""
    import torch
    from litert_torch.quantize.quant_config import QuantConfig

    from edge_export.config import QuantizeMode
    from edge_export.conversion.litert import convert_module, plan_channels_last, wrap_channels_last
    from edge_export.quantization.pt2e import prepare_and_convert_pt2e

    torch.manual_seed(seed)
    module = module.eval()
    example_inputs = tuple(example_inputs)
    with torch.no_grad():
        out = module(*example_inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if channels_last:
        plan = plan_channels_last([x.dim() for x in example_inputs], [o.dim() for o in outs])
        if plan.active:
            module = wrap_channels_last(module, plan)
            example_inputs = tuple(
                x.permute(0, 2, 3, 1).contiguous() if x.dim() == 4 else x for x in example_inputs
            )
    gen = torch.Generator().manual_seed(seed)
    batches = [
        tuple(torch.randn(x.shape, generator=gen) if x.is_floating_point() else x for x in example_inputs)
        for _ in range(calib_batches)
    ]
    converted, quantizer = prepare_and_convert_pt2e(
        module, example_inputs, QuantizeMode.INT8, batches, annotation_fixes=annotation_fixes
    )
    return convert_module(converted, example_inputs, quant_config=QuantConfig(pt2e_quantizer=quantizer))


def cached_int8(key: str, build, **options) -> bytes:
    """Export once per test session: conversions take seconds on this machine."""
    if key not in _CACHE:
        module, inputs = build()
        _CACHE[key] = export_int8(module, inputs, **options)
    return _CACHE[key]


@pytest.fixture
def fake_compiler_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


def edit_flatbuffer(data: bytes, change) -> bytes:
    """Apply ``change(model_t)`` to the schema object tree of ``data`` and serialize it again."""
    from ai_edge_litert.tools import flatbuffer_utils

    model_t = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    change(model_t)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model_t))


def opcode_of(model_t, op) -> str:
    from ai_edge_litert import schema_py_generated as schema

    code = model_t.operatorCodes[op.opcodeIndex]
    value = max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)
    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}[value]


def find_op(model_t, opcode: str):
    for op in model_t.subgraphs[0].operators:
        if opcode_of(model_t, op) == opcode:
            return op
    raise LookupError(opcode)


@pytest.fixture(scope="session")
def small_cnn_int8() -> bytes:
    """conv -> relu -> maxpool 2x2 -> global mean -> linear: CONV_2D, MAX_POOL_2D, MEAN, FULLY_CONNECTED."""

    def build():
        import torch
        from torch import nn

        class SmallCNN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, 1, 1)
                self.relu = nn.ReLU()
                self.pool = nn.MaxPool2d(2)
                self.fc = nn.Linear(8, 10)

            def forward(self, x):
                x = self.pool(self.relu(self.conv(x)))
                return self.fc(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))

        return SmallCNN().eval(), (torch.randn(1, 3, 8, 8),)

    return cached_int8("small_cnn", build)


# The fake `edgetpu_compiler` (the only stand-in, at the process boundary) lives in cli_harness.py,
# shared with the alignment tests.
from cli_harness import FAKE_COMPILER_PROLOGUE, write_fake_compiler  # noqa: E402,F401
