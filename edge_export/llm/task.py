"""Which models ``--task text-generation`` takes: a Hugging Face causal language model.

Read from ``config.json`` alone (no transformers import): a directory is a causal-LM directory
when its config names a ``*ForCausalLM`` architecture, or has no architecture list but a decoder
``model_type`` litert-torch's generative export knows. Encoder-only models (BERT-like: ``*Model``,
``*ForMaskedLM``, ``*ForSequenceClassification``...) and vision or vision-language models are
refused with the reason, before anything is imported.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelLoadError

__all__ = ["TEXT_GENERATION", "is_causal_lm_directory", "read_config", "check_causal_lm_config"]

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
    if any(a.endswith("ForCausalLM") for a in architectures):
        return None
    if architectures:
        return f"a {', '.join(architectures)} model (no *ForCausalLM architecture)"
    if model_type in _ENCODER_TYPES:
        return f"an encoder-only model (model_type {model_type!r})"
    if model_type in _DECODER_TYPES:
        return None
    return f"a model of type {model_type!r} that is not a known decoder (and config.json lists no architectures)"


def check_causal_lm_config(folder: Path) -> dict:
    """The config of a causal LM in ``folder``; anything else is exit 2 naming what it is."""
    config = read_config(folder)
    reason = _refusal(config)
    if reason is not None:
        raise ModelLoadError(
            f"--task text-generation needs a decoder language model, but {folder} holds {reason}.",
            "Export a *ForCausalLM model (Llama, Qwen, Gemma, SmolLM...); encoder and vision models "
            "are exported without --task, from a .pt2 or a package.module:attr reference.",
        )
    return config
