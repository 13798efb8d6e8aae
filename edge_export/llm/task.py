"""Which models ``--task text-generation`` takes: a Hugging Face causal language model.

Read from ``config.json`` alone (no transformers import): a directory is a causal-LM directory
when its config names a ``*ForCausalLM`` architecture, or has no architecture list but a decoder
``model_type`` litert-torch's generative export knows. Encoder-only models (BERT-like: ``*Model``,
``*ForMaskedLM``, ``*ForSequenceClassification``...) and vision or vision-language models are
refused with the reason, before anything is imported.

Architectures litert-torch's generative export cannot export are refused here too, from the config
alone, instead of failing in the converter a minute later: GPT-2 and OPT (not supported by its HF
export; measured: OPT exit 3 after 29 s), mixture-of-experts decoders (the router's ``aten.histc``
has no lowering in litert-torch 0.10: Qwen3-MoE and Mixtral exit 3 after 80-113 s), and what
``export_lib.verify_model_compatibility`` itself refuses (dynamic or longrope RoPE, a quantized
checkpoint).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelLoadError

__all__ = ["TEXT_GENERATION", "is_causal_lm_directory", "read_config", "check_causal_lm_config", "unsupported_architecture", "check_cache_length"]

TEXT_GENERATION = "text-generation"
# Decoder families whose configs may omit "architectures" (a config built in code and saved).
_DECODER_TYPES = frozenset({
    "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text", "mistral", "phi3", "smollm3",
    "olmo", "olmo2", "granite", "gpt2", "gpt_neox", "phi", "lfm2",
})
_ENCODER_TYPES = frozenset({
    "bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
    "mpnet", "camembert", "modernbert", "t5", "bart",
})
# Decoders litert-torch 0.10's HF export does not support: (model_type, architecture) -> name.
_UNSUPPORTED_DECODERS = {"gpt2": "GPT-2", "opt": "OPT", "GPT2LMHeadModel": "GPT-2", "OPTForCausalLM": "OPT"}
_MOE_TYPES = frozenset({
    "mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "olmoe", "granitemoe", "granitemoeshared", "phimoe",
    "deepseek_v2", "deepseek_v3", "dbrx", "jamba", "jetmoe", "gpt_oss", "ernie4_5_moe", "glm4_moe", "minimax",
})
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_VISION_TYPES = frozenset({"vit", "deit", "beit", "convnext", "resnet", "mobilenet_v2", "swin", "dinov2", "clip", "siglip"})


def read_config(folder: Path) -> dict:
    """``folder/config.json`` as a dict; a missing or unreadable file is exit 2."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(
            f"{folder} has no config.json, so it is not a Hugging Face model directory.",
            "Pass the folder save_pretrained() wrote (config.json, *.safetensors, tokenizer files).",
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}.", "Save the model again with save_pretrained().") from exc
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path} is not a JSON object.", "Save the model again with save_pretrained().")
    return config


def is_causal_lm_directory(source: str) -> bool:
    """Whether ``source`` is a folder holding a causal-LM config (the task is then inferred)."""
    folder = Path(source)
    if not (folder.is_dir() and (folder / "config.json").is_file()):
        return False
    try:
        return _refusal(read_config(folder)) is None
    except ModelLoadError:
        return False


def _refusal(config: dict) -> str | None:
    """Why ``config`` is not a causal language model, or None when it is one."""
    model_type = str(config.get("model_type", ""))
    architectures = [str(a) for a in config.get("architectures") or ()]
    if "vision_config" in config or model_type in _VISION_TYPES:
        return f"a vision model (model_type {model_type!r})"
    if any(a.endswith("ForCausalLM") or a in _UNSUPPORTED_DECODERS for a in architectures):
        return None  # a decoder (one litert-torch cannot export is refused by unsupported_architecture)
    if architectures:
        return f"a {', '.join(architectures)} model (no *ForCausalLM architecture)"
    if model_type in _ENCODER_TYPES:
        return f"an encoder-only model (model_type {model_type!r})"
    if model_type in _DECODER_TYPES:
        return None
    return f"a model of type {model_type!r} that is not a known decoder (and config.json lists no architectures)"


def _experts(config: dict) -> int:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    counts = [text.get(key) for key in _MOE_KEYS]
    return max((c for c in counts if isinstance(c, int) and not isinstance(c, bool)), default=0)


def unsupported_architecture(config: dict) -> tuple[str, str] | None:
    """(the architecture, why litert-torch cannot export it), or None when it may."""
    model_type = str(config.get("model_type", ""))
    architectures = [str(a) for a in config.get("architectures") or ()]
    name = architectures[0] if architectures else f"model_type {model_type!r}"
    known = next((_UNSUPPORTED_DECODERS[k] for k in (model_type, *architectures) if k in _UNSUPPORTED_DECODERS), None)
    if known:
        return name, f"{known} is not an architecture litert-torch's Hugging Face export (export_hf) supports"
    experts = _experts(config)
    if model_type in _MOE_TYPES or experts > 1:
        count = f" ({experts} experts)" if experts > 1 else ""
        return name, (f"it is a mixture-of-experts model{count}: its router's aten.histc has no lowering in "
                      "litert-torch's converter, so the export would fail after minutes")
    rope = config.get("rope_scaling") if isinstance(config.get("rope_scaling"), dict) else {}
    rope_type = str(rope.get("rope_type") or rope.get("type") or "")
    if "dynamic" in rope_type or "longrope" in rope_type:
        return name, f"its RoPE scaling {rope_type!r} is not supported by litert-torch's export (dynamic and longrope are not)"
    if config.get("quantization_config"):
        return name, "it is a quantized checkpoint (quantization_config), which litert-torch's export does not read"
    return None


def check_causal_lm_config(folder: Path) -> dict:
    """The config of a causal LM in ``folder``; anything else, or a decoder litert-torch cannot
    export, is exit 2 naming what it is."""
    config = read_config(folder)
    reason = _refusal(config)
    if reason is not None:
        raise ModelLoadError(
            f"--task text-generation needs a decoder language model, but {folder} holds {reason}.",
            "Export a *ForCausalLM model (Llama, Qwen, Gemma, SmolLM...); encoder and vision models "
            "are exported without --task, from a .pt2 or a package.module:attr reference.",
        )
    unsupported = unsupported_architecture(config)
    if unsupported is not None:
        raise ModelLoadError(
            f"{folder} holds a {unsupported[0]} decoder, which edge-export cannot export: {unsupported[1]}.",
            "Export a dense decoder litert-torch supports (Llama, Qwen2/Qwen3, Gemma, Mistral, Phi-3, SmolLM...); "
            "nothing was written.",
        )
    return config


def check_cache_length(config: dict, cache_length: int) -> None:
    """A cache longer than the positions the model was built for is exit 2: the positions past
    ``max_position_embeddings`` are outside what its RoPE (or position table) was trained on."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    limit = text.get("max_position_embeddings")
    if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < cache_length:
        raise ModelLoadError(
            f"--cache-length {cache_length} is longer than the model's max_position_embeddings ({limit}): "
            "the package would accept prompts at positions the model was not built for.",
            f"Use --cache-length {limit} or less.",
        )
