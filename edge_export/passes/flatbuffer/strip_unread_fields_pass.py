"""Drop what no runtime reads from a model (``--strip-names``, after ``strip_tensor_names_pass``).

With ``--strip-names`` the file is meant to be the smallest one that runs the same, so besides the
inner tensor names this drops, where present:

- the converter's own entries: the model ``description`` ("MLIR Converted.") and the
  ``keep_stablehlo_constant`` and ``CONVERSION_METADATA`` metadata entries with their buffers
  (LiteRT reads CONVERSION_METADATA only for telemetry, TFLite Micro never; nothing reads the other
  two). ``min_runtime_version`` stays: ``edge-export inspect``, the report and Android tooling read
  it, and it says which runtime the file needs. Metadata the user asked for (``TFLITE_METADATA``,
  labels) is attached after this pass and is never touched;
- ``shape_signature`` where it equals ``shape`` (a static shape: LiteRT treats an absent
  signature as the shape itself, TFLite Micro never reads it); a signature with a dynamic (-1)
  dimension is kept;
- ``min``/``max`` of quantization parameters that have scales (the calibration ranges the scales
  were computed from: neither runtime reads them once scales are there);
- empty buffers other than buffer 0: a tensor without data points at buffer 0, which the schema
  reserves for "no data", instead of an empty buffer of its own;
- repeated constant data: tensors whose buffers hold the same bytes point at the first of them
  (both runtimes treat constant buffers as read-only, as tied weights already share one);

buffers nothing refers to any more are then removed and the rest renumbered.

Every change leaves the tensors, operators and constants the runtimes read as they were, so the
model computes bit-identically (``tests/passes/test_strip_unread_fields_pass.py`` runs both files in
LiteRT and TFLite Micro).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONVERTER_METADATA", "strip_unread_fields_pass"]

# Metadata entries the converters add that no runtime needs.
CONVERTER_METADATA = (b"keep_stablehlo_constant", b"CONVERSION_METADATA")


def _has_data(buf: Any) -> bool:
    return (buf.data is not None and len(buf.data) > 0) or int(buf.offset or 0) > 1


def strip_unread_fields_pass(model: Any) -> bool:
    """Drop the converter's description and metadata, static shape signatures, min/max beside
    scales, per-tensor empty buffers and repeated constant data; True if anything changed."""
    modified = False
    if model.description:
        model.description = None
        modified = True
    kept = [md for md in model.metadata or () if bytes(md.name or b"") not in CONVERTER_METADATA]
    if len(kept) != len(model.metadata or ()):
        model.metadata = kept or None
        modified = True
    buffers = model.buffers or []
    zero_is_empty = bool(buffers) and not _has_data(buffers[0])
    for sg in model.subgraphs or ():
        for tensor in sg.tensors or ():
            sig = tensor.shapeSignature
            if sig is not None and tensor.shape is not None and list(sig) == list(tensor.shape):
                tensor.shapeSignature = None
                modified = True
            q = tensor.quantization
            if q is not None and q.scale is not None and len(q.scale) and (q.min is not None or q.max is not None):
                q.min = q.max = None
                modified = True
            if zero_is_empty and tensor.buffer and tensor.buffer < len(buffers) and not _has_data(buffers[tensor.buffer]):
                tensor.buffer = 0
                modified = True
    modified = _share_equal_buffers(model) or modified
    return _drop_unreferenced_buffers(model) or modified


def _share_equal_buffers(model: Any) -> bool:
    """Point every tensor whose buffer repeats an earlier buffer's bytes at that earlier buffer."""
    first: dict[bytes, int] = {}
    same_as: dict[int, int] = {}
    for index, buf in enumerate(model.buffers or ()):
        if index == 0 or buf.data is None or not len(buf.data):
            continue  # buffer 0 means "no data"; external data (offset) is left alone
        same_as[index] = first.setdefault(bytes(buf.data), index)
    modified = False
    for sg in model.subgraphs or ():
        for tensor in sg.tensors or ():
            target = same_as.get(int(tensor.buffer), int(tensor.buffer))
            if target != tensor.buffer:
                tensor.buffer = target
                modified = True
    return modified


def _drop_unreferenced_buffers(model: Any) -> bool:
    """Remove buffers no tensor or metadata entry refers to (buffer 0 always stays) and renumber."""
    buffers = model.buffers or []
    used = {0}
    for sg in model.subgraphs or ():
        used.update(int(t.buffer) for t in sg.tensors or ())
    used.update(int(md.buffer) for md in model.metadata or ())
    if len(used) == len(buffers) or not buffers:
        return False
    order = sorted(b for b in used if b < len(buffers))
    new_index = {old: new for new, old in enumerate(order)}
    model.buffers = [buffers[old] for old in order]
    for sg in model.subgraphs or ():
        for t in sg.tensors or ():
            t.buffer = new_index[int(t.buffer)]
    for md in model.metadata or ():
        md.buffer = new_index[int(md.buffer)]
    return True
