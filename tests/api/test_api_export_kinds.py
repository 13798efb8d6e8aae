"""End-to-end CLI exports of each model kind, fp32 and fp16, with parity read from the JSON report."""

from __future__ import annotations

import textwrap

import pytest
import torch

from cli_harness import read_report
from model_zoo import SmallCNN, TwoInputs, TwoOutputs, small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def _assert_passed(report: dict, mode: str) -> None:
    assert report["verdict"] == "passed", report["validation"]
    assert report["export"]["quantize"] == mode
    val = report["validation"]
    assert val["status"] == "passed" and val["samples"] == 8
    for out in val["outputs"]:
        assert out["passed"]
        floor = 60 if mode == "none" else 35
        assert out["metrics"]["sqnr_db"] > floor
        assert out["metrics"]["cosine"] > 0.999
    assert report["flatbuffer"]["size_bytes"] > 0
    assert sum(report["flatbuffer"]["op_counts"].values()) == report["flatbuffer"]["num_operators"]


@pytest.mark.parametrize("mode", ["none", "fp16"])
def test_exported_program(tmp_path, run_cli, mode):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    out = tmp_path / "out" / f"cnn_{mode}.tflite"
    res = run_cli(src, "--quantize", mode, "-o", out)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    _assert_passed(report, mode)
    assert report["model"]["kind"] == "exported_program"
    # the stored example inputs gave the shape
    assert report["inputs"][0]["shape"] == [1, 3, 16, 16]
    if mode == "fp16":
        weights = [t for t in report["flatbuffer"]["op_counts"] if t == "DEQUANTIZE"]
        assert weights, "fp16 weights are dequantized to float32 at run time"


def test_default_output_beside_model(tmp_path, run_cli):
    src = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    res = run_cli(src)
    assert res.exit_code == 0, res.stderr
    for name in ("model.tflite", "model.report.json", "model.report.md"):
        assert (tmp_path / name).is_file()
    md = (tmp_path / "model.report.md").read_text()
    assert md.startswith("# edge-export: ✅ PASSED")
    assert "model.report.json" in res.stdout


@pytest.mark.parametrize("mode", ["none", "fp16"])
def test_torchscript(tmp_path, run_cli, mode):
    src = tmp_path / "scripted.bin"  # extension deliberately meaningless: detection is by content
    torch.jit.save(torch.jit.trace(small_cnn(), X), src)
    out = tmp_path / "ts.tflite"
    res = run_cli(src, "--input-shape", "1,3,16,16", "--quantize", mode, "-o", out)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    _assert_passed(report, mode)
    assert report["model"]["kind"] == "torchscript"


@pytest.mark.parametrize("mode", ["none", "fp16"])
def test_module_reference_with_weights(tmp_path, run_cli, monkeypatch, mode):
    pkg = f"refmodels_{mode}"
    (tmp_path / f"{pkg}.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc1 = nn.Linear(6, 12)
                    self.fc2 = nn.Linear(12, 3)

                def forward(self, x):
                    return self.fc2(torch.tanh(self.fc1(x)))
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    net = importlib.import_module(pkg).Net()
    torch.save(net.state_dict(), tmp_path / "weights.pt")
    out = tmp_path / "ref.tflite"
    res = run_cli(f"{pkg}:Net", "--weights", "weights.pt", "--input-shape", "2,6", "--quantize", mode, "-o", out)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    _assert_passed(report, mode)
    assert report["model"]["kind"] == "module_reference"
    # the weights were really loaded: the flatbuffer reproduces *this* net, not a fresh random init
    from edge_export.runtime.interpreter import TFLiteRunner

    x = torch.randn(2, 6)
    got = TFLiteRunner(out.read_bytes()).run([x.numpy()])[0]
    assert torch.allclose(torch.from_numpy(got), net.eval()(x), atol=5e-2 if mode == "fp16" else 1e-5)


@pytest.mark.parametrize("mode", ["none", "fp16"])
def test_trusted_pickle(tmp_path, run_cli, mode):
    src = tmp_path / "full.pt"
    torch.save(small_cnn(), src)
    out = tmp_path / "pk.tflite"
    res = run_cli(src, "--trust-pickle", "--input-shape", "1,3,16,16", "--quantize", mode, "-o", out)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    _assert_passed(report, mode)
    assert report["model"]["kind"] == "pickle"
    assert report["model"]["class"].endswith("SmallCNN")


def test_multi_input(tmp_path, run_cli):
    src = tmp_path / "two_in.pt2"
    torch.export.save(torch.export.export(TwoInputs().eval(), (X, torch.randn(1, 5))), src)
    out = tmp_path / "two_in.tflite"
    res = run_cli(src, "-o", out)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    _assert_passed(report, "none")
    assert [i["shape"] for i in report["inputs"]] == [[1, 3, 16, 16], [1, 5]]
    assert len(report["flatbuffer"]["inputs"]) == 2


def test_multi_input_from_shapes(tmp_path, run_cli):
    src = tmp_path / "two_in.ts"
    torch.jit.save(torch.jit.trace(TwoInputs().eval(), (X, torch.randn(1, 5))), src)
    out = tmp_path / "two_in_ts.tflite"
    res = run_cli(src, "--input-shape", "1,3,16,16", "--input-shape", "1,5", "-o", out)
    assert res.exit_code == 0, res.stderr
    _assert_passed(read_report(out), "none")


def test_multi_output(tmp_path, run_cli):
    src = tmp_path / "two_out.pt2"
    torch.export.save(torch.export.export(TwoOutputs().eval(), (X,)), src)
    out = tmp_path / "two_out.tflite"
    res = run_cli(src, "-o", out)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    _assert_passed(report, "none")
    outs = report["validation"]["outputs"]
    assert [o["shape"] for o in outs] == [[1, 6, 16, 16], [1, 4]]
    # neither output is named: both are regression, judged by error and SQNR; a [1, 4] shape alone
    # is no reason for a top-1 check
    assert [(o["kind"], o["kind_source"]) for o in outs] == [("regression", "default")] * 2
    assert all(o["metrics"]["top1_agreement"] is None for o in outs)
    assert {c["metric"] for c in outs[1]["checks"]} == {"max_abs_error", "sqnr_db"}


def test_channels_last_removes_boundary_transposes(tmp_path, run_cli):
    src = tmp_path / "two_out.pt2"
    torch.export.save(torch.export.export(TwoOutputs().eval(), (X,)), src)
    plain, nhwc = tmp_path / "plain.tflite", tmp_path / "nhwc.tflite"
    assert run_cli(src, "-o", plain).exit_code == 0
    res = run_cli(src, "--channels-last", "-o", nhwc)
    assert res.exit_code == 0, res.stderr
    before, after = read_report(plain), read_report(nhwc)
    assert before["flatbuffer"]["op_counts"].get("TRANSPOSE", 0) >= 2
    # no TRANSPOSE reads a model input or writes a model output any more (the converter may keep
    # an inner one where the NCHW feature map is also reduced over H, W)
    from edge_export.flatbuffer import read_flatbuffer

    fb = read_flatbuffer(nhwc.read_bytes())
    for op in fb.operators:
        if op.opcode == "TRANSPOSE":
            assert op.inputs[0] not in fb.inputs and op.outputs[0] not in fb.outputs
    assert after["flatbuffer"]["inputs"][0]["shape"] == [1, 16, 16, 3]
    assert after["flatbuffer"]["outputs"][0]["shape"] == [1, 16, 16, 6]
    assert after["inputs"][0]["layout"] == "NHWC"
    # parity compared in the model's own layout: the PyTorch NCHW shapes, and it passes
    _assert_passed(after, "none")
    assert after["validation"]["outputs"][0]["shape"] == [1, 6, 16, 16]


def test_deterministic_bytes(tmp_path, run_cli):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    a, b = tmp_path / "a.tflite", tmp_path / "b.tflite"
    assert run_cli(src, "-o", a, "--no-validate").exit_code == 0
    assert run_cli(src, "-o", b, "--no-validate").exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    assert read_report(a)["flatbuffer"]["sha256"] == read_report(b)["flatbuffer"]["sha256"]


def test_no_validate_is_reported(tmp_path, run_cli):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    out = tmp_path / "nv.tflite"
    res = run_cli(src, "--no-validate", "-o", out)
    assert res.exit_code == 0
    report = read_report(out)
    assert report["validation"] == {"status": "skipped", "reason": "--no-validate was given"}
    assert report["verdict"] == "exported-unvalidated"
    assert "not validated" in (tmp_path / "nv.report.md").read_text().lower()


def test_parity_failure_exits_1_and_keeps_artifacts(tmp_path, run_cli):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    out = tmp_path / "strict.tflite"
    # fp16 cannot reach 1e-9 absolute error: the gate must fail
    res = run_cli(src, "--quantize", "fp16", "--atol", "1e-9", "-o", out)
    assert res.exit_code == 1
    assert out.is_file()
    report = read_report(out)
    assert report["verdict"] == "failed" and report["exit_code"] == 1
    worst = report["validation"]["worst"]
    assert worst["output"] == "output_0" and "max_abs_error" in worst["failed_checks"]
    assert "FAILED" in res.stdout


def test_report_contents(tmp_path, run_cli):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    out = tmp_path / "r.tflite"
    assert run_cli(src, "-o", out).exit_code == 0
    r = read_report(out)
    assert r["schema_version"] == "1.1"
    assert r["tool"]["name"] == "edge-export"
    assert r["libraries"]["torch"].startswith("2.13") and r["libraries"]["litert-torch"]
    assert {s["name"] for s in r["stages"]} >= {"load", "convert", "validate"}
    assert all(s["seconds"] >= 0 for s in r["stages"])
    m = r["validation"]["outputs"][0]["metrics"]
    assert set(m) >= {"max_abs_error", "mean_abs_error", "relative_l2_error", "cosine", "sqnr_db", "top1_agreement"}
    assert r["validation"]["thresholds"]["atol"] is not None


def test_python_api_in_memory_module(tmp_path):
    import edge_export

    res = edge_export.export(SmallCNN().eval(), example_inputs=(X,), output=tmp_path / "api.tflite", quantize="fp16", samples=3)
    assert res.exit_code == 0 and res.passed
    assert res.tflite_path.is_file() and res.report_json_path.is_file()
    assert res.parity["samples"] == 3
    assert edge_export.__version__
    check = edge_export.validate(res.tflite_path, SmallCNN().eval(), example_inputs=(X,), samples=2)
    assert check.exit_code == 1  # a fresh random SmallCNN is not the exported one
    assert check.report["validation"]["worst"]["failed_checks"]


def test_channels_last_cnn_has_no_transpose(tmp_path, run_cli):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    out = tmp_path / "cnn_nhwc.tflite"
    assert run_cli(src, "--channels-last", "-o", out).exit_code == 0
    report = read_report(out)
    assert "TRANSPOSE" not in report["flatbuffer"]["op_counts"]
    _assert_passed(report, "none")


@pytest.mark.slow
def test_quiet_prints_nothing_and_library_chatter_is_hidden(tmp_path):
    from cli_harness import run_cli_subprocess

    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    # fp16 goes through ai-edge-quantizer, which prints its own size summary to stdout
    res = run_cli_subprocess(src, "--quantize", "fp16", "--quiet", "-o", tmp_path / "q.tflite")
    assert res.exit_code == 0
    assert res.stdout == "" and res.stderr == "", (res.stdout, res.stderr)
    res = run_cli_subprocess(src, "--quantize", "fp16", "-o", tmp_path / "v.tflite")
    assert res.exit_code == 0 and "Quantized model size" not in res.stdout + res.stderr
    assert "I0000" not in res.stderr and "XNNPACK" not in res.stderr
    assert res.stdout.startswith("PASSED")


class _ManyIO(torch.nn.Module):
    """11 inputs and 12 outputs: signature names sort as args_0, args_1, args_10, args_2, ..."""

    def forward(self, *xs):
        total = sum((i + 1) * x for i, x in enumerate(xs)) / 66.0
        return tuple(total * (1 + j / 12) - j / 12 for j in range(12))


class _DictOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return {"zeta": y * 3, "alpha": y - 1}  # not in alphabetical order


@pytest.mark.parametrize("target", ["cpu", "micro"])
def test_io_order_follows_forward_not_names(tmp_path, target):
    import edge_export

    torch.manual_seed(0)
    xs = tuple(torch.randn(1, 3) for _ in range(11))
    # one quantization backend, not auto's two: the I/O order through micro's runner is the point
    extra = {"target": target, "quant_backend": "flatbuffer"} if target == "micro" else {}
    res = edge_export.export(_ManyIO(), example_inputs=xs, output=tmp_path / "many.tflite", samples=3, **extra)
    assert res.exit_code == 0, res.report["validation"]["worst"]
    names = [o["name"] for o in res.report["validation"]["outputs"]]
    assert names[:3] == ["output_0", "output_1", "output_2"] and names[-1] == "output_11"
    res = edge_export.export(_DictOut(), example_inputs=(torch.randn(1, 4),), output=tmp_path / "d.tflite", samples=3, **extra)
    assert res.exit_code == 0
    assert [o["name"] for o in res.report["validation"]["outputs"]] == ["zeta", "alpha"]
