"""Every ``*.safetensors`` of a model folder, and its shard index, checked before any library reads it.

A safetensors file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
tensors' bytes. transformers and litert-torch trust the header: a length of 2**62 or a tensor past
the end of the file used to surface a minute and a half later as a conversion failure (exit 3). This
reader decides what a header may hold and refuses the rest (exit 2, naming the file and the rule),
reading only the header, in well under a second:

- N at most 100 MB (the safetensors library's own limit) and within the file; the JSON an object
  (it starts with ``{``; JSON whitespace may pad it), no duplicate keys, no floats, NaN or Infinity;
- each entry is ``__metadata__`` (string -> string) or a tensor of exactly ``dtype`` (the spec's
  names), ``shape`` (a list of non-negative integers) and ``data_offsets`` (``[begin, end]``
  integers, begin <= end), whose byte count is prod(shape) x the dtype's size;
- the tensors, sorted by offset, tile the data section exactly: none past its end, none
  overlapping another, no bytes belonging to no tensor (the spec forbids holes: no polyglot files).

A sharded folder's ``*.safetensors.index.json`` may hold only ``metadata`` (plain values) and a
``weight_map`` from tensor names to shard files of this folder (plain names, each a checked file
whose header lists the tensor).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError

__all__ = ["MAX_HEADER_BYTES", "DTYPE_BITS", "TensorEntry", "SafetensorsHeader", "read_safetensors_header", "check_weight_files"]

MAX_HEADER_BYTES = 100_000_000  # safetensors' MAX_HEADER_SIZE: no real header comes near it
_MAX_INT = 2**64 - 1  # offsets and dimensions are usize in the reference reader
# Bits per element of every dtype the safetensors format (0.8) names.
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
_TENSOR_KEYS = frozenset({"dtype", "shape", "data_offsets"})
_HINT = (
    "The file is damaged or was not written by safetensors: download it again or save the model again "
    "with save_pretrained(folder, safe_serialization=True)."
)


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets into the data section (after the header)
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    header_bytes: int  # N
    data_bytes: int  # what follows the header
    tensors: tuple[TensorEntry, ...]  # sorted by offset
    metadata: tuple[tuple[str, str], ...]


class _Refused(Exception):
    """One broken rule, worded for the message (the caller adds the file)."""


def _shown(name: object) -> str:
    text = str(name)
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


def read_safetensors_header(path: Path) -> SafetensorsHeader:
    """The checked header of ``path``; anything the format does not allow is a ModelLoadError."""
    try:
        return _read(path)
    except _Refused as exc:
        raise ModelLoadError(f"{path} is not a valid safetensors file: {exc}.", _HINT) from None
    except OSError as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc.strerror or exc}.", "Check the file and its permissions.") from None


def _read(path: Path) -> SafetensorsHeader:
    # O_NONBLOCK: a FIFO named *.safetensors must not block the open; it is refused just below
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("it is not a regular file")
        size = info.st_size
        if size < 8:
            raise _Refused(f"it is {size} bytes long, shorter than the 8-byte header length")
        length = int.from_bytes(file.read(8), "little")
        if length > MAX_HEADER_BYTES:
            raise _Refused(f"its header length is {length} bytes, more than the {MAX_HEADER_BYTES} the format allows")
        if 8 + length > size:
            raise _Refused(f"its header length is {length} bytes, but the file holds only {size - 8} after it")
        raw = file.read(length)
    if len(raw) != length:
        raise _Refused("the file changed while it was read")
    header = _parse_json(raw)
    tensors, metadata = _entries(header)
    data_bytes = size - 8 - length
    return SafetensorsHeader(path, length, data_bytes, _tiled(tensors, data_bytes), metadata)


def _parse_json(raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("its header is not UTF-8 text") from None
    if not text.startswith("{"):
        raise _Refused("its header does not start with '{' (a JSON object)")
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_float=_no_float, parse_constant=_no_float)
    except _Refused:
        raise
    except (ValueError, RecursionError) as exc:  # malformed, too deeply nested, or an integer too long to read
        raise _Refused(f"its header is not valid JSON ({str(exc)[:120]})") from None
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise _Refused(f"its header names {_shown(duplicate)} twice")
    return dict(pairs)


def _no_float(text: str) -> Any:
    raise _Refused(f"its header holds the number {text[:40]}, and a header holds only integers")


def _entries(header: dict) -> tuple[list[TensorEntry], tuple[tuple[str, str], ...]]:
    metadata: tuple[tuple[str, str], ...] = ()
    tensors = []
    for name, value in header.items():
        if name == "__metadata__":
            metadata = _metadata(value)
        else:
            tensors.append(_tensor(name, value))
    return tensors, metadata


def _metadata(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _Refused("its __metadata__ is not an object of strings")
    return tuple(value.items())


def _tensor(name: str, value: Any) -> TensorEntry:
    if not isinstance(value, dict):
        raise _Refused(f"its entry {_shown(name)} is not an object")
    if set(value) != _TENSOR_KEYS:
        extra, missing = sorted(set(value) - _TENSOR_KEYS), sorted(_TENSOR_KEYS - set(value))
        what = f"has no {', '.join(missing)}" if missing else f"holds {', '.join(_shown(k) for k in extra[:3])}"
        raise _Refused(f"tensor {_shown(name)} {what} (a tensor has exactly dtype, shape and data_offsets)")
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _Refused(f"tensor {_shown(name)} has dtype {_shown(dtype)}, which is not a safetensors dtype")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise _Refused(f"tensor {_shown(name)} has shape {_shown(shape)}, not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets) and offsets[0] <= offsets[1]):
        raise _Refused(f"tensor {_shown(name)} has data_offsets {_shown(offsets)}, not [begin, end] integers with begin <= end")
    bits = _elements(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        needs = "more than 2**64" if bits > 8 * _MAX_INT else f"{bits / 8:g}"
        raise _Refused(
            f"tensor {_shown(name)} ({dtype}, shape {_shown(shape)}) needs {needs} bytes but its data_offsets span {offsets[1] - offsets[0]}"
        )
    return TensorEntry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _elements(shape: list[int]) -> int:
    """prod(shape), stopped once beyond any file (a long shape of huge dimensions would otherwise
    build an enormous integer)."""
    if 0 in shape:
        return 0
    count = 1
    for d in shape:
        count *= d
        if count > _MAX_INT:
            return _MAX_INT + 1
    return count


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT


def _tiled(tensors: list[TensorEntry], data_bytes: int) -> tuple[TensorEntry, ...]:
    """The tensors by offset, once they are known to cover the data section exactly."""
    for t in tensors:
        if t.end > data_bytes:
            raise _Refused(f"tensor {_shown(t.name)} ends at byte {t.end} of the data, past its end ({data_bytes} bytes)")
    ordered = sorted(tensors, key=lambda t: (t.begin, t.end))
    previous: TensorEntry | None = None
    for t in ordered:
        reached = previous.end if previous else 0
        if t.begin < reached:
            raise _Refused(f"tensor {_shown(t.name)} overlaps tensor {_shown(previous.name if previous else '')} (bytes {t.begin}-{reached})")
        if t.begin > reached:
            raise _Refused(f"bytes {reached}-{t.begin} of the data belong to no tensor (the format allows no holes)")
        previous = t
    covered = previous.end if previous else 0
    if covered != data_bytes:
        raise _Refused(f"the last {data_bytes - covered} bytes of the data belong to no tensor (the format allows no holes)")
    return tuple(ordered)


def check_weight_files(folder: Path) -> tuple[SafetensorsHeader, ...]:
    """Every ``*.safetensors`` in ``folder`` read and checked, then every shard index against them."""
    entries = sorted(p for p in folder.iterdir() if p.name.endswith(".safetensors"))
    headers = tuple(read_safetensors_header(p) for p in entries)
    for index in sorted(p for p in folder.iterdir() if p.name.endswith(".safetensors.index.json")):
        _check_index(index, {h.path.name: h for h in headers})
    return headers


def _check_index(path: Path, headers: dict[str, SafetensorsHeader]) -> None:
    try:
        _check_index_content(_read_index(path), headers)
    except _Refused as exc:
        raise ModelLoadError(
            f"{path} is not a valid safetensors shard index: {exc}.",
            "Save the model again with save_pretrained(folder, safe_serialization=True), or download the folder again.",
        ) from None


def _read_index(path: Path) -> Any:
    if not path.is_file():
        raise _Refused("it is not a regular file")
    if path.stat().st_size > MAX_HEADER_BYTES:
        raise _Refused(f"it is larger than {MAX_HEADER_BYTES} bytes")
    try:
        return json.loads(path.read_bytes().decode("utf-8"), object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        raise _Refused(f"it is not valid JSON ({str(exc)[:120]})") from None


def _check_index_content(index: Any, headers: dict[str, SafetensorsHeader]) -> None:
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict) or set(index) - {"metadata", "weight_map"}:
        raise _Refused("it is not an object of a weight_map and optional metadata")
    metadata = index.get("metadata", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, (str, int, float, bool)) or v is None for v in metadata.values()):
        raise _Refused("its metadata is not an object of plain values")
    names = {name: {t.name for t in h.tensors} for name, h in headers.items()}
    for tensor, shard in index["weight_map"].items():
        if not isinstance(shard, str) or shard not in names:
            raise _Refused(f"tensor {_shown(tensor)} is mapped to {_shown(shard)}, which is not a .safetensors file of this folder")
        if tensor not in names[shard]:
            raise _Refused(f"tensor {_shown(tensor)} is mapped to {shard}, whose header does not list it")
