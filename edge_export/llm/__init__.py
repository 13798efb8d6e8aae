"""Decoder language models (``--task text-generation``): a Hugging Face causal LM exported to
``.tflite`` (prefill and decode signatures over an external KV cache) and ``.litertlm``, and proved
against transformers token for token. No heavy import here: the modules import torch,
transformers, litert-torch and the LiteRT-LM runtime inside the functions that need them.

    from edge_export.llm import export_language_model
    result = export_language_model("models/tiny-llama", prefill_lengths=(32,), cache_length=128)
    result.exit_code, result.litertlm_path, result.run_report.language_model.chosen_attempt

Modules, in chain order: ``task`` (is it a causal LM?), ``loading`` (safetensors, tokenizer, chat
template), ``litert_torch_compat`` (the TensorFlow-import workaround), ``export`` (the float
flatbuffer, once), ``recipes`` (ai-edge-quantizer on it), ``packaging`` (litert-lm-builder),
``signatures`` + ``parity`` + ``evaluation`` (teacher-forced logits, LiteRT-LM text), ``measure``,
``report`` (the typed section and its renderings), ``pipeline`` / ``run`` / ``writing``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .result import LanguageModelResult

from .task import TEXT_GENERATION

__all__ = ["export_language_model", "TEXT_GENERATION"]


def export_language_model(model: str, output: str | Path | None = None, *, on_stage: Any = None, **options: Any) -> "LanguageModelResult":
    """Export ``model`` (a causal-LM folder, or ``package.module:attr`` with ``tokenizer=``) and
    check it; ``options`` are ``LanguageModelOptions`` fields (prefill_lengths, cache_length,
    prompts, max_new_tokens, quantize, block_size, atol, min_token_agreement, trust_pickle, junit)."""
    from .options import LanguageModelOptions
    from .pipeline import run_text_generation

    return run_text_generation(str(model), output, LanguageModelOptions(**options), on_stage=on_stage)
