"""The .litertlm package: the flatbuffer, the tokenizer and the LLM metadata, written by
litert-lm-builder's Python API (``LitertLmFileBuilder``).

The metadata says what the LiteRT-LM runtime cannot guess:

- the start token: the runtime tokenizes a prompt without the tokenizer's post-processor and
  prepends the metadata's start token itself (measured, litert-lm-api 0.18.1). So the start token
  is the one token ``tokenizer.json``'s post-processor puts before every text (TemplateProcessing,
  or a Sequence holding one), found by encoding a probe text with and without special tokens,
  whatever ``bos_token`` says (a Qwen2 folder's post-processor adds ``<s>`` with ``bos_token``
  null); none when the post-processor adds nothing. A post-processor that adds several tokens
  before the text, or any after it, cannot be reproduced by the runtime: exit 2.
- the stop tokens: the tokenizer's EOS, the config's and ``generation_config.json``'s
  ``eos_token_id`` (an id or a list), in that order, without repeats;
- the sampler defaults, from ``generation_config.json`` when it has one (greedy unless
  ``do_sample``; top-k, top-p and temperature when given);
- the most tokens the cache holds (``max_num_tokens``: the cache length);
- the chat template, adapted to the runtime's content parts (``chat_template.py``).

The model type is ``generic_model``: no family-specific prompt handling in the runtime, so the
text the runtime sees is the text transformers sees.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ExportFailure, UsageError, first_line
from .chat_template import runtime_chat_template
from .generation_config import GenerationDefaults, token_ids

__all__ = ["PackageMetadata", "tokenizer_affixes", "start_token", "package_metadata", "build_litertlm"]


@dataclass(frozen=True)
class PackageMetadata:
    """What the .litertlm's LLM metadata says (also reported)."""

    start_token_id: int | None
    stop_token_ids: tuple[int, ...]
    max_num_tokens: int
    chat_template: bool  # a Jinja chat template is packaged (adapted to the runtime's content parts)
    sampler: str | None = None  # the sampler defaults from generation_config.json (None: the runtime's)


_PROBE = "hello world"


def tokenizer_affixes(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids the tokenizer's post-processor adds before and after every text."""
    bare = list(tokenizer(_PROBE, add_special_tokens=False).input_ids)
    full = list(tokenizer(_PROBE).input_ids)
    for start in range(len(full) - len(bare) + 1):
        if full[start:start + len(bare)] == bare:
            return tuple(full[:start]), tuple(full[start + len(bare):])
    raise UsageError(
        "The tokenizer's post-processor changes the text's own tokens (not only adding tokens around them), "
        "which the LiteRT-LM runtime (it tokenizes without the post-processor) cannot reproduce.",
        "Use a tokenizer.json whose post_processor only adds special tokens (TemplateProcessing), or none.",
    )


def start_token(tokenizer: Any) -> int | None:
    """The package's start token: the one token the post-processor prepends (see the docstring)."""
    before, after = tokenizer_affixes(tokenizer)
    if len(before) > 1 or after:
        names = tokenizer.convert_ids_to_tokens([*before, *after])
        raise UsageError(
            f"The tokenizer's post-processor adds {len(before)} token(s) before every text and {len(after)} after it "
            f"({', '.join(map(repr, names))}); the LiteRT-LM runtime can prepend one start token and append none, "
            "so the packaged model would see other prompts than transformers.",
            "Set tokenizer.json's post_processor to add at most one token (the BOS) before the text.",
        )
    return before[0] if before else None


def _sampler_text(g: GenerationDefaults) -> str | None:
    if not g.do_sample:
        return "greedy"
    parts = [f"{name} {value:g}" for name, value in (("top-k", g.top_k), ("top-p", g.top_p), ("temperature", g.temperature)) if value is not None]
    return "sampling" + (f" ({', '.join(parts)})" if parts else "")


def package_metadata(tokenizer: Any, config: dict, cache_length: int, chat_template: str | None,
                     generation: GenerationDefaults | None = None) -> PackageMetadata:
    stops: list[int] = []
    for value in (getattr(tokenizer, "eos_token_id", None), config.get("eos_token_id"), generation.eos_token_ids if generation else None):
        for token in token_ids(value):
            if token not in stops:
                stops.append(token)
    sampler = _sampler_text(generation) if generation is not None else None
    return PackageMetadata(start_token(tokenizer), tuple(stops), cache_length, chat_template is not None, sampler)


def _sampler_proto(g: GenerationDefaults, proto: Any) -> None:
    from litert_lm_builder.runtime.proto import sampler_params_pb2

    kind = sampler_params_pb2.SamplerParameters
    if not g.do_sample:
        proto.sampler_params.type, proto.sampler_params.k = kind.TOP_K, 1  # greedy as the runtime spells it (top-k 1)
        proto.sampler_params.p, proto.sampler_params.temperature = 1.0, 1.0
        return
    proto.sampler_params.type = kind.TOP_P if g.top_p is not None and g.top_p < 1 else kind.TOP_K
    proto.sampler_params.k = g.top_k if g.top_k else 50  # transformers' default top_k
    proto.sampler_params.p = g.top_p if g.top_p is not None else 1.0
    proto.sampler_params.temperature = g.temperature if g.temperature is not None else 1.0


def _metadata_proto(meta: PackageMetadata, chat_template: str | None, generation: GenerationDefaults | None) -> bytes:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2, llm_model_type_pb2

    proto = llm_metadata_pb2.LlmMetadata()
    if meta.start_token_id is not None:
        proto.start_token.token_ids.ids.append(meta.start_token_id)
    for token in meta.stop_token_ids:
        proto.stop_tokens.add().token_ids.ids.append(token)
    proto.max_num_tokens = meta.max_num_tokens
    proto.llm_model_type.CopyFrom(llm_model_type_pb2.LlmModelType(generic_model=llm_model_type_pb2.GenericModel()))
    if meta.sampler is not None and generation is not None:
        _sampler_proto(generation, proto)
    if chat_template:
        proto.jinja_prompt_template = runtime_chat_template(chat_template, start_token_declared=meta.start_token_id is not None)
    return proto.SerializeToString()


def build_litertlm(tflite: bytes, tokenizer_json: Path, meta: PackageMetadata, chat_template: str | None,
                   generation: GenerationDefaults | None = None) -> bytes:
    """The .litertlm file's bytes (built in a private folder; the caller writes them atomically)."""
    from litert_lm_builder import litertlm_builder as lb

    with tempfile.TemporaryDirectory(prefix="edge-export-litertlm-") as work:
        model_path, meta_path, out_path = (Path(work) / n for n in ("model.tflite", "llm_metadata.pb", "model.litertlm"))
        model_path.write_bytes(tflite)
        meta_path.write_bytes(_metadata_proto(meta, chat_template, generation))
        try:
            builder = lb.LitertLmFileBuilder()
            builder.add_system_metadata(lb.Metadata(key="Authors", value="edge-export", dtype=lb.DType.STRING))
            builder.add_llm_metadata(str(meta_path))
            builder.add_hf_tokenizer(str(tokenizer_json))
            builder.add_tflite_model(str(model_path), lb.TfLiteModelType.PREFILL_DECODE)
            with open(out_path, "wb") as stream:
                builder.build(stream)
        except Exception as exc:  # boundary: litert-lm-builder
            raise ExportFailure(f"litert-lm-builder could not package the model: {first_line(exc, with_type=True)}.", "Run with --debug.") from exc
        return out_path.read_bytes()
