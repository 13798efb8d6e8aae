from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from edge_export.errors import FlatbufferError
from edge_export.inspection import inspect_flatbuffer, render_inspection
from edge_export.runtime.interpreter import TFLiteRunner
from tools_models import cnn_models  # noqa: F401  (a pytest fixture)
from edge_export.output.serialize import to_json_value


def rendered(report) -> str:
    buf = io.StringIO()
    render_inspection(report, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


def test_inspect_fp32_file(cnn_models, tmp_path):
    path = tmp_path / "fp32.tflite"
    path.write_bytes(cnn_models.fp32)
    report = inspect_flatbuffer(path)

    assert report.path == str(path)
    assert report.size_bytes == len(cnn_models.fp32)
    assert [t.dtype for t in report.inputs] == ["float32"]
    assert report.inputs[0].shape == (1, 3, 16, 16) and report.inputs[0].quant is None
    assert report.outputs[0].shape == (1, 10)
    ops = {o.opcode: o.count for o in report.operators}
    assert ops["CONV_2D"] == 2 and ops["FULLY_CONNECTED"] == 1
    assert sum(ops.values()) == report.operator_count
    assert not report.fully_integer and report.float_tensors and report.quantized_tensor_count == 0
    assert report.min_runtime_version and report.min_runtime_version[0].isdigit()
    assert report.signatures[0]["inputs"] == ["args_0"]
    assert report.tensor_count > report.operator_count

    text = rendered(report)
    assert "CONV_2D" in text and "float32" in text and "[1, 3, 16, 16]" in text
    assert "a float model" in text


def test_inspect_int8_file_reports_quantization_and_json(cnn_models):
    report = inspect_flatbuffer(cnn_models.int8)
    runner = TFLiteRunner(cnn_models.int8)

    assert report.fully_integer and report.float_tensors == () and report.float_islands == ()
    assert report.quantized_tensor_count > report.operator_count // 2
    assert report.io_dtypes == ("int8", "int8")
    q_in = report.inputs[0].quant
    # The file's own parameters, as the interpreter sees them too.
    assert q_in.scales[0] == pytest.approx(runner.inputs[0].scale)
    assert q_in.zero_points[0] == runner.inputs[0].zero_point
    assert -128 <= q_in.zero_points[0] <= 127

    data = json.loads(json.dumps(to_json_value(report)))
    assert data["fully_integer"] is True
    assert data["inputs"][0]["quantization"]["zero_point"] == q_in.zero_points[0]
    assert data["operators"][0]["count"] >= data["operators"][-1]["count"]
    assert "zero point" in rendered(report)


def test_inspect_uint8_io_file(cnn_models):
    report = inspect_flatbuffer(cnn_models.uint8_io)
    assert report.io_dtypes == ("uint8", "uint8")
    int8_report = inspect_flatbuffer(cnn_models.int8)
    assert report.inputs[0].quant.zero_points[0] == int8_report.inputs[0].quant.zero_points[0] + 128
    assert report.fully_integer
    assert {o.opcode: o.count for o in report.operators}["QUANTIZE"] == (
        {o.opcode: o.count for o in int8_report.operators}["QUANTIZE"] + 2
    )
    # The uint8 file runs and agrees with the int8 one (same arithmetic, shifted zero points).
    x = [cnn_models.example]
    np.testing.assert_allclose(
        TFLiteRunner(cnn_models.uint8_io).run(x)[0], TFLiteRunner(cnn_models.int8).run(x)[0], atol=0.05
    )


def test_inspect_rejects_a_non_flatbuffer(tmp_path):
    path = tmp_path / "notes.tflite"
    path.write_bytes(b"this is not a model at all, just text" * 4)
    with pytest.raises(FlatbufferError, match="notes.tflite"):
        inspect_flatbuffer(path)


def test_inspect_mixed_precision_lists_float_islands():
    """PT2E leaves LayerNorm in float: the report names the QUANTIZE/DEQUANTIZE around it."""
    import torch

    from edge_export.processes.library_output import quiet_libraries
    from tools_models import pt2e_int8

    class MixedHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 16)
            self.norm = torch.nn.LayerNorm(16)
            self.fc2 = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.fc2(self.norm(self.fc1(x)))

    torch.manual_seed(0)
    example = (torch.randn(1, 16),)
    with quiet_libraries():
        _, data = pt2e_int8(MixedHead().eval(), example, [torch.randn(1, 16) for _ in range(4)])
    report = inspect_flatbuffer(data)

    assert not report.fully_integer and report.quantized_tensor_count > 0
    assert {f.opcode for f in report.float_islands} == {"QUANTIZE", "DEQUANTIZE"}
    assert report.float_tensors
    text = rendered(report)
    assert "Float islands" in text and "Float tensors inside the graph" in text
    # Each island is named by its float side, which is one of the float tensors listed.
    assert all(f.tensor in report.float_tensors for f in report.float_islands)
