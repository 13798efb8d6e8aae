"""``generation_config.json``: the stop tokens and sampling defaults a model folder declares.

The file is someone else's: it is read with a size bound and an allow-list of fields (the EOS ids
and the sampler's settings); every other field is ignored, and a field of the wrong type is exit 2
naming it, not silently dropped. A folder without the file has none: the runtime's own sampler
defaults, and the tokenizer's and config's EOS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError

__all__ = ["GenerationDefaults", "read_generation_config", "token_ids"]

_MAX_BYTES = 1 << 20  # a real generation_config.json is a few hundred bytes


@dataclass(frozen=True)
class GenerationDefaults:
    eos_token_ids: tuple[int, ...] = ()
    do_sample: bool = False
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None


def token_ids(value: object) -> tuple[int, ...]:
    """An ``eos_token_id`` value (an id, a list of ids or null) as ids; anything else is empty."""
    values = value if isinstance(value, (list, tuple)) else (value,)
    return tuple(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def _number(data: dict, key: str, kind: type, path: Path) -> float | int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)) or value < 0:
        raise ModelLoadError(f"{path}: {key} is {value!r}, not a non-negative {kind.__name__}.", f"Fix {key} in generation_config.json or remove it.")
    return kind(value)


def read_generation_config(folder: Path) -> GenerationDefaults | None:
    """The defaults in ``folder/generation_config.json`` (None when the file is absent)."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return None
    if path.stat().st_size > _MAX_BYTES:
        raise ModelLoadError(f"{path} is {path.stat().st_size} bytes, more than the {_MAX_BYTES} a generation config may have.", "Save it again with model.generation_config.save_pretrained(folder).")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}.", "Save it again with model.generation_config.save_pretrained(folder).") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} is not a JSON object.", "Save it again with model.generation_config.save_pretrained(folder).")
    return GenerationDefaults(
        eos_token_ids=token_ids(data.get("eos_token_id")), do_sample=data.get("do_sample") is True,
        top_k=_number(data, "top_k", int, path), top_p=_number(data, "top_p", float, path),
        temperature=_number(data, "temperature", float, path),
    )
