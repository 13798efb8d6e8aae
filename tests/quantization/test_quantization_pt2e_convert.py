"""pt2e.convert_calibrated: torchao's convert without its quantization-aware-training conv + BatchNorm
search, on graphs that keep a BatchNorm node (the zoo's BiT and LeViT paid 13 s a convert for it)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from edge_export.config import QuantizeMode
from edge_export.passes.fx.restore_source_functions_pass import restore_source_functions_pass
from edge_export.quantization import pt2e


class WeightStandardizedConv(torch.nn.Module):
    """BiT's convolution: a BatchNorm in training mode standardizes the weight (no running stats)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        w = self.conv.weight
        w = F.batch_norm(w.reshape(1, 8, -1), None, None, training=True, momentum=0.0, eps=1e-6).reshape_as(w)
        return torch.relu(F.conv2d(x, w, self.conv.bias, padding=1))


class LinearThenBatchNorm(torch.nn.Module):
    """LeViT's MLP: a Linear followed by a BatchNorm1d over the tokens' features."""

    def __init__(self) -> None:
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(16, 24), torch.nn.BatchNorm1d(24)
        self.norm.running_mean.uniform_(-1, 1)
        self.norm.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return self.norm(self.linear(x).flatten(0, 1)).reshape(x.shape[0], x.shape[1], -1) + 1


def _calibrated(module: torch.nn.Module, example: torch.Tensor):
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    exported = torch.export.export(module.eval(), (example,), strict=False).module()
    restore_source_functions_pass(exported)
    prepared = prepare_pt2e(exported, pt2e._float_only(pt2e.make_pt2e_quantizer(QuantizeMode.INT8)))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(4):
            prepared(torch.randn(example.shape, generator=generator))
    return prepared


def _pattern_key(pattern, example_inputs: tuple, is_cuda: bool, kwargs: dict) -> tuple:
    """What a traced pattern depends on: the wrapped function's code and closure (the conv function and
    the per-channel, bias and training flags), the inputs' shapes and dtypes (not their random values)."""

    def spec(value):
        return (tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) else value

    fn = pattern.fn  # torchao's WrapperModule around the pattern function
    closure = tuple(cell.cell_contents for cell in fn.__closure__ or ())
    return fn.__code__, closure, is_cuda, tuple(map(spec, example_inputs)), tuple((k, spec(v)) for k, v in sorted(kwargs.items()))


@pytest.fixture(scope="module")
def traced_patterns() -> dict:
    """torchao's QAT conv + BatchNorm patterns, traced once for the module: its convert traces the
    same 96 patterns, which do not depend on the model, for every model (about 13 s each time)."""
    return {}


def _torchaos_convert(prepared, traced_patterns: dict, monkeypatch):
    """torchao's own convert_pt2e, its search whole, the patterns it traces kept for the next model."""
    from torchao.quantization.pt2e import qat_utils
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    trace = qat_utils._get_aten_graph_module_for_pattern

    def trace_once(pattern, example_inputs, is_cuda=False, **kwargs):
        key = _pattern_key(pattern, example_inputs, is_cuda, kwargs)
        if key not in traced_patterns:
            traced_patterns[key] = trace(pattern, example_inputs, is_cuda, **kwargs)
        return traced_patterns[key]

    with monkeypatch.context() as patched:
        patched.setattr(qat_utils, "_get_aten_graph_module_for_pattern", trace_once)
        return convert_pt2e(copy.deepcopy(prepared), fold_quantize=False)


def _graph_has_batch_norm(prepared) -> bool:
    from torchao.quantization.pt2e.utils import _is_bn_node

    return any(_is_bn_node(node) for node in prepared.graph.nodes)


@pytest.mark.slow  # torchao's own convert traces its 96 patterns: about 13 s, once for the module
@pytest.mark.parametrize(
    "module, example",
    [(WeightStandardizedConv(), torch.randn(1, 3, 8, 8)), (LinearThenBatchNorm(), torch.randn(2, 5, 16))],
    ids=["weight-standardized-conv", "linear-batchnorm"],
)
def test_the_graph_is_torchaos_and_no_qat_pattern_is_traced(module, example, traced_patterns, monkeypatch):
    from torchao.quantization.pt2e import qat_utils

    prepared = _calibrated(module, example)
    assert _graph_has_batch_norm(prepared)  # else torchao skips its search itself and this proves nothing
    expected = _torchaos_convert(prepared, traced_patterns, monkeypatch)

    helper = qat_utils._fold_conv_bn_qat_helper
    traced = []
    original_trace = qat_utils._get_aten_graph_module_for_pattern
    monkeypatch.setattr(qat_utils, "_get_aten_graph_module_for_pattern", lambda *a, **k: traced.append(a) or original_trace(*a, **k))
    converted = pt2e.convert_calibrated(copy.deepcopy(prepared))

    assert traced == []
    assert qat_utils._fold_conv_bn_qat_helper is helper  # put back
    assert converted.code == expected.code
    ours, theirs = converted.state_dict(), expected.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with torch.no_grad():
        assert torch.equal(converted(example), expected(example))


def test_a_graph_with_fake_quantize_modules_keeps_torchaos_folding(monkeypatch):
    """Quantization-aware training (prepare_qat_pt2e) writes fake-quantize modules: there the search
    is torchao's, whole."""
    from torchao.quantization.pt2e import qat_utils
    from torchao.quantization.pt2e.fake_quantize import FakeQuantize

    prepared = _calibrated(WeightStandardizedConv(), torch.randn(1, 3, 8, 8))
    prepared.add_module("trained_fake_quantize", FakeQuantize())

    class Searched(Exception):
        pass

    def search(*args, **kwargs):
        raise Searched

    monkeypatch.setattr(qat_utils, "_get_aten_graph_module_for_pattern", search)
    with pytest.raises(Searched):
        pt2e.convert_calibrated(prepared)
