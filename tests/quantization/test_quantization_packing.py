"""Quantized flatbuffers store each distinct quantization vector once: smaller, and bit-identical
in LiteRT and TFLite Micro."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quantization_models import CNN_SPEC, heldout, tflite_outputs

from edge_export.config import QuantizeMode
from edge_export.flatbuffer import read_flatbuffer
from edge_export.passes.flatbuffer import run_flatbuffer_passes, share_quantization_vectors_pass
from edge_export.quantization import QuantizationRequest, quantize_model
from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer


def share_quantization_vectors(model_bytes: bytes) -> bytes:
    return run_flatbuffer_passes(model_bytes, [share_quantization_vectors_pass]).model_bytes


def _unshared(model_bytes: bytes) -> bytes:
    """What the stock writer makes of the same model: every vector written out in full."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _repeated_zero_point_bytes(model_bytes: bytes) -> int:
    """Bytes of zero-point vectors that repeat an earlier one exactly."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    seen: set[bytes] = set()
    repeated = 0
    for t in model.subgraphs[0].tensors:
        q = t.quantization
        if q is None or q.zeroPoint is None or len(q.zeroPoint) == 0:
            continue
        key = np.asarray(q.zeroPoint, dtype="<i8").tobytes()
        if key in seen:
            repeated += len(key)
        seen.add(key)
    return repeated


@pytest.fixture(scope="module")
def per_channel_int8(cnn_float_bytes, cnn_calibration) -> bytes:
    return _unshared(quantize_flatbuffer(cnn_float_bytes, QuantizeMode.INT8, cnn_calibration))


def test_sharing_saves_every_repeated_zero_point_vector(per_channel_int8):
    repeated = _repeated_zero_point_bytes(per_channel_int8)
    # Per-channel weights and their int32 biases both carry all-zero vectors of the channel count.
    assert repeated >= 8 * (8 + 16)
    shared = share_quantization_vectors(per_channel_int8)
    assert len(per_channel_int8) - len(shared) >= repeated
    # Decoded, the parameters are the same values.
    assert _repeated_zero_point_bytes(shared) == repeated
    before, after = read_flatbuffer(per_channel_int8), read_flatbuffer(shared)
    assert [(t.name, t.quant) for t in before.tensors] == [(t.name, t.quant) for t in after.tensors]
    assert sum(t.quant is not None and t.quant.per_channel for t in after.tensors) >= 4


def test_shared_model_runs_bit_identically_in_litert_and_tflite_micro(per_channel_int8):
    from edge_export.targets.micro.runner import MicroRunner

    shared = share_quantization_vectors(per_channel_int8)
    xs = heldout(CNN_SPEC, 3)
    np.testing.assert_array_equal(tflite_outputs(shared, xs), tflite_outputs(per_channel_int8, xs))
    micro_before, micro_after = MicroRunner(per_channel_int8), MicroRunner(shared)
    for x in xs:
        np.testing.assert_array_equal(micro_after.run([x])[0], micro_before.run([x])[0])


def test_float_models_are_only_aligned(cnn_float_bytes):
    """No quantization vectors to share: the converter's model, only with its buffers 16-byte aligned."""
    from edge_export.flatbuffer import align_buffers, misaligned_buffers

    shared = share_quantization_vectors(cnn_float_bytes)
    assert shared == align_buffers(cnn_float_bytes)
    assert misaligned_buffers(shared) == []
    np.testing.assert_array_equal(tflite_outputs(shared, heldout(CNN_SPEC, 2)), tflite_outputs(cnn_float_bytes, heldout(CNN_SPEC, 2)))


def test_quantize_model_writes_shared_vectors(cnn, cnn_calibration):
    result = quantize_model(cnn, (torch.zeros(CNN_SPEC.shape),), QuantizationRequest(
        QuantizeMode.INT8, calibration=cnn_calibration, backend="flatbuffer",
    ))
    data = result.model.data
    assert len(data) < len(_unshared(data))
    assert len(share_quantization_vectors(data)) == len(data)
