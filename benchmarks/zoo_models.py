"""The zoo's models: real architectures from `transformers` configs, built in code with random weights.

Each builder returns ``(module, example_inputs)``; ``tiny=True`` gives a few-layer, narrow, small-input
variant of the same architecture (the test in tests/test_zoo_builders.py runs those so the builders do
not rot). Nothing is downloaded: configs are written here, models come from ``from_config`` / the
model classes, and weights are PyTorch's default init (``reset_parameters`` of every layer that has
one, after transformers' own init; ``build(..., init="transformers")`` keeps transformers' init).
BatchNorm running statistics are measured on seeded image-like inputs
(``measure_batch_norm_statistics``) so that the outputs carry signal rather than the mean-0/var-1
placeholders a fresh BatchNorm holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BATCH_NORM_PASSES = 4  # forward passes (batch 4 each) that measure the running statistics
SEQUENCE_LENGTH = 128  # text encoders' input length


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str
    kind: str  # image | text | audio | detection: what the inputs are
    build: Callable[[bool], tuple[Any, tuple]]
    note: str = ""


def _wrap(model: Any, names: tuple[str, ...]) -> Any:
    """The model with a forward() that returns the named output tensors (one, or a tuple), not a
    ModelOutput."""
    import torch

    class Outputs(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            out = self.inner(*args)
            picked = tuple(out[n] for n in names)
            return picked[0] if len(picked) == 1 else picked

    wrapped = Outputs(model)
    wrapped.__class__.__name__ = type(model).__name__
    return wrapped.eval()


def pytorch_default_init(model: Any) -> None:
    """Re-draw every layer's parameters with PyTorch's own default init (transformers' init draws
    N(0, 0.02) for most weights); parameters outside such layers (class tokens, position tables)
    keep transformers' init."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "reset_parameters") and callable(module.reset_parameters):
                module.reset_parameters()


def image_like_batch(generator: Any, batch: int, channels: int, height: int, width: int) -> Any:
    """Smooth, natural-image-like pictures (the project's synthetic calibration images) normalized
    with ImageNet's mean and std, as a model's preprocessing would."""
    import numpy as np
    import torch

    from edge_export.quantization.synthetic_calibration import natural_image_like

    rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    mean = np.asarray(IMAGENET_MEAN[:channels], dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(IMAGENET_STD[:channels], dtype=np.float32).reshape(-1, 1, 1)
    pictures = [(natural_image_like(rng, channels, height, width) - mean) / std for _ in range(batch)]
    return torch.from_numpy(np.stack(pictures).astype(np.float32))


def measure_batch_norm_statistics(model: Any, make_batch: Callable[[Any], tuple], seed: int = 0) -> int:
    """Reset every BatchNorm's running statistics and measure them as a cumulative average
    (momentum=None) over BATCH_NORM_PASSES seeded batches in train mode; then eval. Returns how many
    BatchNorm layers were measured."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if norms:
        generator = torch.Generator().manual_seed(seed)
        saved = [m.momentum for m in norms]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        model.train()
        with torch.no_grad():
            for _ in range(BATCH_NORM_PASSES):
                model(*make_batch(generator))
        for m, momentum in zip(norms, saved):
            m.momentum = momentum
    model.eval()
    return len(norms)


INITS = ("pytorch", "transformers")
_init = ["pytorch"]  # build() sets it for the builder it calls


def _finish(model: Any, example: tuple, outputs: tuple[str, ...], make_batch: Callable[[Any], tuple]) -> tuple[Any, tuple]:
    if _init[0] == "pytorch":
        pytorch_default_init(model)
    measure_batch_norm_statistics(model, make_batch)
    return _wrap(model, outputs), example


def _image(model_cls: Callable[[Any], Any], config: Any, size: int | tuple[int, int], outputs: tuple[str, ...] = ("logits",)) -> tuple[Any, tuple]:
    """An image model; a classifier gets ImageNet's 1000 classes (transformers' default is 2, too few
    values for an output SQNR to mean much)."""
    import torch

    h, w = (size, size) if isinstance(size, int) else size
    if outputs == ("logits",) and getattr(config, "num_labels", None) == 2:
        config.num_labels = 1000
    model = model_cls(config)
    example = (image_like_batch(torch.Generator().manual_seed(1), 1, 3, h, w),)
    return _finish(model, example, outputs, lambda g: (image_like_batch(g, 4, 3, h, w),))


def _text(model_cls: Callable[[Any], Any], config: Any, length: int) -> tuple[Any, tuple]:
    import torch

    model = model_cls(config)
    vocab = config.vocab_size
    example = (torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(1)),)
    return _finish(model, example, ("last_hidden_state",), lambda g: (torch.randint(0, vocab, (4, length), generator=g),))


def _audio(model_cls: Callable[[Any], Any], config: Any, shape: tuple[int, ...], outputs: tuple[str, ...] = ("last_hidden_state",)) -> tuple[Any, tuple]:
    import torch

    model = model_cls(config)
    example = (torch.randn((1, *shape), generator=torch.Generator().manual_seed(1)),)
    return _finish(model, example, outputs, lambda g: (torch.randn((4, *shape), generator=g),))


def _pick(tiny: bool, full: Any, small: Any) -> Any:
    return small if tiny else full


# --- convolutional image classifiers -------------------------------------------------------------


def mobilenet_v1(tiny: bool) -> tuple[Any, tuple]:
    from transformers import MobileNetV1Config, MobileNetV1ForImageClassification

    config = MobileNetV1Config(image_size=_pick(tiny, 224, 32), depth_multiplier=_pick(tiny, 1.0, 0.25))
    return _image(MobileNetV1ForImageClassification, config, _pick(tiny, 224, 32))


def mobilenet_v2(tiny: bool) -> tuple[Any, tuple]:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(image_size=_pick(tiny, 224, 32), depth_multiplier=_pick(tiny, 1.0, 0.35))
    return _image(MobileNetV2ForImageClassification, config, _pick(tiny, 224, 32))


def efficientnet_b0(tiny: bool) -> tuple[Any, tuple]:
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    config = EfficientNetConfig(width_coefficient=_pick(tiny, 1.0, 0.25), depth_coefficient=_pick(tiny, 1.0, 0.25),
                                image_size=_pick(tiny, 224, 32), hidden_dim=_pick(tiny, 1280, 320), dropout_rate=0.2)
    return _image(EfficientNetForImageClassification, config, _pick(tiny, 224, 32))


def regnet_y_400mf(tiny: bool) -> tuple[Any, tuple]:
    from transformers import RegNetConfig, RegNetForImageClassification

    config = RegNetConfig(embedding_size=32, hidden_sizes=_pick(tiny, [48, 104, 208, 440], [16, 16, 32, 32]),
                          depths=_pick(tiny, [1, 3, 6, 6], [1, 1, 1, 1]), groups_width=8, layer_type="y")
    return _image(RegNetForImageClassification, config, _pick(tiny, 224, 32))


def resnet18(tiny: bool) -> tuple[Any, tuple]:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(layer_type="basic", embedding_size=_pick(tiny, 64, 8), depths=_pick(tiny, [2, 2, 2, 2], [1, 1, 1, 1]),
                          hidden_sizes=_pick(tiny, [64, 128, 256, 512], [8, 16, 16, 32]))
    return _image(ResNetForImageClassification, config, _pick(tiny, 224, 32))


def resnet50_short(tiny: bool) -> tuple[Any, tuple]:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(layer_type="bottleneck", depths=_pick(tiny, [1, 1, 1, 1], [1, 1, 1, 1]),
                          embedding_size=_pick(tiny, 64, 8), hidden_sizes=_pick(tiny, [256, 512, 1024, 2048], [16, 32, 32, 64]))
    return _image(ResNetForImageClassification, config, _pick(tiny, 224, 32))


def bit_short(tiny: bool) -> tuple[Any, tuple]:
    from transformers import BitConfig, BitForImageClassification

    config = BitConfig(embedding_size=32, hidden_sizes=_pick(tiny, [128, 256, 512, 1024], [128, 128, 128, 128]), depths=[1, 1, 1, 1])
    return _image(BitForImageClassification, config, _pick(tiny, 224, 32))


def convnext_atto(tiny: bool) -> tuple[Any, tuple]:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(hidden_sizes=_pick(tiny, [40, 80, 160, 320], [8, 16, 16, 32]), depths=_pick(tiny, [2, 2, 6, 2], [1, 1, 1, 1]))
    return _image(ConvNextForImageClassification, config, _pick(tiny, 224, 32))


def convnextv2_atto(tiny: bool) -> tuple[Any, tuple]:
    from transformers import ConvNextV2Config, ConvNextV2ForImageClassification

    config = ConvNextV2Config(hidden_sizes=_pick(tiny, [40, 80, 160, 320], [8, 16, 16, 32]), depths=_pick(tiny, [2, 2, 6, 2], [1, 1, 1, 1]))
    return _image(ConvNextV2ForImageClassification, config, _pick(tiny, 224, 32))


def poolformer_short(tiny: bool) -> tuple[Any, tuple]:
    from transformers import PoolFormerConfig, PoolFormerForImageClassification

    config = PoolFormerConfig(depths=_pick(tiny, [1, 1, 3, 1], [1, 1, 1, 1]), hidden_sizes=_pick(tiny, [64, 128, 320, 512], [8, 16, 16, 32]))
    return _image(PoolFormerForImageClassification, config, _pick(tiny, 224, 32))


def focalnet_short(tiny: bool) -> tuple[Any, tuple]:
    from transformers import FocalNetConfig, FocalNetForImageClassification

    config = FocalNetConfig(embed_dim=_pick(tiny, 48, 8), depths=_pick(tiny, [1, 1, 2, 1], [1, 1, 1, 1]), image_size=_pick(tiny, 224, 32))
    return _image(FocalNetForImageClassification, config, _pick(tiny, 224, 32))


# --- hybrids and vision transformers ---------------------------------------------------------------


def mobilevit_xx_small(tiny: bool) -> tuple[Any, tuple]:
    from transformers import MobileViTConfig, MobileViTForImageClassification

    config = MobileViTConfig(image_size=_pick(tiny, 256, 64), hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], expand_ratio=2.0)
    return _image(MobileViTForImageClassification, config, _pick(tiny, 256, 64))


def mobilevitv2_050(tiny: bool) -> tuple[Any, tuple]:
    from transformers import MobileViTV2Config, MobileViTV2ForImageClassification

    config = MobileViTV2Config(image_size=_pick(tiny, 256, 64), width_multiplier=_pick(tiny, 0.5, 0.25))
    return _image(MobileViTV2ForImageClassification, config, _pick(tiny, 256, 64))


def levit_128s(tiny: bool) -> tuple[Any, tuple]:
    from transformers import LevitConfig, LevitForImageClassification

    config = LevitConfig(image_size=_pick(tiny, 224, 64), hidden_sizes=_pick(tiny, [128, 256, 384], [32, 48, 64]),
                         num_attention_heads=_pick(tiny, [4, 6, 8], [2, 3, 4]), depths=_pick(tiny, [2, 3, 4], [1, 1, 1]), key_dim=[16, 16, 16])
    return _image(LevitForImageClassification, config, _pick(tiny, 224, 64))


def _vit_sizes(tiny: bool) -> dict:
    return {"hidden_size": _pick(tiny, 192, 32), "num_hidden_layers": _pick(tiny, 4, 1), "num_attention_heads": _pick(tiny, 3, 2),
            "intermediate_size": _pick(tiny, 768, 64), "image_size": _pick(tiny, 224, 32)}


def vit_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import ViTConfig, ViTForImageClassification

    return _image(ViTForImageClassification, ViTConfig(**_vit_sizes(tiny)), _pick(tiny, 224, 32))


def deit_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import DeiTConfig, DeiTForImageClassification

    return _image(DeiTForImageClassification, DeiTConfig(**_vit_sizes(tiny)), _pick(tiny, 224, 32))


def beit_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import BeitConfig, BeitForImageClassification

    config = BeitConfig(**_vit_sizes(tiny), use_relative_position_bias=True, use_mean_pooling=True)
    return _image(BeitForImageClassification, config, _pick(tiny, 224, 32))


def dinov2_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(**_vit_sizes(tiny), patch_size=14)
    return _image(Dinov2Model, config, _pick(tiny, 224, 28), outputs=("pooler_output",))


def swin_short(tiny: bool) -> tuple[Any, tuple]:
    from transformers import SwinConfig, SwinForImageClassification

    config = SwinConfig(image_size=_pick(tiny, 224, 32), embed_dim=_pick(tiny, 48, 16), depths=_pick(tiny, [2, 2, 2, 2], [1, 1]),
                        num_heads=_pick(tiny, [3, 6, 12, 24], [2, 2]), window_size=_pick(tiny, 7, 4), patch_size=4)
    return _image(SwinForImageClassification, config, _pick(tiny, 224, 32))


def swinv2_short(tiny: bool) -> tuple[Any, tuple]:
    from transformers import Swinv2Config, Swinv2ForImageClassification

    config = Swinv2Config(image_size=_pick(tiny, 224, 32), embed_dim=_pick(tiny, 48, 16), depths=_pick(tiny, [2, 2, 2, 2], [1, 1]),
                          num_heads=_pick(tiny, [3, 6, 12, 24], [2, 2]), window_size=_pick(tiny, 7, 4), patch_size=4)
    return _image(Swinv2ForImageClassification, config, _pick(tiny, 224, 32))


def cvt_short(tiny: bool) -> tuple[Any, tuple]:
    from transformers import CvtConfig, CvtForImageClassification

    config = CvtConfig(depth=_pick(tiny, [1, 2, 4], [1, 2, 3]), embed_dim=_pick(tiny, [64, 192, 384], [16, 32, 48]),
                       num_heads=_pick(tiny, [1, 3, 6], [1, 2, 3]))
    return _image(CvtForImageClassification, config, _pick(tiny, 224, 32))


def pvt_v2_b0(tiny: bool) -> tuple[Any, tuple]:
    from transformers import PvtV2Config, PvtV2ForImageClassification

    config = PvtV2Config(hidden_sizes=_pick(tiny, [32, 64, 160, 256], [16, 32, 40, 64]), depths=_pick(tiny, [2, 2, 2, 2], [1, 1, 1, 1]))
    return _image(PvtV2ForImageClassification, config, _pick(tiny, 224, 32))


def segformer_b0(tiny: bool) -> tuple[Any, tuple]:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    config = SegformerConfig(num_labels=19, hidden_sizes=_pick(tiny, [32, 64, 160, 256], [8, 16, 16, 32]),
                             depths=_pick(tiny, [2, 2, 2, 2], [1, 1, 1, 1]), decoder_hidden_size=_pick(tiny, 256, 16))
    return _image(SegformerForSemanticSegmentation, config, _pick(tiny, 224, 32))


# --- detection -------------------------------------------------------------------------------------


def detr_resnet18(tiny: bool) -> tuple[Any, tuple]:
    from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

    backbone = ResNetConfig(layer_type="basic", embedding_size=_pick(tiny, 64, 8), depths=_pick(tiny, [2, 2, 2, 2], [1, 1, 1, 1]),
                            hidden_sizes=_pick(tiny, [64, 128, 256, 512], [8, 16, 16, 32]), out_features=["stage4"])
    config = DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False, d_model=_pick(tiny, 128, 32),
                        encoder_layers=_pick(tiny, 2, 1), decoder_layers=_pick(tiny, 2, 1), encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=_pick(tiny, 512, 64), decoder_ffn_dim=_pick(tiny, 512, 64), num_queries=_pick(tiny, 20, 5), num_labels=91)
    return _image(DetrForObjectDetection, config, _pick(tiny, 320, 64), outputs=("logits", "pred_boxes"))


def yolos_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import YolosConfig, YolosForObjectDetection

    sizes = _vit_sizes(tiny)
    sizes["image_size"] = _pick(tiny, [320, 320], [32, 32])
    config = YolosConfig(**sizes, num_detection_tokens=_pick(tiny, 20, 5), num_labels=91)
    return _image(YolosForObjectDetection, config, _pick(tiny, 320, 32), outputs=("logits", "pred_boxes"))


# --- text encoders ---------------------------------------------------------------------------------


def _text_sizes(tiny: bool, hidden: int, layers: int, heads: int) -> dict:
    return {"hidden_size": _pick(tiny, hidden, 32), "num_hidden_layers": _pick(tiny, layers, 1), "num_attention_heads": _pick(tiny, heads, 2),
            "intermediate_size": _pick(tiny, 4 * hidden, 64), "vocab_size": _pick(tiny, 30522, 100)}


def bert_4l_256(tiny: bool) -> tuple[Any, tuple]:
    from transformers import BertConfig, BertModel

    return _text(BertModel, BertConfig(**_text_sizes(tiny, 256, 4, 4)), _pick(tiny, SEQUENCE_LENGTH, 16))


def minilm_l6(tiny: bool) -> tuple[Any, tuple]:
    from transformers import BertConfig, BertModel

    return _text(BertModel, BertConfig(**_text_sizes(tiny, 384, 6, 12)), _pick(tiny, SEQUENCE_LENGTH, 16))


def distilbert_3l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(dim=_pick(tiny, 384, 32), n_layers=_pick(tiny, 3, 1), n_heads=_pick(tiny, 6, 2),
                              hidden_dim=_pick(tiny, 1536, 64), vocab_size=_pick(tiny, 30522, 100))
    return _text(DistilBertModel, config, _pick(tiny, SEQUENCE_LENGTH, 16))


def albert_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(embedding_size=_pick(tiny, 128, 16), **_text_sizes(tiny, 256, 4, 4))
    return _text(AlbertModel, config, _pick(tiny, SEQUENCE_LENGTH, 16))


def mobilebert_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import MobileBertConfig, MobileBertModel

    config = MobileBertConfig(num_hidden_layers=_pick(tiny, 4, 1), vocab_size=_pick(tiny, 30522, 100))
    return _text(MobileBertModel, config, _pick(tiny, SEQUENCE_LENGTH, 16))


def squeezebert_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import SqueezeBertConfig, SqueezeBertModel

    config = SqueezeBertConfig(**_text_sizes(tiny, 256, 4, 4), embedding_size=_pick(tiny, 256, 32), q_groups=4, k_groups=4, v_groups=4, post_attention_groups=1,
                               intermediate_groups=4, output_groups=4)
    return _text(SqueezeBertModel, config, _pick(tiny, SEQUENCE_LENGTH, 16))


# --- audio encoders --------------------------------------------------------------------------------


def whisper_tiny_encoder(tiny: bool) -> tuple[Any, tuple]:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    positions = _pick(tiny, 750, 16)
    config = WhisperConfig(d_model=_pick(tiny, 384, 32), encoder_layers=_pick(tiny, 4, 1), encoder_attention_heads=_pick(tiny, 6, 2),
                           encoder_ffn_dim=_pick(tiny, 1536, 64), num_mel_bins=80, max_source_positions=positions)
    return _audio(WhisperEncoder, config, (80, 2 * positions))


def wav2vec2_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(**{k: v for k, v in _text_sizes(tiny, 256, 4, 4).items() if k != "vocab_size"},
                            conv_dim=_pick(tiny, (256,) * 7, (16,) * 7), num_conv_pos_embeddings=_pick(tiny, 128, 16))
    return _audio(Wav2Vec2Model, config, (_pick(tiny, 16000, 1600),))


def hubert_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import HubertConfig, HubertModel

    config = HubertConfig(**{k: v for k, v in _text_sizes(tiny, 256, 4, 4).items() if k != "vocab_size"},
                          conv_dim=_pick(tiny, (256,) * 7, (16,) * 7), num_conv_pos_embeddings=_pick(tiny, 128, 16))
    return _audio(HubertModel, config, (_pick(tiny, 16000, 1600),))


def ast_4l(tiny: bool) -> tuple[Any, tuple]:
    from transformers import ASTConfig, ASTForAudioClassification

    frames = _pick(tiny, 256, 32)
    config = ASTConfig(**{k: v for k, v in _vit_sizes(tiny).items() if k != "image_size"}, max_length=frames, num_mel_bins=128)
    config.num_labels = 527  # AudioSet's classes
    return _audio(ASTForAudioClassification, config, (frames, 128), outputs=("logits",))


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel("mobilenet_v1", "MobileNetV1", "image", mobilenet_v1, "1.0, 224"),
        ZooModel("mobilenet_v2", "MobileNetV2", "image", mobilenet_v2, "1.0, 224"),
        ZooModel("efficientnet_b0", "EfficientNet", "image", efficientnet_b0, "B0, 224"),
        ZooModel("regnet_y_400mf", "RegNet", "image", regnet_y_400mf, "Y-400MF, 224"),
        ZooModel("resnet18", "ResNet", "image", resnet18, "224"),
        ZooModel("resnet50_short", "ResNet", "image", resnet50_short, "bottleneck, 1 block per stage, 224"),
        ZooModel("bit_short", "BiT", "image", bit_short, "weight-standardized convs, 1 block per stage, 224"),
        ZooModel("convnext_atto", "ConvNeXt", "image", convnext_atto, "atto sizes, 224"),
        ZooModel("convnextv2_atto", "ConvNeXtV2", "image", convnextv2_atto, "atto, 224"),
        ZooModel("poolformer_short", "PoolFormer", "image", poolformer_short, "S12 widths, depths 1-1-3-1, 224"),
        ZooModel("focalnet_short", "FocalNet", "image", focalnet_short, "48 wide, depths 1-1-2-1, 224"),
        ZooModel("mobilevit_xx_small", "MobileViT", "image", mobilevit_xx_small, "xx-small, 256"),
        ZooModel("mobilevitv2_050", "MobileViTv2", "image", mobilevitv2_050, "0.5, 256"),
        ZooModel("levit_128s", "LeViT", "image", levit_128s, "128S, 224"),
        ZooModel("vit_4l", "ViT", "image", vit_4l, "4 layers, 192 wide, 224"),
        ZooModel("deit_4l", "DeiT", "image", deit_4l, "4 layers, 192 wide, 224"),
        ZooModel("beit_4l", "BEiT", "image", beit_4l, "4 layers, 192 wide, relative position bias, 224"),
        ZooModel("dinov2_4l", "DINOv2", "image", dinov2_4l, "4 layers, 192 wide, patch 14, 224"),
        ZooModel("swin_short", "Swin", "image", swin_short, "48 wide, depths 2-2-2-2, 224"),
        ZooModel("swinv2_short", "Swinv2", "image", swinv2_short, "48 wide, depths 2-2-2-2, 224"),
        ZooModel("cvt_short", "CvT", "image", cvt_short, "CvT-13 widths, depths 1-2-4, 224"),
        ZooModel("pvt_v2_b0", "PVTv2", "image", pvt_v2_b0, "B0, 224"),
        ZooModel("segformer_b0", "SegFormer", "image", segformer_b0, "B0, 19 classes, 224"),
        ZooModel("detr_resnet18", "DETR", "detection", detr_resnet18, "transformers ResNet-18 backbone, 2+2 layers, 128 wide, 20 queries, 320"),
        ZooModel("yolos_4l", "YOLOS", "detection", yolos_4l, "4 layers, 192 wide, 20 detection tokens, 320"),
        ZooModel("bert_4l_256", "BERT", "text", bert_4l_256, "4 layers, 256 wide, 128 tokens"),
        ZooModel("minilm_l6", "BERT (MiniLM-L6 sizes)", "text", minilm_l6, "6 layers, 384 wide, 128 tokens"),
        ZooModel("distilbert_3l", "DistilBERT", "text", distilbert_3l, "3 layers, 384 wide, 128 tokens"),
        ZooModel("albert_4l", "ALBERT", "text", albert_4l, "4 layers, 256 wide, 128 tokens"),
        ZooModel("mobilebert_4l", "MobileBERT", "text", mobilebert_4l, "4 layers, 128 tokens"),
        ZooModel("squeezebert_4l", "SqueezeBERT", "text", squeezebert_4l, "4 layers, 256 wide, 128 tokens"),
        ZooModel("whisper_tiny_encoder", "Whisper encoder", "audio", whisper_tiny_encoder, "tiny sizes, 4 layers, 80x1500 mel (15 s)"),
        ZooModel("wav2vec2_4l", "Wav2Vec2", "audio", wav2vec2_4l, "4 layers, 256 wide, 256-channel feature extractor, 1 s at 16 kHz"),
        ZooModel("hubert_4l", "HuBERT", "audio", hubert_4l, "4 layers, 256 wide, 1 s at 16 kHz"),
        ZooModel("ast_4l", "Audio Spectrogram Transformer", "audio", ast_4l, "4 layers, 192 wide, 256x128 mel"),
    )
}


def build(name: str, tiny: bool = False, init: str = "pytorch") -> tuple[Any, tuple]:
    """The named zoo model in eval mode and its example inputs (batch 1). ``init``: ``pytorch`` (every
    layer's reset_parameters) or ``transformers`` (the model's own _init_weights, mostly N(0, 0.02)
    weights): the int8 parity of the same architecture differs a lot between them (docs/BENCHMARKS.md)."""
    import torch

    if init not in INITS:
        raise ValueError(f"init {init!r} is not one of {', '.join(INITS)}")
    torch.manual_seed(0)  # the default init draws from the global generator
    _init[0] = init
    try:
        return MODELS[name].build(tiny)
    finally:
        _init[0] = "pytorch"
