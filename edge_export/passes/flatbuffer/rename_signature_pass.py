"""Name the signature's inputs, outputs and key after the PyTorch model (see ``io_names``).

The names come from ``forward()`` or from ``--input-names``, ``--output-names`` and ``--signature-key``.

litert-torch, given positional example inputs, names the signature's inputs ``args_0``...; this pass
renames the SignatureDef's entries (what the runtime's signature runner and apps look tensors up by),
its key, and the boundary tensors' own names that repeat them (``serving_default_args_0`` becomes
``serving_default_pixel_values``). Inner tensors keep their names, so provenance and per-layer
parity are unaffected; the model computes bit-identically.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["rename_signature_pass"]


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def _renamed_tensor(name: str, old_key: str, old: str, new_key: str, new: str) -> str | None:
    """``<old_key>_<old>`` (optionally followed by ``_...`` or ``:...``) with the new key and name."""
    prefix = f"{old_key}_{old}"
    if name == prefix or name.startswith((prefix + "_", prefix + ":")):
        return f"{new_key}_{new}{name[len(prefix):]}"
    return None


def rename_signature_pass(
    model: Any, *, input_names: Sequence[str], output_names: Sequence[str], signature_key: str
) -> bool:
    """Rename the first signature's inputs and outputs (given in subgraph order) and its key; True if
    anything changed. A model without a signature, or whose I/O counts differ, is left alone."""
    if not model.signatureDefs or not model.subgraphs:
        return False
    signature = model.signatureDefs[0]
    subgraph = model.subgraphs[signature.subgraphIndex or 0]
    old_key = _decode(signature.signatureKey)
    modified = False
    for entries, order, names in (
        (signature.inputs or [], list(subgraph.inputs if subgraph.inputs is not None else ()), input_names),
        (signature.outputs or [], list(subgraph.outputs if subgraph.outputs is not None else ()), output_names),
    ):
        if len(order) != len(names) or len(entries) != len(names):
            continue
        new_for_tensor = {int(t): n for t, n in zip(order, names)}
        for entry in entries:
            new = new_for_tensor.get(int(entry.tensorIndex))
            old = _decode(entry.name)
            if new is None or (new == old and signature_key == old_key):
                continue
            tensor = subgraph.tensors[int(entry.tensorIndex)]
            renamed = _renamed_tensor(_decode(tensor.name), old_key, old, signature_key, new)
            if renamed is not None:
                tensor.name = renamed.encode()
            entry.name = new.encode()
            modified = True
    if old_key != signature_key:
        signature.signatureKey = signature_key.encode()
        modified = True
    return modified
