"""Models built in code, shared by the tests and the benchmarks (no downloads).

Where it lives, and why: a top-level module of the repository, next to ``tests/`` and
``benchmarks/``, so that both import it (the tests through ``tests/conftest.py``, the benchmarks by
putting the repository root on ``sys.path`` as they already do) and neither imports the other. It is
not shipped in the wheel (``pyproject.toml`` packages only ``edge_export*``): these are random-weight
stand-ins for real networks, useful to test and measure edge-export, not to a user of it.

What is here is what was written more than once, or used by both: the tests' small CNN
(``small_cnn``, re-exported by tests/model_zoo.py), the ResNet basic block and MobileNetV2 inverted
residual of the benchmark networks and of the tests' tiny classifiers (``benchmarks/bench_models.py``,
``tests/targets/edgetpu/edgetpu_cli_models.py``), the BatchNorm statistics helper, and the small
standard-architecture models of the Edge TPU mapping tests and benchmark. Definitions (class names,
attribute names, seeds) are exactly those the tests and the benchmark numbers were measured with.
``resnet_like`` keeps torchvision's block layout (one ReLU module called twice, ``downsample``) on
purpose: the Edge TPU preparation's ``split-reused-activation`` rewrite is tested on it.

A class's module path is part of the flatbuffer's tensor names, so models whose module a test
checks stay in their test folder's module (``layer_models.Net`` in tests/validators/per_layer, the failing models
of tests/model_zoo.py whose source file errors quote). The table of recorded real names in
tests/test_provenance.py (``model_zoo.SmallCNN/...``) is text, valid wherever SmallCNN lives.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "SmallCNN",
    "small_cnn",
    "BasicBlock",
    "InvertedResidual",
    "mobilenet_v2_like",
    "random_batchnorm_stats",
    "resnet_like",
    "transformer_encoder_like",
    "gated_ratio_cnn",
    "float16_overflow_cnn",
    "MeanPoolCNN",
    "FlattenPoolCNN",
    "ViTEncoder",
    "hf_vit_encoder",
]


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))


def small_cnn() -> SmallCNN:
    """The tests' default model (and benchmarks/isolation_overhead.py's): seeded, in eval mode."""
    torch.manual_seed(0)
    return SmallCNN().eval()


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + idt)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.use_res else self.block(x)


def _nn():
    import torch.nn as nn

    return nn


def mobilenet_v2_like(num_classes: int = 10, width: int = 8):
    import torch
    nn = _nn()

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            layers = []
            if expand != 1:
                layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
            layers += [
                nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                nn.BatchNorm2d(hidden),
                nn.ReLU6(inplace=True),
                nn.Conv2d(hidden, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.conv = nn.Sequential(*layers)
            self.use_res = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2Like(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = width
            self.features = nn.Sequential(
                nn.Sequential(nn.Conv2d(3, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU6(inplace=True)),
                InvertedResidual(w, w, 1, 1),
                InvertedResidual(w, 2 * w, 2, 6),
                InvertedResidual(2 * w, 2 * w, 1, 6),
                InvertedResidual(2 * w, 4 * w, 2, 6),
                InvertedResidual(4 * w, 4 * w, 1, 6),
                nn.Sequential(nn.Conv2d(4 * w, 16 * w, 1, bias=False), nn.BatchNorm2d(16 * w), nn.ReLU6(inplace=True)),
            )
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(16 * w, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, 1)
            x = torch.flatten(x, 1)
            return self.classifier(x)

    return MobileNetV2Like().eval()


def resnet_like(num_classes: int = 10, width: int = 8):
    import torch
    nn = _nn()

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNetLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = width
            self.conv1 = nn.Conv2d(3, w, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(w)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = nn.Sequential(BasicBlock(w, w, 1), BasicBlock(w, w, 1))
            self.layer2 = nn.Sequential(BasicBlock(w, 2 * w, 2), BasicBlock(2 * w, 2 * w, 1))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(2 * w, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer2(self.layer1(x))
            x = torch.flatten(self.avgpool(x), 1)
            return self.fc(x)

    return ResNetLike().eval()


def transformer_encoder_like(dim: int = 32, seq: int = 16, num_classes: int = 10):
    """Token MLP in, one encoder layer, mean-pool, linear head: the cut must come late."""
    import torch
    nn = _nn()

    class TinyEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(dim, dim)
            self.encoder = nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True)
            self.head = nn.Linear(dim, num_classes)

        def forward(self, x):
            x = torch.relu(self.embed(x))
            x = self.encoder(x)
            return self.head(x.mean(dim=1))

    return TinyEncoder().eval()


class RatioGate(nn.Module):
    """x / (1 + relu(gate(x))): a division of two activations, which TFLite Micro runs (DIV) but the
    Ethos-U55/U65 NPU has no operator for, so Vela leaves it on the CPU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gate = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return x / (torch.relu(self.gate(x)) + 1.0)


def gated_ratio_cnn(num_classes: int = 10):
    """A small CNN with one ``RatioGate`` (module ``ratio``) between two convolutions: the Ethos-U
    tests' model with an operator Vela places on the CPU."""
    torch.manual_seed(0)
    from collections import OrderedDict

    return nn.Sequential(OrderedDict(
        stem=nn.Conv2d(3, 8, 3, padding=1), stem_relu=nn.ReLU(),
        ratio=RatioGate(8),
        conv=nn.Conv2d(8, 8, 3, stride=2, padding=1), relu=nn.ReLU(),
        pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(), head=nn.Linear(8, num_classes),
    )).eval()


class Float16Overflow(nn.Module):
    """A CNN whose middle layer (``amplify``) scales its activations by 1e5 and whose next layer
    (``shrink``) scales them back: float32 computes it exactly, float16 (the GPU delegate's default)
    overflows to Inf at ``amplify``, whose activations reach ~8e4, above float16's 65504."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.amplify = nn.Conv2d(8, 8, 1)
        self.shrink = nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            self.amplify.weight.mul_(1e5)
            self.amplify.bias.mul_(1e5)
            self.shrink.weight.div_(1e5)

    def forward(self, x):
        return self.shrink(torch.relu(self.amplify(torch.relu(self.conv(x)))))


def float16_overflow_cnn() -> Float16Overflow:
    """``Float16Overflow``, seeded, in eval mode (1x3x16x16 inputs)."""
    torch.manual_seed(0)
    return Float16Overflow().eval()


def random_batchnorm_stats(module, seed: int = 0):
    """Give BatchNorms non-trivial running stats so quantization ranges are realistic."""
    import torch
    nn = _nn()

    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return module


class MeanPoolCNN(nn.Module):
    """Issue 24's NHWC case: a CNN pooling with ``x.mean((2, 3))``, how most hand-written CNNs pool
    (the converter reduced it through a TRANSPOSE to NCHW; tests/targets/test_targets_nhwc.py,
    benchmarks/nhwc_layout.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.stem(x).mean((2, 3)))


class FlattenPoolCNN(MeanPoolCNN):
    """The same CNN pooling with an adaptive average pool and ``torch.flatten``."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stem(x)), 1))


class ViTEncoder(nn.Module):
    """A Hugging Face ViT's last hidden state (transformers' ViTModel, no pooler), random weights:
    the class token's ``expand`` is the BROADCAST_TO that split GPU partitions (issue 24)."""

    def __init__(self, config) -> None:
        super().__init__()
        from transformers import ViTModel

        self.vit = ViTModel(config, add_pooling_layer=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vit(pixel_values=x).last_hidden_state


def hf_vit_encoder(layers: int = 4, image_size: int = 224) -> ViTEncoder:
    """``ViTEncoder`` 192 wide with 3 heads, seeded 0 (the device-graph test and benchmark)."""
    from transformers import ViTConfig

    torch.manual_seed(0)
    config = ViTConfig(num_hidden_layers=layers, hidden_size=192, num_attention_heads=3, intermediate_size=768, image_size=image_size)
    return ViTEncoder(config).eval()
