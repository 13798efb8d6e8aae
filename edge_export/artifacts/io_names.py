"""The names of a model's inputs and outputs, and the signature key they live under.

litert-torch names a signature's inputs ``args_0``, ``args_1``... whenever it is given positional
example inputs (which edge-export always gives: the same tuple traces, converts and calibrates), and
its outputs after dict keys, else ``output_0``.... An app then has to guess which tensor is which.
The names here come from the model instead and are written into the flatbuffer by
``passes/flatbuffer/rename_signature_pass``:

- inputs: ``--input-names``, else ``forward()``'s parameter names (a module's own signature; a
  ``.pt2``'s and a TorchScript archive's unlifted graph keep them as its placeholders' names);
- outputs: ``--output-names``, else the dict key, ``ModelOutput`` field or named-tuple field PyTorch
  returned each output under, else the converter's own name (``output_0``...).

A name must be a Python identifier (apps and the signature runner key tensors by it) and unique.
"""

from __future__ import annotations

import inspect
import keyword
from typing import Any, Sequence

from ..errors import UsageError

__all__ = [
    "DEFAULT_SIGNATURE_KEY",
    "check_names",
    "check_signature_key",
    "forward_parameter_names",
    "resolve_names",
]

DEFAULT_SIGNATURE_KEY = "serving_default"


def _is_name(text: Any) -> bool:
    return isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)


def check_names(names: Sequence[str], option: str) -> tuple[str, ...]:
    """An override list (``--input-names``/``--output-names``): identifiers, each once."""
    names = tuple(names)
    bad = [n for n in names if not _is_name(n)]
    if bad:
        raise UsageError(
            f"{option} {','.join(names)}: {', '.join(repr(n) for n in bad)} "
            f"{'is not a valid name' if len(bad) == 1 else 'are not valid names'} (a name is a "
            "Python identifier: letters, digits and underscores, not starting with a digit).",
            f"Write e.g. {option} pixel_values,attention_mask.",
        )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(
            f"{option} {','.join(names)} names {', '.join(duplicates)} more than once; an app looks "
            "each tensor up by its name, so names must be unique.",
            f"Give every {option.split('-')[2].rstrip('s')} its own name.",
        )
    return names


def check_signature_key(key: str) -> str:
    if not _is_name(key):
        raise UsageError(
            f"--signature-key {key!r} is not a valid signature name (a Python identifier).",
            f"Write e.g. --signature-key {DEFAULT_SIGNATURE_KEY}.",
        )
    return key


def check_count(names: Sequence[str], count: int, option: str, what: str) -> None:
    if names and len(names) != count:
        raise UsageError(
            f"{option} gives {len(names)} name(s), but the model has {count} {what}(s).",
            f"Give exactly one name per {what}, in forward()'s order.",
        )


def forward_parameter_names(module: Any, count: int) -> list[str | None]:
    """Per input, the name of the ``forward()`` parameter it binds to (None when unknown: ``*args``,
    or a signature that cannot be read)."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError, AttributeError):  # builtins and C extensions have no signature
        return [None] * count
    names: list[str | None] = []
    for parameter in parameters:
        if parameter.kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            break
        names.append(parameter.name)
    return (names + [None] * count)[:count]


def resolve_names(override: Sequence[str], from_model: Sequence[str | None], current: Sequence[str]) -> tuple[str, ...]:
    """The override, else the model's names, else the converter's (``current``). Model names that
    are not identifiers or repeat are not used (the converter's name stays for those)."""
    if override:
        return tuple(override)
    chosen = [m if _is_name(m) else c for m, c in zip(from_model, current)] + list(current[len(from_model):])
    if len(set(chosen)) != len(chosen):
        return tuple(current)
    return tuple(chosen)
