"""The one-operator models of the operator coverage sweep (``benchmarks/op_coverage.py``).

Each case is a tiny ``nn.Module`` around one PyTorch operator or pattern edge models use, with
example inputs, built in code (random weights, fixed seed). ``CASES`` maps the case name to
``(family, builder)``; a builder returns ``(module, example_inputs)``. Shapes are small (a few
thousand elements) so one export takes seconds; image-like cases are NCHW, sequence cases
``[batch, tokens, features]``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["CASES", "build_case"]


class Lambda(nn.Module):
    """forward() is ``fn(*inputs)``; constants the function needs are registered buffers, so
    torch.export sees them as the graph's constants."""

    def __init__(self, fn: Callable, **buffers: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for name, value in buffers.items():
            self.register_buffer(name, value)

    def forward(self, *inputs):
        return self.fn(self, *inputs)


def _image(c: int = 4, h: int = 8, w: int = 8) -> tuple[torch.Tensor]:
    return (torch.randn(1, c, h, w),)


def _seq(t: int = 8, d: int = 16) -> tuple[torch.Tensor]:
    return (torch.randn(1, t, d),)


def _fn(fn: Callable, example: Callable = _seq, **buffers: torch.Tensor) -> Callable:
    return lambda: (Lambda(fn, **buffers), example())


def _layer(make: Callable[[], nn.Module], example: Callable = _image) -> Callable:
    return lambda: (make(), example())


class _Attention(nn.Module):
    """Scaled dot-product attention over a projected sequence, optionally masked."""

    def __init__(self, mask: str | None, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.qkv, self.out, self.heads, self.mask = nn.Linear(d, 3 * d), nn.Linear(d, d), heads, mask
        self.register_buffer("causal", torch.tril(torch.ones(8, 8)).log())  # zeros and -inf

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.mask == "is_causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.mask == "additive_inf":  # the -inf causal mask then a softmax, written out
            scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + self.causal[:t, :t]
            y = scores.softmax(-1) @ v
        elif self.mask == "bool":
            keep = torch.ones(t, t, dtype=torch.bool).tril()
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        else:
            y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class _Recurrent(nn.Module):
    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(16, 16, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


class _Embedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(32, 16)

    def forward(self, ids):
        return self.table(ids)


def _ids() -> tuple[torch.Tensor]:
    return (torch.randint(0, 32, (1, 8)),)


def _grid() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.rand(1, 6, 6, 2) * 2 - 1


CASES: dict[str, tuple[str, Callable[[], tuple[nn.Module, tuple]]]] = {
    # sorting and selection
    "topk": ("sort/select", _fn(lambda m, x: torch.topk(x, 3, dim=-1).values)),
    "topk_indices": ("sort/select", _fn(lambda m, x: torch.topk(x, 3, dim=-1).indices.float())),
    "sort": ("sort/select", _fn(lambda m, x: torch.sort(x, dim=-1).values)),
    "argsort": ("sort/select", _fn(lambda m, x: torch.argsort(x, dim=-1).float())),
    "argmax": ("sort/select", _fn(lambda m, x: torch.argmax(x, dim=-1).float())),
    "argmin": ("sort/select", _fn(lambda m, x: torch.argmin(x, dim=-1).float())),
    "max_dim": ("sort/select", _fn(lambda m, x: torch.max(x, dim=-1).values)),
    # scans
    "cumsum": ("scan", _fn(lambda m, x: torch.cumsum(x, dim=-1))),
    "cumprod": ("scan", _fn(lambda m, x: torch.cumprod(x.sigmoid() + 0.5, dim=-1))),
    # gather / scatter / indexing
    "gather": ("index", _fn(lambda m, x: torch.gather(x, -1, m.idx), idx=torch.randint(0, 16, (1, 8, 4)))),
    "index_select": ("index", _fn(lambda m, x: torch.index_select(x, 2, m.idx), idx=torch.tensor([0, 3, 5, 9]))),
    "advanced_index": ("index", _fn(lambda m, x: x[:, :, m.idx], idx=torch.tensor([1, 2, 7, 15]))),
    "scatter": ("index", _fn(lambda m, x: torch.zeros_like(x).scatter(-1, m.idx, x[..., :4]), idx=torch.tensor([[[0, 5, 9, 15]] * 8]))),
    "index_put": ("index", _fn(lambda m, x: torch.index_put(x[0], (m.idx,), x[0, :2] * 2).unsqueeze(0), idx=torch.tensor([1, 4]))),
    "narrow_slice": ("index", _fn(lambda m, x: x[:, 1:7:2, 3:11])),
    # selection by condition
    "where": ("elementwise", _fn(lambda m, x: torch.where(x > 0, x, 0.1 * x))),
    "masked_fill": ("elementwise", _fn(lambda m, x: x.masked_fill(m.mask, -1.0), mask=torch.rand(1, 8, 16) > 0.5)),
    "clamp": ("elementwise", _fn(lambda m, x: torch.clamp(x, -0.5, 0.7))),
    "residual_add_ranks": ("elementwise", lambda: (_Residual(), _seq())),
    # padding other than with a constant
    "reflect_pad1d": ("padding", _fn(lambda m, x: F.pad(x, (2, 2), mode="reflect"))),
    "reflect_pad2d": ("padding", _layer(lambda: nn.ReflectionPad2d(2))),
    "replicate_pad1d": ("padding", _layer(lambda: nn.ReplicationPad1d(3), _seq)),
    "replicate_pad2d": ("padding", _layer(lambda: nn.ReplicationPad2d(2))),
    # layout
    "roll": ("layout", _fn(lambda m, x: torch.roll(x, 3, dims=-1))),
    "flip": ("layout", _fn(lambda m, x: torch.flip(x, dims=[-1]))),
    "permute": ("layout", _fn(lambda m, x: x.permute(0, 2, 1).contiguous() * 2)),
    "expand": ("layout", _fn(lambda m, x: x[:, :1].expand(1, 8, 16) + x)),
    "concat_split": ("layout", _fn(lambda m, x: torch.cat(torch.chunk(x, 4, dim=-1)[::-1], dim=-1))),
    "repeat_interleave": ("layout", _fn(lambda m, x: torch.repeat_interleave(x, 2, dim=1))),
    "tril": ("layout", _fn(lambda m, x: torch.tril(x[:, :, :8]))),
    # spatial sampling
    "grid_sample": ("spatial", _fn(lambda m, x: F.grid_sample(x, m.grid, align_corners=False), _image, grid=_grid())),
    "interpolate_nearest": ("spatial", _fn(lambda m, x: F.interpolate(x, scale_factor=2, mode="nearest"), _image)),
    "interpolate_bilinear": ("spatial", _fn(lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear"), _image)),
    "interpolate_bilinear_ac": ("spatial", _fn(lambda m, x: F.interpolate(x, size=(13, 13), mode="bilinear", align_corners=True), _image)),
    "interpolate_bicubic": ("spatial", _fn(lambda m, x: F.interpolate(x, scale_factor=2, mode="bicubic"), _image)),
    "pixel_shuffle": ("spatial", _fn(lambda m, x: F.pixel_shuffle(x, 2), _image)),
    "pixel_unshuffle": ("spatial", _fn(lambda m, x: F.pixel_unshuffle(x, 2), _image)),
    "unfold": ("spatial", _fn(lambda m, x: F.unfold(x, 3, padding=1), _image)),
    # normalization
    "batch_norm": ("norm", _layer(lambda: nn.BatchNorm2d(4).eval())),
    "layer_norm": ("norm", _layer(lambda: nn.LayerNorm(16), _seq)),
    "group_norm": ("norm", _layer(lambda: nn.GroupNorm(2, 4))),
    "instance_norm": ("norm", _layer(lambda: nn.InstanceNorm2d(4, affine=True))),
    "rms_norm": ("norm", _layer(lambda: nn.RMSNorm(16), _seq)),
    "l2_normalize": ("norm", _fn(lambda m, x: F.normalize(x, dim=-1))),
    # activations
    "relu": ("activation", _layer(nn.ReLU, _seq)),
    "relu6": ("activation", _layer(nn.ReLU6, _seq)),
    "leaky_relu": ("activation", _layer(lambda: nn.LeakyReLU(0.1), _seq)),
    "prelu": ("activation", _layer(lambda: nn.PReLU(4))),
    "elu": ("activation", _layer(nn.ELU, _seq)),
    "gelu": ("activation", _layer(nn.GELU, _seq)),
    "gelu_tanh": ("activation", _layer(lambda: nn.GELU("tanh"), _seq)),
    "silu": ("activation", _layer(nn.SiLU, _seq)),
    "hardswish": ("activation", _layer(nn.Hardswish, _seq)),
    "hardsigmoid": ("activation", _layer(nn.Hardsigmoid, _seq)),
    "mish": ("activation", _layer(nn.Mish, _seq)),
    "sigmoid": ("activation", _layer(nn.Sigmoid, _seq)),
    "tanh": ("activation", _layer(nn.Tanh, _seq)),
    "softplus": ("activation", _layer(nn.Softplus, _seq)),
    "softmax": ("activation", _layer(lambda: nn.Softmax(-1), _seq)),
    "log_softmax": ("activation", _layer(lambda: nn.LogSoftmax(-1), _seq)),
    # elementwise math
    "exp_log": ("math", _fn(lambda m, x: torch.log(torch.exp(x) + 1.0))),
    "sqrt_rsqrt": ("math", _fn(lambda m, x: torch.sqrt(x.abs() + 1) + torch.rsqrt(x.abs() + 1))),
    "pow": ("math", _fn(lambda m, x: torch.pow(x.abs() + 0.1, 1.5))),
    "erf": ("math", _fn(lambda m, x: torch.erf(x))),
    "atan2": ("math", _fn(lambda m, x: torch.atan2(x, x.flip(-1) + 0.1))),
    "remainder": ("math", _fn(lambda m, x: torch.remainder(x * 3, 1.0))),
    "floor_round": ("math", _fn(lambda m, x: torch.floor(x * 4) + torch.round(x * 2))),
    "sin_cos": ("math", _fn(lambda m, x: torch.sin(x) * torch.cos(x))),
    # attention
    "attention": ("attention", lambda: (_Attention(None), _seq())),
    "attention_causal": ("attention", lambda: (_Attention("is_causal"), _seq())),
    "attention_bool_mask": ("attention", lambda: (_Attention("bool"), _seq())),
    "attention_inf_mask": ("attention", lambda: (_Attention("additive_inf"), _seq())),
    "multihead_attention": ("attention", lambda: (_MHA(), _seq())),
    # convolution and linear
    "linear": ("conv/linear", _layer(lambda: nn.Linear(16, 32), _seq)),
    "matmul": ("conv/linear", _fn(lambda m, x: x @ x.transpose(1, 2))),
    "einsum": ("conv/linear", _fn(lambda m, x: torch.einsum("btd,bsd->bts", x, x * 0.5))),
    "conv2d": ("conv/linear", _layer(lambda: nn.Conv2d(4, 8, 3, padding=1))),
    "conv2d_strided_dilated": ("conv/linear", _layer(lambda: nn.Conv2d(4, 8, 3, stride=2, dilation=2, padding=2))),
    "depthwise_conv2d": ("conv/linear", _layer(lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4))),
    "grouped_conv2d": ("conv/linear", _layer(lambda: nn.Conv2d(4, 8, 3, padding=1, groups=2))),
    "conv_transpose2d": ("conv/linear", _layer(lambda: nn.ConvTranspose2d(4, 4, 2, stride=2))),
    "conv1d": ("conv/linear", _layer(lambda: nn.Conv1d(8, 16, 3, padding=1), lambda: (torch.randn(1, 8, 32),))),
    "conv_transpose1d": ("conv/linear", _layer(lambda: nn.ConvTranspose1d(8, 8, 2, stride=2), lambda: (torch.randn(1, 8, 16),))),
    # recurrent
    "lstm": ("recurrent", lambda: (_Recurrent(nn.LSTM), _seq())),
    "gru": ("recurrent", lambda: (_Recurrent(nn.GRU), _seq())),
    # embeddings
    "embedding": ("embedding", lambda: (_Embedding(), _ids())),
    "one_hot": ("embedding", lambda: (Lambda(lambda m, ids: F.one_hot(ids, 32).float()), _ids())),
    # reductions
    "mean": ("reduction", _fn(lambda m, x: x.mean(-1))),
    "mean_spatial": ("reduction", _fn(lambda m, x: x.mean((2, 3)), _image)),
    "sum": ("reduction", _fn(lambda m, x: x.sum(1))),
    "amax": ("reduction", _fn(lambda m, x: x.amax(-1))),
    "var": ("reduction", _fn(lambda m, x: x.var(-1))),
    "logsumexp": ("reduction", _fn(lambda m, x: torch.logsumexp(x, -1))),
    "norm": ("reduction", _fn(lambda m, x: torch.linalg.vector_norm(x, dim=-1))),
    # pooling
    "max_pool2d": ("pooling", _layer(lambda: nn.MaxPool2d(2))),
    "avg_pool2d": ("pooling", _layer(lambda: nn.AvgPool2d(2))),
    "avg_pool2d_ceil_covering": ("pooling", _layer(lambda: nn.AvgPool2d(16, ceil_mode=True))),
    "adaptive_avg_pool_1": ("pooling", _layer(lambda: nn.AdaptiveAvgPool2d(1))),
    "adaptive_avg_pool_3": ("pooling", _layer(lambda: nn.AdaptiveAvgPool2d(3))),
    "adaptive_max_pool_1": ("pooling", _layer(lambda: nn.AdaptiveMaxPool2d(1))),
    "max_pool1d": ("pooling", _layer(lambda: nn.MaxPool1d(2), lambda: (torch.randn(1, 8, 16),))),
    # distances
    "cdist": ("distance", _fn(lambda m, x: torch.cdist(x, m.centers), centers=torch.randn(1, 5, 16))),
    "cosine_similarity": ("distance", _fn(lambda m, x: F.cosine_similarity(x, m.other, dim=-1), other=torch.randn(1, 8, 16))),
}


class _Residual(nn.Module):
    """A transformer's residual add around a Linear: litert-torch adds the Linear's [T, D] to [1, T, D]."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return x + self.fc(x)


class _MHA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def build_case(name: str) -> tuple[nn.Module, tuple]:
    """The case's module (eval mode) and example inputs, the same on every call."""
    torch.manual_seed(0)
    module, example = CASES[name][1]()
    return module.eval(), example
