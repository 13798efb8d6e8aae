"""--quantize int4 end to end: int4 weights in the file, LiteRT runs it, parity passes with int4's own
thresholds, the file is smaller than dynamic-int8's, and the targets and options that cannot take
it exit 2."""

from __future__ import annotations

import pytest
import torch
from model_zoo import small_cnn

import edge_export
from edge_export.config import QuantizeMode, default_thresholds
from edge_export.flatbuffer import read_flatbuffer

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def cnn_source(tmp_path_factory):
    src = tmp_path_factory.mktemp("int4") / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    return src


@pytest.fixture(scope="module")
def int4_and_dynamic(cnn_source):
    folder = cnn_source.parent
    int4 = edge_export.export(cnn_source, output=folder / "cnn_int4.tflite", quantize="int4")
    dynamic = edge_export.export(cnn_source, output=folder / "cnn_dyn.tflite", quantize="dynamic-int8")
    return int4, dynamic


def test_int4_exports_runs_and_passes_its_thresholds(int4_and_dynamic):
    int4, dynamic = int4_and_dynamic
    assert int4.exit_code == 0 and dynamic.exit_code == 0
    rep = int4.report
    assert rep["export"]["quantize"] == "int4"
    q = rep["quantization"]
    assert q["mode"] == "int4" and q["backend"] == "flatbuffer" and q["recipe"] == "dynamic_wi4_afp32"
    assert q["observer"] is None and "ai-edge-quantizer" in q["reason"]
    # Parity ran through LiteRT and was judged by int4's thresholds, not int8's.
    assert rep["validation"]["status"] == "passed"
    gates = rep["validation"]["thresholds"]
    assert gates["min_sqnr_db"] == default_thresholds(QuantizeMode.INT4).min_sqnr_db
    assert gates["min_sqnr_db"] < default_thresholds(QuantizeMode.INT8).min_sqnr_db
    fb = read_flatbuffer(int4.tflite_path.read_bytes())
    weights = [fb.tensors[op.inputs[1]] for op in fb.operators if op.opcode in ("CONV_2D", "FULLY_CONNECTED")]
    assert weights and all(w.dtype == "int4" and w.quant.per_channel for w in weights)
    # Activations stay float (quantized at run time by the hybrid kernels): I/O is float32.
    assert [t.dtype for t in fb.input_tensors] == ["float32"]
    assert int4.tflite_path.stat().st_size < dynamic.tflite_path.stat().st_size


def test_validate_reads_int4_precision_from_the_file(int4_and_dynamic, cnn_source):
    from edge_export.api import infer_precision

    int4, _ = int4_and_dynamic
    assert infer_precision(read_flatbuffer(int4.tflite_path.read_bytes())) == QuantizeMode.INT4


@pytest.mark.parametrize(
    "extra, needle",
    [
        (("--target", "edgetpu"), "fully integer int8"),
        (("--target", "micro"), "fully integer int8"),
        (("--target", "gpu"), "float models"),
        (("--quant-backend", "pt2e"), "pt2e cannot do --quantize int4"),
        (("--io-dtype", "int8"), "--io-dtype"),
    ],
)
def test_int4_bad_combinations_exit_2(tmp_path, run_cli, cnn_source, extra, needle):
    out = tmp_path / "bad.tflite"
    res = run_cli(cnn_source, "--quantize", "int4", *extra, "-o", out)
    assert res.exit_code == 2, res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr
    assert not out.exists() and not out.with_name("bad.report.json").exists()


def test_int4_with_calibration_data_exits_2(tmp_path, run_cli, cnn_source):
    import numpy as np

    np.save(tmp_path / "calib.npy", np.zeros((4, 1, 3, 16, 16), np.float32))
    res = run_cli(cnn_source, "--quantize", "int4", "--calibration-data", tmp_path / "calib.npy", "-o", tmp_path / "m.tflite")
    assert res.exit_code == 2 and "--calibration-data" in res.stderr
