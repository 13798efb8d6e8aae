"""Structure-aware mutants of a model folder's safetensors headers and tokenizer files, for the
fuzz tests (tests/llm/test_model_folder_fuzz.py) and their longer runs (benchmarks/safetensors_fuzz.py,
benchmarks/tokenizer_fuzz.py). Every mutant is a pure function of its seed."""

from __future__ import annotations

import json
import random
import struct
from typing import Any

__all__ = ["valid_safetensors", "split_safetensors", "join_safetensors", "mutate_safetensors",
           "mutate_tokenizer_files", "TEMPLATE_MUTANTS"]


def valid_safetensors() -> bytes:
    """A small valid file: tensors of several dtypes (one empty), and metadata."""
    import numpy as np
    from safetensors.numpy import save

    tensors = {
        "embed.weight": np.arange(24, dtype=np.float32).reshape(4, 6),
        "norm.weight": np.ones(6, dtype=np.float16),
        "positions": np.arange(5, dtype=np.int64),
        "mask": np.array([True, False, True]),
        "bytes": np.arange(7, dtype=np.uint8),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    return save(tensors, metadata={"format": "pt", "note": "tiny"})


def split_safetensors(data: bytes) -> tuple[dict, bytes]:
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + length]), data[8 + length:]


def join_safetensors(header: Any, payload: bytes, *, raw: bytes | None = None) -> bytes:
    body = raw if raw is not None else json.dumps(header).encode("utf-8")
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body + payload


_ODD_VALUES: tuple[Any, ...] = (
    -1, 0, 1, 2**62, 2**64, 2**64 - 1, 1.5, float("nan"), "1", None, True, [], {}, [1, 2, 3], [[1]], "F32", 10**30,
)


def _tensor_names(header: dict) -> list[str]:
    return sorted(k for k in header if k != "__metadata__")


def _json_mutant(header: dict, payload: bytes, rng: random.Random) -> tuple[str, bytes]:
    h = json.loads(json.dumps(header))
    name = rng.choice(_tensor_names(h))
    kind = rng.choice(("dtype", "shape", "shape_item", "offsets", "offset_item", "shift", "drop_key", "add_key",
                       "entry", "metadata", "duplicate", "drop_tensor", "swap_offsets", "top_level"))
    t = h[name]
    if kind == "dtype":
        t["dtype"] = rng.choice(("F32", "F16", "BF16", "I8", "F4", "C64", "F8_E8M0", "f32", "FLOAT", "", 3, None))
    elif kind == "shape":
        t["shape"] = rng.choice(_ODD_VALUES)
    elif kind == "shape_item" and t["shape"]:
        t["shape"][rng.randrange(len(t["shape"]))] = rng.choice(_ODD_VALUES)
    elif kind == "offsets":
        t["data_offsets"] = rng.choice(_ODD_VALUES)
    elif kind == "offset_item":
        t["data_offsets"][rng.randrange(2)] = rng.choice(_ODD_VALUES + (len(payload), len(payload) + 8))
    elif kind == "shift":
        delta = rng.choice((-8, -4, -1, 1, 4, 8, len(payload)))
        t["data_offsets"] = [t["data_offsets"][0] + delta, t["data_offsets"][1] + delta]
    elif kind == "drop_key":
        t.pop(rng.choice(sorted(t)))
    elif kind == "add_key":
        t[rng.choice(("offsets", "dtype2", "__metadata__", "shape "))] = rng.choice(_ODD_VALUES)
    elif kind == "entry":
        h[name] = rng.choice(_ODD_VALUES)
    elif kind == "metadata":
        h["__metadata__"] = rng.choice(({"a": 1}, {"a": None}, "text", [], {"a": {"b": "c"}}, {}))
    elif kind == "duplicate":
        text = json.dumps(h)
        entry = json.dumps({name: t})[1:-1]
        return kind, join_safetensors(None, payload, raw=(text[:-1] + ", " + entry + "}").encode())
    elif kind == "drop_tensor":
        h.pop(name)
    elif kind == "swap_offsets":
        other = rng.choice(_tensor_names(h))
        t["data_offsets"], h[other]["data_offsets"] = h[other]["data_offsets"], t["data_offsets"]
    else:
        h = rng.choice(([h], "header", 3, None, {"__metadata__": {}}, {}))
    return kind, join_safetensors(h, payload)


def _byte_mutant(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    length = struct.unpack("<Q", data[:8])[0]
    kind = rng.choice(("length", "flip", "truncate", "append", "header_text", "huge_length"))
    if kind == "length":
        return kind, struct.pack("<Q", max(0, length + rng.choice((-9, -1, 1, 8, 1000)))) + data[8:]
    if kind == "huge_length":
        return kind, struct.pack("<Q", rng.choice((2**62, 2**63, 2**64 - 1, 100_000_001, len(data)))) + data[8:]
    if kind == "flip":
        at = rng.randrange(len(data))
        return kind, data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1:]
    if kind == "truncate":
        return kind, data[:rng.randrange(len(data))]
    if kind == "append":
        return kind, data + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 17)))
    at = 8 + rng.randrange(length)
    junk = rng.choice((b"\x00", b"\xff", b'"', b"{", b"}", b"[", b"\\", b"\xc3", b"9", b"-", b"e"))
    return kind, data[:at] + junk + data[at + 1:]


def mutate_safetensors(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """(the mutation's kind, the mutated file) from a valid ``data``."""
    if rng.random() < 0.4:
        return _byte_mutant(data, rng)
    header, payload = split_safetensors(data)
    kind, mutant = _json_mutant(header, payload, rng)
    return f"json:{kind}", mutant


# Chat templates a folder might carry: broken, hostile, looping, huge. The loop and the huge string
# are what the time and memory limits exist for; the rest must be refused or accepted cleanly.
TEMPLATE_MUTANTS: dict[str, str] = {
    "syntax_error": "{% for m in messages %}{{ m['content'] }",
    "unknown_filter": "{{ messages[0]['content'] | no_such_filter }}",
    "attribute_escape": "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ messages[0]['content'] }}",
    "no_content": "{% for m in messages %}<|{{ m['role'] }}|>{% endfor %}",
    "raises": "{{ raise_exception('no user turns here') }}",
    "undefined": "{{ messages[0]['content'] }}{{ no_such_variable.attribute }}",
    "loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0]['content'] }}",
    "huge_string": "{% set x = 'ab' * 4000000000 %}{{ x | length }}{{ messages[0]['content'] }}",
    "fine": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}",
}


def _mutate_json_value(value: Any, rng: random.Random, depth: int = 0) -> Any:
    """``value`` with one randomly chosen leaf or key replaced, removed or retyped."""
    if isinstance(value, dict) and value and depth < 6:
        key = rng.choice(sorted(value))
        if rng.random() < 0.15:
            return {k: v for k, v in value.items() if k != key}
        return {**value, key: _mutate_json_value(value[key], rng, depth + 1)}
    if isinstance(value, list) and value and depth < 6:
        i = rng.randrange(len(value))
        if rng.random() < 0.15:
            return value[:i] + value[i + 1:]
        return value[:i] + [_mutate_json_value(value[i], rng, depth + 1)] + value[i + 1:]
    return rng.choice(_ODD_VALUES + ("", "<eos>", "Metaspace", "BPE", "WordPiece", "[^\\s]+", "(a+)+$"))


def mutate_tokenizer_files(files: dict[str, bytes], rng: random.Random) -> tuple[str, dict[str, bytes]]:
    """(the mutation's kind, the mutated tokenizer files) from valid ``files`` (tokenizer.json,
    tokenizer_config.json, chat_template.jinja)."""
    out = dict(files)
    roll = rng.random()
    if roll < 0.25:
        name = rng.choice(sorted(t for t in TEMPLATE_MUTANTS if t not in ("loop", "huge_string")))
        out["chat_template.jinja"] = TEMPLATE_MUTANTS[name].encode()
        return f"template:{name}", out
    target = "tokenizer.json" if roll < 0.7 else "tokenizer_config.json"
    data = out[target]
    if rng.random() < 0.3:  # bytes: truncated or a byte changed
        at = rng.randrange(len(data))
        out[target] = data[:at] if rng.random() < 0.5 else data[:at] + bytes([rng.randrange(256)]) + data[at + 1:]
        return f"{target}:bytes", out
    out[target] = json.dumps(_mutate_json_value(json.loads(data), rng)).encode()
    return f"{target}:json", out

