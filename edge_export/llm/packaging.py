"""The .litertlm package: the flatbuffer, the tokenizer and the LLM metadata, written by
litert-lm-builder's Python API (``LitertLmFileBuilder``).

The metadata says what the LiteRT-LM runtime cannot guess: the start token (only when the
tokenizer itself prepends it, as litert-torch decides too: the runtime adds it to every prompt),
the stop tokens (the tokenizer's and the generation config's EOS ids), the most tokens the cache
holds (``max_num_tokens``: the cache length) and the chat template when the tokenizer has one.
The model type is ``generic_model``: no family-specific prompt handling in the runtime, so the
text the runtime sees is the text transformers sees.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ExportFailure, first_line

__all__ = ["PackageMetadata", "package_metadata", "build_litertlm"]


@dataclass(frozen=True)
class PackageMetadata:
    """What the .litertlm's LLM metadata says (also reported)."""

    start_token_id: int | None
    stop_token_ids: tuple[int, ...]
    max_num_tokens: int
    chat_template: bool  # a Jinja chat template is packaged


def tokenizer_prepends_bos(tokenizer: Any) -> bool:
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    ids = tokenizer("hello").input_ids
    return bool(ids) and ids[0] == bos


def package_metadata(tokenizer: Any, config: dict, cache_length: int, chat_template: str | None) -> PackageMetadata:
    stops: list[int] = []
    for value in (getattr(tokenizer, "eos_token_id", None), config.get("eos_token_id")):
        for token in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(token, int) and token not in stops:
                stops.append(token)
    start = tokenizer.bos_token_id if tokenizer_prepends_bos(tokenizer) else None
    return PackageMetadata(start, tuple(stops), cache_length, chat_template is not None)


def _metadata_proto(meta: PackageMetadata, chat_template: str | None) -> bytes:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2, llm_model_type_pb2

    proto = llm_metadata_pb2.LlmMetadata()
    if meta.start_token_id is not None:
        proto.start_token.token_ids.ids.append(meta.start_token_id)
    for token in meta.stop_token_ids:
        proto.stop_tokens.add().token_ids.ids.append(token)
    proto.max_num_tokens = meta.max_num_tokens
    proto.llm_model_type.CopyFrom(llm_model_type_pb2.LlmModelType(generic_model=llm_model_type_pb2.GenericModel()))
    if chat_template:
        proto.jinja_prompt_template = chat_template
    return proto.SerializeToString()


def build_litertlm(tflite: bytes, tokenizer_json: Path, meta: PackageMetadata, chat_template: str | None) -> bytes:
    """The .litertlm file's bytes (built in a private folder; the caller writes them atomically)."""
    from litert_lm_builder import litertlm_builder as lb

    with tempfile.TemporaryDirectory(prefix="edge-export-litertlm-") as work:
        model_path, meta_path, out_path = (Path(work) / n for n in ("model.tflite", "llm_metadata.pb", "model.litertlm"))
        model_path.write_bytes(tflite)
        meta_path.write_bytes(_metadata_proto(meta, chat_template))
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
