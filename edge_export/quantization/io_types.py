"""A quantized model's inputs and outputs as an app sees them, and the choice of their types
(float32, int8 or uint8). The rewrite is the flatbuffer pass ``passes/flatbuffer/set_io_dtype_pass.py``;
``set_io_dtype`` runs it alone on a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from ..config import IODtype
from ..flatbuffer import FlatbufferModel

__all__ = ["IOQuantInfo", "describe_io", "set_io_dtype"]


@dataclass(frozen=True)
class IOQuantInfo:
    """One model input or output as an app sees it: dtype, and the params to (de)quantize with."""

    kind: str  # "input" | "output"
    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: float | None
    zero_point: int | None


def describe_io(fb: FlatbufferModel) -> tuple[IOQuantInfo, ...]:
    """Inputs then outputs in subgraph order, named as ``FlatbufferModel.input_names`` says."""
    order = (
        list(zip(fb.input_names, fb.inputs)),
        list(zip(fb.output_names, fb.outputs)),
    )
    result = []
    for kind, pairs in zip(("input", "output"), order):
        for name, idx in pairs:
            t = fb.tensors[idx]
            q = t.quant if (t.quant and not t.quant.per_channel and t.dtype in ("int8", "uint8", "int16")) else None
            result.append(
                IOQuantInfo(
                    kind=kind,
                    name=name,
                    shape=t.shape,
                    dtype=t.dtype,
                    scale=q.scales[0] if q else None,
                    zero_point=q.zero_points[0] if q else None,
                )
            )
    return tuple(result)


def set_io_dtype(model: FlatbufferModel, io_dtype: IODtype) -> FlatbufferModel:
    """The model with every quantized input/output in ``io_dtype`` (the pass, packed once); the
    same model when no boundary changes."""
    from ..passes.flatbuffer import run_flatbuffer_passes, set_io_dtype_pass

    result = run_flatbuffer_passes(model, [partial(set_io_dtype_pass, io_dtype=IODtype(io_dtype))])
    return result.model if result.modified else model
