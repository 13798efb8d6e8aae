"""Every quantization mode end to end: the flatbuffer's types, and SQNR vs PyTorch on held-out inputs
run with LiteRT."""

from __future__ import annotations

import json

import torch
from quantization_models import CNN_SPEC, heldout, tflite_outputs, torch_outputs

from edge_export.config import IODtype, QuantBackend, QuantizeMode
from edge_export.quantization import QuantizationRequest, quantize_model
from edge_export.validators.metrics import sqnr_db
from edge_export.output.serialize import to_json_value

EXAMPLE = (torch.zeros(CNN_SPEC.shape),)


def _heldout_sqnr(model, model_bytes) -> float:
    xs = heldout(CNN_SPEC, 8)
    return sqnr_db(torch_outputs(model, xs), tflite_outputs(model_bytes, xs))


def _weights(fb, opcode):
    return [fb.tensors[op.inputs[1]] for op in fb.operators if op.opcode == opcode]


def test_int8_flatbuffer_backend_is_full_integer_per_channel(cnn, cnn_float_bytes, cnn_calibration):
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, calibration=cnn_calibration, backend=QuantBackend.FLATBUFFER,
    ), float_model_bytes=cnn_float_bytes)
    fb = result.model
    assert result.backend == "flatbuffer" and result.recipe == "static_wi8_ai8"
    assert result.fully_integer and fb.is_fully_integer and not result.integer_check.float_tensors
    convs = [op for op in fb.operators if op.opcode == "CONV_2D"]
    assert len(convs) == 2
    for op in convs:
        w, b, out = (fb.tensors[i] for i in (op.inputs[1], op.inputs[2], op.outputs[0]))
        assert w.dtype == "int8" and w.quant.per_channel and len(w.quant.scales) == w.shape[0]
        assert b.dtype == "int32" and out.dtype == "int8"
    # Default I/O is float32 so callers need no quantization code.
    assert [x.dtype for x in result.io] == ["float32", "float32"]
    assert result.size_bytes < 0.8 * len(cnn_float_bytes)
    assert _heldout_sqnr(cnn, result.model.data) > 30.0


def test_int8_pt2e_backend_with_uint8_io(cnn, cnn_calibration):
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, calibration=cnn_calibration, backend=QuantBackend.PT2E, io_dtype=IODtype.UINT8,
    ))
    assert result.backend == "pt2e" and result.observer == "histogram" and result.fully_integer
    assert all(x.dtype == "uint8" and x.scale and x.zero_point is not None for x in result.io)
    fb = result.model
    w = _weights(fb, "CONV_2D")[0]
    assert w.dtype == "int8" and w.quant.per_channel and max(abs(z) for z in w.quant.zero_points) == 0
    assert _heldout_sqnr(cnn, result.model.data) > 30.0  # the runner quantizes/dequantizes the I/O


def test_dynamic_int8_has_int8_weights_float_activations_float_io(cnn, cnn_float_bytes, cnn_calibration):
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.DYNAMIC_INT8, calibration=cnn_calibration, backend=QuantBackend.FLATBUFFER,
    ), float_model_bytes=cnn_float_bytes)
    fb = result.model
    assert result.recipe == "dynamic_wi8_afp32" and result.observer is None
    assert all(w.dtype == "int8" and w.is_constant for w in _weights(fb, "CONV_2D") + _weights(fb, "FULLY_CONNECTED"))
    assert [t.dtype for t in fb.input_tensors + fb.output_tensors] == ["float32", "float32"]
    conv_out = fb.tensors[next(op for op in fb.operators if op.opcode == "CONV_2D").outputs[0]]
    assert conv_out.dtype == "float32"
    assert not result.fully_integer
    assert _heldout_sqnr(cnn, result.model.data) > 35.0


def test_int16x8_has_int16_activations(cnn, cnn_float_bytes, cnn_calibration):
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT16X8, calibration=cnn_calibration,
    ), float_model_bytes=cnn_float_bytes)
    assert result.backend == "flatbuffer" and result.recipe == "static_wi8_ai16"
    assert [a.backend for a in result.attempts] == ["flatbuffer"]  # PT2E has no int16 activations
    fb = result.model
    conv = next(op for op in fb.operators if op.opcode == "CONV_2D")
    assert fb.tensors[conv.inputs[1]].dtype == "int8" and fb.tensors[conv.outputs[0]].dtype == "int16"
    assert result.fully_integer
    int16_sqnr = _heldout_sqnr(cnn, result.model.data)
    assert int16_sqnr > 40.0


def test_auto_tries_both_backends_and_records_why(cnn, cnn_float_bytes, cnn_calibration, capfd):
    capfd.readouterr()
    # The flatbuffer backend's moving-average observer clips, so PT2E's simulated parity is close enough
    # for it to be lowered and measured too (with min-max it is simulated, found worse and not lowered).
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.INT8, calibration=cnn_calibration, flatbuffer_observer="moving_average",
    ), float_model_bytes=cnn_float_bytes)
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # the libraries' chatter stays off the terminal unless verbose
    assert [a.backend for a in result.attempts] == ["flatbuffer", "pt2e"]  # the cheaper one first
    assert all(a.ok and a.fully_integer and a.sqnr_db > 30 and a.seconds > 0 for a in result.attempts)
    best = max(result.attempts, key=lambda a: a.sqnr_db)
    assert result.backend == best.backend and "better parity" in result.reason
    report = json.loads(json.dumps(to_json_value(result)))
    assert report["calibration"]["real_data"] is False and report["calibration"]["samples"] == 16
    assert any("synthetic" in w for w in report["warnings"])


def test_auto_dynamic_int8_stops_at_the_first_backend_that_works(cnn, cnn_float_bytes, cnn_calibration):
    result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
        QuantizeMode.DYNAMIC_INT8, calibration=cnn_calibration,
    ), float_model_bytes=cnn_float_bytes)
    assert [a.backend for a in result.attempts] == ["flatbuffer"]
    assert "not tried" in result.reason and not result.warnings  # no calibration, no synthetic warning
