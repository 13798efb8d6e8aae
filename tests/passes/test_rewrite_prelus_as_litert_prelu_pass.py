"""rewrite_prelus_as_litert_prelu_pass: nn.PReLU becomes LiteRT's PRELU (litert-torch wrote RELU,
MUL, MUL, SUB), computes PyTorch's values, and a PReLU CNN calibrated on real images is fully
integer with PRELU above 30 dB on cpu and micro."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edge_export.passes.fx import rewrite_prelus_as_litert_prelu_pass


class PReLUCNN(nn.Module):
    """A face-detector-like block: conv, BatchNorm, per-channel PReLU; then a shared PReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1, self.act1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.PReLU(8)
        self.conv2, self.bn2, self.act2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.PReLU()
        self.head = nn.Conv2d(16, 10, 3, padding=1)
        with torch.no_grad():  # trained PReLUs hold distinct slopes, not PyTorch's 0.25 everywhere
            self.act1.weight.copy_(torch.linspace(0.05, 0.4, 8))
            self.act2.weight.fill_(0.15)

    def forward(self, x):
        return self.head(self.act2(self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x)))))))


class Sequences(nn.Module):
    """PReLU on [N, C, L] (after a Conv1d) and on [N, C] (after a Linear)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.act1 = nn.Conv1d(2, 4, 3), nn.PReLU(4)
        self.fc, self.act2 = nn.Linear(4, 6), nn.PReLU(6)

    def forward(self, x):
        y = self.act1(self.conv(x))
        return self.act2(self.fc(y.mean(-1)))


def _digits(count: int) -> np.ndarray:
    """scikit-learn's bundled handwritten digits, 16x16 in [0, 1]: realistic, local, no download."""
    from sklearn.datasets import load_digits

    images = torch.from_numpy((load_digits().images[:count] / 16.0).astype(np.float32)[:, None])
    return torch.nn.functional.interpolate(images, size=(16, 16), mode="bilinear").numpy()


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    model = PReLUCNN()
    with torch.no_grad():  # BatchNorm statistics measured on the digits, as training would leave them
        model.train()
        images = torch.from_numpy(_digits(512))
        for start in range(0, 512, 64):
            model(images[start:start + 64])
    return model.eval()


def _opcodes(model_bytes: bytes) -> list[str]:
    from edge_export.flatbuffer import read_flatbuffer

    return [op.opcode for op in read_flatbuffer(model_bytes).operators]


def test_litert_torch_decomposes_prelu_without_the_pass():
    from edge_export.conversion.litert import convert_module

    # what the pass is for; when a litert-torch release lowers prelu to PRELU, the pass can go
    ops = _opcodes(convert_module(_cnn(), (torch.from_numpy(_digits(1)),)))
    assert "PRELU" not in ops and {"RELU", "MUL", "SUB"} <= set(ops)


def test_the_cnn_converts_to_prelu_and_computes_the_same():
    from edge_export.conversion.litert import convert_module
    from edge_export.runtime.interpreter import TFLiteRunner

    module, example = _cnn(), (torch.from_numpy(_digits(8)),)
    graph = torch.export.export(module, example).module()
    rewrites = rewrite_prelus_as_litert_prelu_pass(graph)
    assert [r.kind for r in rewrites] == ["prelu as PRELU"] * 2
    assert [r.module_path for r in rewrites] == ["act1", "act2"]
    with torch.no_grad():
        want = module(*example)
        assert torch.equal(graph(*example), want)
    ops = _opcodes(model := convert_module(graph, example))
    # PRELU in place of RELU/MUL/MUL/SUB, and no transposes around it inside the NHWC graph
    assert ops.count("PRELU") == 2 and "SUB" not in ops and "RELU" not in ops
    assert ops.count("TRANSPOSE") <= 1  # the NCHW output's; the input's is a RESHAPE for one channel
    (got,) = TFLiteRunner(model).run([example[0].numpy()])
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_sequence_prelus_become_prelu_and_compute_the_same():
    from edge_export.conversion.litert import convert_module
    from edge_export.runtime.interpreter import TFLiteRunner

    torch.manual_seed(0)
    module, x = Sequences().eval(), torch.randn(3, 2, 10)
    graph = torch.export.export(module, (x,)).module()
    assert len(rewrite_prelus_as_litert_prelu_pass(graph)) == 2
    with torch.no_grad():
        want = module(x)
        assert torch.equal(graph(x), want)
    model = convert_module(graph, (x,))
    assert _opcodes(model).count("PRELU") == 2
    (got,) = TFLiteRunner(model).run([x.numpy()])
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_a_graph_without_prelu_is_left_as_it_is():
    graph = torch.export.export(nn.Sequential(nn.Linear(4, 2), nn.ReLU()), (torch.randn(3, 4),)).module()
    code = graph.code
    assert rewrite_prelus_as_litert_prelu_pass(graph) == ()
    assert graph.code == code


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "micro"])
def test_the_int8_cnn_is_fully_integer_with_prelu_above_30_db(tmp_path, target):
    import edge_export

    calibration = tmp_path / "digits.npy"
    np.save(calibration, _digits(64))
    options = {"no_emit_c": True} if target == "micro" else {}
    result = edge_export.export(
        _cnn(), example_inputs=(torch.from_numpy(_digits(1)),), output=tmp_path / "prelu.tflite", target=target,
        quantize="int8", calibration_data=str(calibration), samples=4, quant_backend="pt2e", **options,
    )  # PT2E: the backend that quantizes PRELU (the flatbuffer one quantizes split_prelu_pass's form)
    assert result.exit_code == 0, result.report["verdict"]
    report = result.report
    assert report["quantization"]["fully_integer"] is True
    (output,) = report["validation"]["outputs"]
    assert output["metrics"]["sqnr_db"] >= 30.0  # 36.0 dB (TFLite Micro) and 36.1 dB (LiteRT) measured
    ops = _opcodes((tmp_path / "prelu.tflite").read_bytes())
    assert ops.count("PRELU") == 2 and "SUB" not in ops
