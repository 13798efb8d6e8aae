"""int8/uint8/float32 model I/O: the boundary rewrite, its quantization params, and parity."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quantization_models import CNN_SPEC, heldout, tflite_outputs, torch_outputs

from edge_export.config import IODtype, QuantizeMode
from edge_export.flatbuffer import FlatbufferModel, load_flatbuffer, read_flatbuffer
from edge_export.quantization import describe_io, set_io_dtype
from edge_export.quantization.pt2e import quantize_pt2e
from edge_export.runtime.interpreter import TFLiteRunner
from edge_export.validators.metrics import sqnr_db


@pytest.fixture(scope="module")
def int8_model(cnn, cnn_calibration) -> FlatbufferModel:
    return read_flatbuffer(quantize_pt2e(cnn, (torch.zeros(CNN_SPEC.shape),), QuantizeMode.INT8, cnn_calibration))


def test_backend_writes_int8_io_and_int8_is_a_no_op(int8_model):
    ins = [x for x in describe_io(int8_model) if x.kind == "input"]
    assert [x.dtype for x in ins] == ["int8"] and ins[0].scale > 0
    assert set_io_dtype(int8_model, IODtype.INT8) is int8_model


def test_uint8_io_has_shifted_zero_points_and_same_results(int8_model):
    u8 = set_io_dtype(int8_model, IODtype.UINT8)
    before, after = describe_io(int8_model), describe_io(u8)
    for a, b in zip(before, after):
        assert b.dtype == "uint8" and b.scale == a.scale and b.zero_point == a.zero_point + 128
    fb = u8
    assert fb.is_fully_integer and fb.op_counts["QUANTIZE"] == 2
    xs = heldout(CNN_SPEC, 4)
    # Bit-for-bit the same computation: the uint8 boundary requantize is exact.
    np.testing.assert_array_equal(tflite_outputs(u8, xs), tflite_outputs(int8_model, xs))


def test_uint8_raw_io_parity_with_pytorch(cnn, int8_model):
    """Quantize inputs / dequantize outputs by hand with the reported params, as an app would."""
    u8 = set_io_dtype(int8_model, IODtype.UINT8)
    params = {x.kind: x for x in describe_io(u8)}
    runner = TFLiteRunner(u8)
    xs = heldout(CNN_SPEC, 8)
    outs = []
    for x in xs:
        q = np.clip(np.round(x / params["input"].scale) + params["input"].zero_point, 0, 255).astype(np.uint8)
        raw = runner.run_raw([q])[0]
        assert raw.dtype == np.uint8
        outs.append((raw.astype(np.float32) - params["output"].zero_point) * params["output"].scale)
    assert sqnr_db(torch_outputs(cnn, xs), np.concatenate(outs)) > 25.0


def test_float32_io_wraps_with_quantize_and_dequantize(cnn, int8_model):
    f32 = set_io_dtype(int8_model, IODtype.FLOAT32)
    fb = f32
    assert [t.dtype for t in fb.input_tensors + fb.output_tensors] == ["float32", "float32"]
    assert fb.is_fully_integer  # boundary QUANTIZE/DEQUANTIZE are allowed
    assert fb.op_counts["QUANTIZE"] == 1 and fb.op_counts["DEQUANTIZE"] == 1
    xs = heldout(CNN_SPEC, 4)
    np.testing.assert_allclose(tflite_outputs(f32, xs), tflite_outputs(int8_model, xs), atol=1e-6)


def test_matches_tflites_own_modify_model_interface(tmp_path, int8_model):
    """TFLite's modify_model_interface (shipped in ai-edge-litert) turns our float-I/O model into
    the same uint8 interface our rewrite writes."""
    from ai_edge_litert import _pywrap_modify_model_interface as mmi
    from ai_edge_litert import schema_py_generated as schema

    src, dst = tmp_path / "f32.tflite", tmp_path / "u8.tflite"
    src.write_bytes(set_io_dtype(int8_model, IODtype.FLOAT32).data)
    assert mmi.modify_model_interface(str(src), str(dst), schema.TensorType.UINT8, schema.TensorType.UINT8) == 0
    theirs, ours = load_flatbuffer(dst), set_io_dtype(int8_model, IODtype.UINT8)
    assert [(x.dtype, x.scale, x.zero_point) for x in describe_io(theirs)] == [
        (x.dtype, x.scale, x.zero_point) for x in describe_io(ours)
    ]
    assert theirs.op_counts == ours.op_counts
