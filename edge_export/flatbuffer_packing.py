"""Writing a LiteRT model object back to flatbuffer bytes, without repeating identical vectors.

A per-channel quantized tensor stores a float32 scale and an int64 zero point per channel, and the
bias of every quantized conv or linear stores another such pair. The zero points are all zero for
symmetric weights, so a MobileNetV2 repeats the same all-zero vectors thousands of bytes at a time:
about 7% of its int8 file (289 kB of 4.1 MB). FlatBuffers allows any number of tables to point at
one vector, and readers (LiteRT, TFLite Micro, flatc, the Edge TPU compiler) only follow offsets,
so writing each distinct quantization vector once is lossless: the model decodes to the same
values and runs bit-identically.

Only the numeric vectors of quantization parameters are shared (int64 zero points, float32
scales/min/max): the generated packer writes every other vector (weights, shapes, names) itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pack_model", "share_quantization_vectors", "strip_tensor_names"]

_TFLITE_FILE_IDENTIFIER = b"TFL3"
# Element types of QuantizationParameters' vectors (zero_point: [long], scale/min/max: [float]).
_SHARED_DTYPES = ("<i8", "<f4")


def _sharing_builder(initial_size: int) -> Any:
    import flatbuffers

    class SharingBuilder(flatbuffers.Builder):
        """A Builder that returns the offset of an identical earlier vector instead of a copy."""

        def __init__(self, size: int) -> None:
            super().__init__(size)
            self._vectors: dict[tuple[str, bytes], int] = {}
            self.shared_bytes = 0

        def CreateNumpyVector(self, x: Any) -> int:  # noqa: N802 (the flatbuffers API's name)
            if x.ndim != 1 or x.dtype.str not in _SHARED_DTYPES:
                return super().CreateNumpyVector(x)
            key = (x.dtype.str, x.tobytes())
            found = self._vectors.get(key)
            if found is not None:
                self.shared_bytes += x.nbytes
                return found
            offset = super().CreateNumpyVector(x)
            self._vectors[key] = offset
            return offset

    return SharingBuilder(initial_size)


def pack_model(model: Any) -> bytes:
    """Serialize a ``schema_py_generated.ModelT``, writing repeated quantization vectors once."""
    builder = _sharing_builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=_TFLITE_FILE_IDENTIFIER)
    return bytes(builder.Output())


def _has_quantization_vectors(model: Any) -> bool:
    return any(
        t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale) > 0
        for sg in model.subgraphs or ()
        for t in sg.tensors or ()
    )


def share_quantization_vectors(model_bytes: bytes) -> bytes:
    """The same model with each distinct quantization vector stored once.

    Returns ``model_bytes`` unchanged for a model without quantization parameters (a float model
    keeps the converter's exact bytes) or when rewriting would not make the file smaller.
    """
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    if not _has_quantization_vectors(model):
        return bytes(model_bytes)
    packed = pack_model(model)
    return packed if len(packed) < len(model_bytes) else bytes(model_bytes)


def strip_tensor_names(model_bytes: bytes) -> bytes:
    """The same model without the names of its inner tensors.

    litert-torch names every tensor after the module stack of the nodes that made it, often
    hundreds of characters: 15% of a small int8 CNN, bytes a microcontroller keeps in flash for
    nothing. The runtimes never read them, so the model runs bit-identically; the subgraphs' input
    and output tensors keep their names (apps look tensors up by them). What is lost is the map
    from tensors back to PyTorch modules that per-layer parity and the reports' module paths use.
    """
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    for sg in model.subgraphs or ():
        keep = {int(i) for i in (*(sg.inputs if sg.inputs is not None else ()), *(sg.outputs if sg.outputs is not None else ()))}
        for index, tensor in enumerate(sg.tensors or ()):
            if index not in keep:
                tensor.name = b""
    return pack_model(model)

