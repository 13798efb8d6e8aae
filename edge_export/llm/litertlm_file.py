"""A ``.litertlm`` file checked before the LiteRT-LM runtime (native code) opens it, and described.

The allow-list, from what litert-lm-builder writes (``litertlm_builder._build_sections``):

- a regular file, at least 32 bytes: ``LITERTLM``, the format's major version (1) and a u64 at
  byte 24 giving the end of the header, which lies inside the file (at most 16 MiB in);
- the header, a flatbuffer (``LiteRTLMMetaData``), read with bounded counts (64 sections, 256
  key/value items each) since Python's flatbuffers reader trusts every offset;
- sections whose byte ranges lie after the header, inside the file and apart from each other,
  of the kinds a text model has (TFLite model and weights, a SentencePiece or zlib-compressed
  Hugging Face tokenizer, LLM and executor metadata protos); any other kind is refused;
- one LLM metadata proto (protobuf, at most 16 MiB), one tokenizer, at least one TFLite model;
- every TFLite model section passes the project's flatbuffer verifier (``flatbuffer.read_flatbuffer``),
  and a Hugging Face tokenizer decompresses (bounded: its stated size, at most 512 MiB) to a
  JSON object with a ``model``.

External weight sections (``TFLiteWeights``) are raw bytes and cannot be verified; the runtime's own
parsing of the tokenizer is native code this check does not replace.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FlatbufferError, UsageError

__all__ = ["LitertlmSection", "LitertlmPackage", "is_litertlm_path", "read_litertlm"]

MAGIC = b"LITERTLM"
_HEADER_START, _HEADER_END_AT, _MAX_HEADER = 32, 24, 16 << 20
_MAX_SECTIONS, _MAX_ITEMS = 64, 256
_MAX_PROTO, _MAX_TOKENIZER = 16 << 20, 512 << 20
# AnySectionDataType values (litertlm_header_schema) a text language model's package may hold.
_KINDS = {3: "TFLiteModel", 4: "SP_Tokenizer", 5: "LlmMetadataProto", 6: "HF_Tokenizer_Zlib", 7: "TFLiteWeights", 9: "ExecutorMetadataProto"}
_HINT = "Pass a .litertlm written by edge-export (or litert-lm-builder); export the model again if the file was damaged."


@dataclass(frozen=True)
class LitertlmSection:
    kind: str
    begin: int
    end: int
    items: tuple[tuple[str, str], ...]  # the section's key/value metadata (model_type...)

    @property
    def size(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class LitertlmPackage:
    path: str
    size: int
    version: str
    sections: tuple[LitertlmSection, ...]
    start_token_ids: tuple[int, ...]
    stop_token_ids: tuple[tuple[int, ...], ...]
    max_num_tokens: int
    chat_template: str | None
    sampler: str | None
    tokenizer: str  # its kind and vocabulary size
    signatures: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]  # (name, inputs, outputs) of the first model


def is_litertlm_path(path: str | Path) -> bool:
    return str(path).lower().endswith(".litertlm")


def _bad(path: Path, what: str) -> FlatbufferError:
    return FlatbufferError(f"{path} is not a valid .litertlm package: {what}.", _HINT)


def _open_regular(path: Path) -> int:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist.", "Pass the .litertlm that edge-export wrote beside the .tflite.") from None
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}.", "Check the path and its permissions.") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path} is not a regular file (a folder, device or pipe).", "Pass the .litertlm file itself.")
    return info.st_size


def _read(stream: Any, begin: int, end: int) -> bytes:
    stream.seek(begin)
    return stream.read(end - begin)


def _header(path: Path, stream: Any, size: int) -> tuple[str, int]:
    head = stream.read(_HEADER_START)
    if len(head) < _HEADER_START or head[:8] != MAGIC:
        raise _bad(path, f"it does not start with the {MAGIC.decode()} magic bytes")
    major, minor, patch = struct.unpack("<III", head[8:20])
    if major != 1:
        raise _bad(path, f"format version {major}.{minor}.{patch}; edge-export reads version 1.x")
    (end,) = struct.unpack("<Q", head[_HEADER_END_AT:_HEADER_START])
    if not _HEADER_START < end <= min(size, _HEADER_START + _MAX_HEADER):
        raise _bad(path, f"its header ends at byte {end}, outside the file ({size} bytes)")
    return f"{major}.{minor}.{patch}", end


def _kv(item: Any) -> tuple[str, str]:
    from litert_lm_builder.litertlm_peek import kvp_to_dict

    found = kvp_to_dict(item)
    return str(found.get("key", "")), str(found.get("value", ""))[:200]


def _sections(path: Path, header: bytes, header_end: int, size: int) -> tuple[LitertlmSection, ...]:
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    try:
        meta = schema.LiteRTLMMetaData.GetRootAs(header, 0).SectionMetadata()
        count = meta.ObjectsLength() if meta is not None else 0
        if not 0 < count <= _MAX_SECTIONS:
            raise _bad(path, f"its header lists {count} sections (1 to {_MAX_SECTIONS} allowed)")
        found = []
        for i in range(count):
            obj = meta.Objects(i)
            kind, begin, end, n_items = obj.DataType(), obj.BeginOffset(), obj.EndOffset(), obj.ItemsLength()
            if kind not in _KINDS:
                raise _bad(path, f"section {i} is of kind {kind}, not one a text language model has")
            if n_items > _MAX_ITEMS:
                raise _bad(path, f"section {i} has {n_items} metadata items")
            found.append(LitertlmSection(_KINDS[kind], begin, end, tuple(_kv(obj.Items(j)) for j in range(n_items))))
    except FlatbufferError:
        raise
    except Exception as exc:  # boundary: Python's flatbuffers reader on hostile offsets (struct.error, IndexError...)
        raise _bad(path, f"its header cannot be read ({type(exc).__name__})") from None
    _check_ranges(path, found, header_end, size)
    return tuple(found)


def _check_ranges(path: Path, sections: list[LitertlmSection], header_end: int, size: int) -> None:
    last = header_end
    for i, s in sorted(enumerate(sections), key=lambda pair: pair[1].begin):
        if not (header_end <= s.begin <= s.end <= size):
            raise _bad(path, f"section {i} ({s.kind}) spans bytes {s.begin}-{s.end}, outside the file's data ({header_end}-{size})")
        if s.begin < last:
            raise _bad(path, f"section {i} ({s.kind}) overlaps another section")
        last = s.end
    kinds = [s.kind for s in sections]
    if kinds.count("LlmMetadataProto") != 1 or "TFLiteModel" not in kinds:
        raise _bad(path, "it needs one LLM metadata section and a TFLite model")
    if kinds.count("HF_Tokenizer_Zlib") + kinds.count("SP_Tokenizer") != 1:
        raise _bad(path, "it needs exactly one tokenizer section")


def _tokenizer_text(path: Path, kind: str, data: bytes) -> str:
    if kind == "SP_Tokenizer":
        return f"SentencePiece model ({len(data)} bytes)"
    import json
    import zlib

    stated = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if not 0 < stated <= _MAX_TOKENIZER:
        raise _bad(path, f"its tokenizer states {stated} bytes uncompressed")
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(data[8:], stated + 1)
        tokenizer = json.loads(text.decode("utf-8")) if len(text) == stated else None
    except (zlib.error, UnicodeDecodeError, ValueError):
        tokenizer = None
    if not (isinstance(tokenizer, dict) and isinstance(tokenizer.get("model"), dict)):
        raise _bad(path, "its tokenizer section is not a zlib-compressed tokenizer.json of the stated size")
    vocab = tokenizer["model"].get("vocab")
    added = tokenizer.get("added_tokens")
    n = (len(vocab) if isinstance(vocab, (dict, list)) else 0) + (len(added) if isinstance(added, list) else 0)
    return f"Hugging Face tokenizer.json ({tokenizer['model'].get('type', '?')}, {n} tokens)"


def _llm_metadata(path: Path, data: bytes) -> Any:
    from google.protobuf.message import DecodeError
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    if len(data) > _MAX_PROTO:
        raise _bad(path, f"its LLM metadata is {len(data)} bytes")
    proto = llm_metadata_pb2.LlmMetadata()
    try:
        proto.ParseFromString(data)
    except DecodeError:
        raise _bad(path, "its LLM metadata is not an LlmMetadata protobuf") from None
    return proto


def _sampler(proto: Any) -> str | None:
    if not proto.HasField("sampler_params"):
        return None
    p = proto.sampler_params
    kind = type(p).Type.Name(p.type).lower()
    return "greedy (top-k 1)" if kind == "top_k" and p.k == 1 else f"{kind} (k {p.k}, p {p.p:g}, temperature {p.temperature:g})"


def _signatures(model: Any) -> tuple:
    return tuple((str(s["key"]), tuple(map(str, s["inputs"])), tuple(map(str, s["outputs"]))) for s in model.signatures)


def read_litertlm(path: str | Path) -> LitertlmPackage:
    """``path`` checked against the allow-list above and described; exit 2 for anything else."""
    from ..flatbuffer import read_flatbuffer
    from .environment import require_llm_extra

    path = Path(path)
    size = _open_regular(path)
    require_llm_extra("litert_lm_builder", "to read a .litertlm")
    with open(path, "rb") as stream:
        version, header_end = _header(path, stream, size)
        sections = _sections(path, _read(stream, _HEADER_START, header_end), header_end, size)
        by_kind = {s.kind: s for s in sections}
        proto = _llm_metadata(path, _read(stream, by_kind["LlmMetadataProto"].begin, by_kind["LlmMetadataProto"].end))
        tok = by_kind.get("HF_Tokenizer_Zlib") or by_kind["SP_Tokenizer"]
        tokenizer = _tokenizer_text(path, tok.kind, _read(stream, tok.begin, tok.end))
        models = [read_flatbuffer(_read(stream, s.begin, s.end), f"the TFLite model in {path} (section {i})")
                  for i, s in enumerate(sections) if s.kind == "TFLiteModel"]
    return LitertlmPackage(
        str(path), size, version, sections, tuple(proto.start_token.token_ids.ids),
        tuple(tuple(t.token_ids.ids) for t in proto.stop_tokens), proto.max_num_tokens,
        proto.jinja_prompt_template if proto.HasField("jinja_prompt_template") else None, _sampler(proto), tokenizer,
        _signatures(models[0]),
    )
