"""Test helpers for the Edge TPU tests: plain PT2E int8 export of small models built in code.

The project's own quantization stage is written elsewhere; these tests only need some full-integer
flatbuffer, so they make one with the recipe litert-torch documents (PT2E static, per-channel).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_CACHE: dict[str, bytes] = {}


def export_int8(module, example_inputs, *, channels_last: bool = True, calib_batches: int = 4, seed: int = 0) -> bytes:
    """Quantize ``module`` with PT2E (int8 activations, per-channel int8 weights) and convert it."""
    import torch
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edge_export.conversion import plan_channels_last, wrap_channels_last

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
    quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    exported = torch.export.export(module, example_inputs).module()
    prepared = prepare_pt2e(exported, quantizer)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _ in range(calib_batches):
            prepared(*[torch.randn(x.shape, generator=gen) if x.is_floating_point() else x for x in example_inputs])
    converted = convert_pt2e(prepared, fold_quantize=False)
    from edge_export.conversion import convert_module

    return convert_module(converted, example_inputs, quant_config=QuantConfig(pt2e_quantizer=quantizer))


def cached_int8(key: str, build) -> bytes:
    """Export once per test session: conversions take seconds on this machine."""
    if key not in _CACHE:
        module, inputs = build()
        _CACHE[key] = export_int8(module, inputs)
    return _CACHE[key]


@pytest.fixture
def fake_compiler_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d
