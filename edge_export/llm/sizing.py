"""Default prefill and cache lengths from the model's config and size, with the memory estimate
the report states (``--prefill-lengths`` / ``--cache-length`` given are kept as given).

Measured on SmolLM2-135M (30 layers, 538 MB of float32 weights, 2 loaded cores): prefill 32 /
cache 256 exported in 392 s at 4.2 GB peak; prefill 128 / cache 1024 had not finished after 15
minutes. So the cache is sized to the model: the float32 KV cache may take at most 1/32 of the
float32 weights (a phone holds both), rounded down to a power of two, between 128 and 4096
positions and never past ``max_position_embeddings``; the prefill signature is 1/8 of the cache
(at most 128; longer prompts are prefilled in chunks). The export's peak memory is estimated as
8x the float32 weights (SmolLM2: 3.4 GiB for the export alone, 6.6x; 4.4 GiB for the whole run,
8.5x) and reported beside the memory available.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from .options import LanguageModelOptions

__all__ = ["LlmSizing", "EXPORT_PEAK_PER_WEIGHT_BYTE", "default_lengths", "resolve_lengths"]

KV_SHARE_OF_WEIGHTS = 32  # the KV cache at most 1/32 of the float weights
CACHE_RANGE = (128, 4096)
PREFILL_SHARE_OF_CACHE, PREFILL_MAX = 8, 128
EXPORT_PEAK_PER_WEIGHT_BYTE = 8  # SmolLM2-135M, 538 MB of float weights: 3.4-4.4 GiB peak (export alone, whole run)
FALLBACK = ((32,), 256)  # no config or weights to size from (a package.module:attr reference)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class LlmSizing:
    """Where the prefill and cache lengths came from, and the memory they were sized against."""

    source: str  # "given", "default" (from the config and weights) or "fallback" (nothing to size from)
    float_weights_bytes: int | None  # the weight files' bytes, as float32
    kv_cache_bytes_per_token: int | None  # float32 K and V of every layer, per cached position
    max_position_embeddings: int | None
    estimated_export_peak_bytes: int | None  # EXPORT_PEAK_PER_WEIGHT_BYTE x the float32 weights
    available_memory_bytes: int | None  # MemAvailable when the run began (None: not Linux)
    reason: str  # one sentence for the report


def _text_config(config: dict) -> dict:
    return config.get("text_config") if isinstance(config.get("text_config"), dict) else config


def _int(config: dict, key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def kv_bytes_per_token(config: dict) -> int | None:
    c = _text_config(config)
    layers, heads, hidden = _int(c, "num_hidden_layers"), _int(c, "num_attention_heads"), _int(c, "hidden_size")
    if not (layers and heads and hidden):
        return None
    kv_heads = _int(c, "num_key_value_heads") or heads
    head_dim = _int(c, "head_dim") or hidden // heads
    return 2 * layers * kv_heads * head_dim * 4


def float_weights_bytes(folder: Path, config: dict) -> int | None:
    """The weight files' bytes scaled to float32 (a bfloat16/float16 checkpoint exports as float32)."""
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))
    dtype = str(_text_config(config).get("torch_dtype") or config.get("dtype") or "float32")
    return size * (2 if dtype in ("bfloat16", "float16") else 1) or None


def _floor_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def default_lengths(weights: int | None, per_token: int | None, max_positions: int | None) -> tuple[tuple[int, ...], int]:
    """(prefill lengths, cache length) for a model of ``weights`` float32 bytes (see the module doc)."""
    if not (weights and per_token):
        prefill, cache = FALLBACK
    else:
        cache = min(max(_floor_pow2(weights // KV_SHARE_OF_WEIGHTS // per_token), CACHE_RANGE[0]), CACHE_RANGE[1])
        prefill = (min(max(cache // PREFILL_SHARE_OF_CACHE, 1), PREFILL_MAX),)
    if max_positions:
        cache = min(cache, max_positions)
        prefill = (min(prefill[0], cache),)
    return tuple(prefill), cache


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def resolve_lengths(folder: Path | None, config: dict | None, options: LanguageModelOptions) -> tuple[LanguageModelOptions, LlmSizing]:
    """``options`` with any length left out (None) filled from the config and weights, and why."""
    config = config or {}
    weights = float_weights_bytes(folder, config) if folder is not None and folder.is_dir() else None
    per_token, max_positions = kv_bytes_per_token(config), _int(_text_config(config), "max_position_embeddings")
    prefill, cache = default_lengths(weights, per_token, max_positions)
    given = options.prefill_lengths is not None and options.cache_length is not None
    source = "given" if given else ("default" if weights and per_token else "fallback")
    resolved = dataclasses.replace(
        options, prefill_lengths=options.prefill_lengths or prefill,
        cache_length=options.cache_length if options.cache_length is not None else cache,
    )
    if options.cache_length is not None and options.prefill_lengths is None:  # a given cache bounds the default prefill
        resolved = dataclasses.replace(resolved, prefill_lengths=(min(prefill[0], options.cache_length),))
    if options.prefill_lengths is not None and options.cache_length is None:  # a given prefill fits the default cache
        resolved = dataclasses.replace(resolved, cache_length=max(cache, max(options.prefill_lengths)))
    peak = weights * EXPORT_PEAK_PER_WEIGHT_BYTE if weights else None
    return resolved, LlmSizing(source, weights, per_token, max_positions, peak, _available_memory(),
                               _reason(source, resolved, weights, per_token, peak))


def _reason(source: str, o: LanguageModelOptions, weights: int | None, per_token: int | None, peak: int | None) -> str:
    lengths = f"prefill {','.join(map(str, o.prefill_lengths))}, cache {o.cache_length}"
    if source == "given":
        return f"{lengths} as given"
    if source == "fallback":
        return f"{lengths}: the fallback (no config.json or weight files to size from)"
    return (f"{lengths} from the config: the float32 KV cache ({_size(per_token * o.cache_length)}) kept within 1/{KV_SHARE_OF_WEIGHTS} "
            f"of the {_size(weights)} of float32 weights; export peak estimated at {_size(peak)}")


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"
