"""Run flatbuffer passes over one mutable model object and write it once.

A pass is a function ``pass_(model) -> bool`` over ai-edge-litert's object API model
(``schema_py_generated.ModelT``): it checks its preconditions (raising the project's errors), changes
the model in place and returns whether it changed anything. Passes with parameters are bound with
``functools.partial``. The pipeline reads the model once, runs the passes in order, and packs once
at the end through ``flatbuffer.pack_model`` (16-byte aligned buffers, each quantization
vector stored once). When no pass changed anything the input comes back as it was, aligned.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...flatbuffer import FlatbufferModel, read_flatbuffer
from ...flatbuffer import misaligned_buffers, pack_model, read_model

__all__ = ["FlatbufferPass", "PassPipelineResult", "pass_name", "run_flatbuffer_passes"]

FlatbufferPass = Callable[[Any], bool]


@dataclass(frozen=True)
class PassPipelineResult:
    model: FlatbufferModel  # the packed result, verified and read back (its bytes are ``.data``)
    modified_by: tuple[str, ...]  # names of the passes that changed the model, in run order

    @property
    def model_bytes(self) -> bytes:
        return self.model.data

    @property
    def modified(self) -> bool:
        return bool(self.modified_by)


def pass_name(flatbuffer_pass: FlatbufferPass) -> str:
    while isinstance(flatbuffer_pass, functools.partial):
        flatbuffer_pass = flatbuffer_pass.func
    return getattr(flatbuffer_pass, "__name__", type(flatbuffer_pass).__name__)


def run_flatbuffer_passes(
    source: bytes | FlatbufferModel, passes: Sequence[FlatbufferPass], origin: str = "the rewritten model"
) -> PassPipelineResult:
    """Run ``passes`` in order over ``source`` (a model, or bytes at the edges: a converter's
    output, a file) and pack the result once. The result is read back and verified, so the next
    stage gets a model object, not bytes to parse again; a model that no pass changed and whose
    buffers are aligned comes back as the same object."""
    if isinstance(source, FlatbufferModel):
        data, model = source.data, source.mutable()
    else:
        data = bytes(source)
        model = read_model(data)
    modified_by = tuple(pass_name(p) for p in passes if p(model))
    if not modified_by and not misaligned_buffers(data):
        return PassPipelineResult(source if isinstance(source, FlatbufferModel) else read_flatbuffer(data, origin), ())
    # Unchanged but misaligned input packs to exactly what align_buffers writes for it.
    return PassPipelineResult(read_flatbuffer(pack_model(model, source=data), origin), modified_by)
