"""Integer modes, calibration data and the micro target through the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from cli_harness import read_report
from model_zoo import small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def cnn_pt2(tmp_path_factory):
    """Exported once for the module: every test only reads it and writes into its own tmp_path."""
    src = tmp_path_factory.mktemp("source") / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    return src


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dynamic-int8", "int8", "int16x8"])
def test_integer_modes(tmp_path, run_cli, cnn_pt2, mode):
    out = tmp_path / f"cnn_{mode}.tflite"
    res = run_cli(cnn_pt2, "--quantize", mode, "--calibration-samples", "32", "-o", out)
    assert res.exit_code == 0, res.stderr
    rep = read_report(out)
    q = rep["quantization"]
    assert q["mode"] == mode and q["attempts"] and q["reason"]
    assert rep["validation"]["status"] == "passed"
    if mode == "int8":
        assert q["fully_integer"] and rep["flatbuffer"]["fully_integer"]
        assert q["calibration"]["real_data"] is False
        assert "synthetic" in res.stderr  # the terminal warning
    if mode == "dynamic-int8":
        assert rep["flatbuffer"]["inputs"][0]["dtype"] == "float32"


def test_uint8_io_parity_and_params(tmp_path, run_cli, cnn_pt2):
    out = tmp_path / "u8.tflite"
    res = run_cli(cnn_pt2, "--quantize", "int8", "--io-dtype", "uint8", "--quant-backend", "flatbuffer", "-o", out)
    assert res.exit_code == 0, res.stderr
    rep = read_report(out)
    io = {x["kind"]: x for x in rep["quantization"]["io"]}
    assert io["input"]["dtype"] == "uint8" and io["output"]["dtype"] == "uint8"
    assert io["input"]["scale"] > 0 and 0 <= io["input"]["zero_point"] <= 255
    out_metrics = rep["validation"]["outputs"][0]["metrics"]
    assert out_metrics["sqnr_db"] > 20 and out_metrics["max_abs_error_steps"] is not None
    assert "zero point" in res.stdout


@pytest.mark.slow
def test_calibration_npz_holds_out_parity_inputs(tmp_path, run_cli, cnn_pt2):
    data = np.random.default_rng(0).standard_normal((40, 1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", data[:, 0])  # arr_0: 40 samples of the per-sample shape
    out = tmp_path / "npz.tflite"
    res = run_cli(cnn_pt2, "--quantize", "int8", "--calibration-data", tmp_path / "calib.npz", "--samples", "8", "-o", out)
    assert res.exit_code == 0, res.stderr
    rep = read_report(out)
    cal = rep["quantization"]["calibration"]
    assert cal["real_data"] is True and cal["samples"] == 32  # 8 of 40 held out for parity
    assert rep["validation"]["samples"] == 8
    assert "synthetic" not in res.stderr


def test_calibration_images_folder(tmp_path, run_cli, cnn_pt2):
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    out = tmp_path / "img.tflite"
    res = run_cli(
        cnn_pt2, "--quantize", "int8", "--calibration-data", folder, "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25",
        "--quant-backend", "flatbuffer", "-o", out,
    )
    assert res.exit_code == 0, res.stderr
    assert read_report(out)["quantization"]["calibration"]["real_data"] is True


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: np.save(p / "bad.npy", np.zeros((4, 3, 8, 8), np.float32)), "bad.npy"),
        (lambda p: np.save(p / "bad.npy", np.full((4, 3, 16, 16), np.nan, np.float32)), "NaN"),
        (lambda p: (p / "empty").mkdir(), "empty"),
    ],
)
def test_bad_calibration_data(tmp_path, run_cli, cnn_pt2, make, needle):
    make(tmp_path)
    path = tmp_path / ("empty" if needle == "empty" else "bad.npy")
    out = tmp_path / "bad.tflite"
    res = run_cli(cnn_pt2, "--quantize", "int8", "--calibration-data", path, "-o", out)
    assert res.exit_code == 2, res.stderr
    assert needle.lower() in res.stderr.lower()
    assert not out.exists() and not (tmp_path / "bad.report.json").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--quantize", "fp16", "--io-dtype", "uint8"], "--io-dtype uint8 applies to --quantize int8"),
        (["--target", "edgetpu", "--quantize", "fp16"], "only fully integer int8"),
        (["--target", "micro", "--io-dtype", "uint8"], "int8 model inputs and outputs"),
        (["--emit-op-resolver", "ops.h"], "--target micro"),
        (["--quantize", "dynamic-int8", "--calibration-data", "x.npy"], "--calibration-data applies"),
    ],
)
def test_contradictory_options(tmp_path, run_cli, cnn_pt2, args, needle):
    res = run_cli(cnn_pt2, *args, "-o", tmp_path / "x.tflite")
    assert res.exit_code == 2 and needle in res.stderr, res.stderr
    assert not (tmp_path / "x.tflite").exists()


def test_edgetpu_batch_above_one_is_refused(tmp_path, run_cli):
    src = tmp_path / "cnn.pt"
    torch.save(small_cnn(), src)
    res = run_cli(src, "--trust-pickle", "--target", "edgetpu", "--input-shape", "2,3,16,16", "-o", tmp_path / "x.tflite")
    assert res.exit_code == 2 and "batch" in res.stderr.lower()


@pytest.mark.slow
def test_micro_target_end_to_end(tmp_path, run_cli, cnn_pt2):
    out, ops = tmp_path / "micro.tflite", tmp_path / "fw" / "ops.h"
    (tmp_path / "fw").mkdir()
    res = run_cli(cnn_pt2, "--target", "micro", "--emit-op-resolver", ops, "-o", out)
    assert res.exit_code == 0, res.stderr
    rep = read_report(out)
    micro = rep["target"]["micro"]
    assert micro["arena_bytes"] > 0 and micro["unsupported_ops"] == [] and micro["fully_integer"]
    assert rep["validation"]["runtime"] == "TFLite Micro host interpreter"
    assert rep["validation"]["status"] == "passed"
    assert {x["dtype"] for x in rep["quantization"]["io"]} == {"int8"}
    text = ops.read_text()
    assert f"MicroMutableOpResolver<{len(micro['ops'])}>" in text and "AddConv2D" in text


class _Gelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc(x))


def test_micro_names_the_missing_operator(tmp_path, run_cli):
    src = tmp_path / "gelu.pt2"
    torch.export.save(torch.export.export(_Gelu().eval(), (torch.randn(1, 8),)), src)
    out = tmp_path / "gelu.tflite"
    res = run_cli(src, "--target", "micro", "--quant-backend", "flatbuffer", "-o", out)
    assert res.exit_code == 3, res.stderr
    assert "GELU" in res.stderr and "TFLite Micro" in res.stderr
    assert not out.exists()


@pytest.mark.slow
def test_edgetpu_delegate_absent_is_said_plainly(tmp_path, run_cli, cnn_pt2):
    out = tmp_path / "tpu.tflite"
    res = run_cli(cnn_pt2, "--target", "edgetpu", "--delegate", "edgetpu", "--quant-backend", "flatbuffer", "-o", out)
    assert res.exit_code == 0, res.stderr
    rep = read_report(out)
    delegate = rep["target"]["delegate"]
    assert delegate["used"] is False and "libedgetpu" in delegate["reason"]
    assert rep["validation"]["runtime"].startswith("ai-edge-litert interpreter (CPU")  # parity still ran, on the CPU
    assert rep["target"]["compiler"]["compiled"] is False and "not on PATH" in rep["target"]["compiler"]["reason"]
    assert "Not compiled" in (tmp_path / "tpu.report.md").read_text()
    # --require-compiler turns the missing compiler into a failure, with nothing written
    out2 = tmp_path / "tpu2.tflite"
    res = run_cli(cnn_pt2, "--target", "edgetpu", "--require-compiler", "--quant-backend", "flatbuffer", "-o", out2)
    assert res.exit_code == 2 and "edgetpu_compiler" in res.stderr
    assert not out2.exists()


class _EluBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = self.c(x)
        return torch.nn.functional.elu(y)  # ELU is not on the Edge TPU's list


class _EluNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blk = _EluBlock()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.blk(torch.relu(self.stem(x))).mean((2, 3)))


@pytest.mark.slow
def test_edgetpu_cut_names_module_and_source_line(tmp_path, run_cli):
    torch.manual_seed(0)
    src = tmp_path / "elu.pt2"
    torch.export.save(torch.export.export(_EluNet().eval(), (X,)), src)
    out = tmp_path / "elu.tflite"
    # auto keeps the flatbuffer backend's model here (44 dB, PT2E's 17): the same file, one conversion fewer
    res = run_cli(src, "--target", "edgetpu", "--quant-backend", "flatbuffer", "-o", out)
    assert res.exit_code == 0, res.stderr
    tpu = read_report(out)["target"]["edgetpu"]
    cut = tpu["first_unmapped"]
    assert not tpu["fully_mapped"] and cut is not None and tpu["share_on_tpu"] < 1.0
    assert cut["module_path"].startswith("blk")
    assert cut["source"] and "test_quantization_cli.py:" in cut["source"]
    assert cut["output_names"] and cut["reason"]
    assert "the graph is cut at operator" in res.stdout
    md = (tmp_path / "elu.report.md").read_text()
    assert "| Operator | Count | Status |" in md and "Operation not supported" in md
