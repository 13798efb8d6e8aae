"""End-to-end CLI exports of each model kind, fp32 and fp16, with parity read from the JSON report."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from cli_harness import read_report
from model_zoo import SmallCNN, TwoInputs, TwoOutputs, small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """A folder for this module's shared sources and exports (tests only read what is in it)."""
    return tmp_path_factory.mktemp("export_kinds")


@pytest.fixture(scope="module")
def cnn_pt2(shared) -> Path:
    """small_cnn exported on X and saved once: every test here exporting it reads this archive."""
    src = shared / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    return src


@pytest.fixture(scope="module")
def two_out_pt2(shared) -> Path:
    src = shared / "two_out.pt2"
    torch.export.save(torch.export.export(TwoOutputs().eval(), (X,)), src)
    return src


@pytest.fixture(scope="module")
def cli_runs() -> dict:
    return {}


@pytest.fixture
def run_cli_once(run_cli, cli_runs):
    """run_cli, except that an export another test of this module already ran with the same
    arguments (the same output path, in ``shared``) is not run again: that run's result and files
    are reused, read only. An export takes seconds here; which test runs it first does not matter."""

    def run(*args):
        key = tuple(map(str, args))
        if key not in cli_runs:
            cli_runs[key] = run_cli(*args)
        return cli_runs[key]

    return run


def _export_cnn(run_cli_once, cnn_pt2: Path, mode: str):
    """small_cnn with --quantize MODE into a folder of its own that the CLI makes (once per module)."""
    out = cnn_pt2.parent / f"out_{mode}" / f"cnn_{mode}.tflite"
    return run_cli_once(cnn_pt2, "--quantize", mode, "-o", out), out


def _export_cnn_unvalidated(run_cli_once, cnn_pt2: Path, name: str):
    out = cnn_pt2.parent / f"{name}.tflite"
    return run_cli_once(cnn_pt2, "--no-validate", "-o", out), out


def _export_two_out(run_cli_once, two_out_pt2: Path):
    out = two_out_pt2.parent / "two_out.tflite"
    return run_cli_once(two_out_pt2, "-o", out), out


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
def test_exported_program(cnn_pt2, run_cli_once, mode):
    res, out = _export_cnn(run_cli_once, cnn_pt2, mode)
    assert res.exit_code == 0, res.stderr
    report = read_report(out)
    _assert_passed(report, mode)
    assert report["model"]["kind"] == "exported_program"
    # the stored example inputs gave the shape
    assert report["inputs"][0]["shape"] == [1, 3, 16, 16]
    if mode == "fp16":
        weights = [t for t in report["flatbuffer"]["op_counts"] if t == "DEQUANTIZE"]
        assert weights, "fp16 weights are dequantized to float32 at run time"


def test_default_output_beside_model(tmp_path, run_cli, cnn_pt2):
    src = tmp_path / "model.pt2"  # a copy: the outputs are written beside it
    shutil.copy2(cnn_pt2, src)
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


def test_multi_output(two_out_pt2, run_cli_once):
    res, out = _export_two_out(run_cli_once, two_out_pt2)  # the plain export the channels-last test compares with
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


def test_channels_last_removes_boundary_transposes(tmp_path, two_out_pt2, run_cli, run_cli_once):
    plain_run, plain = _export_two_out(run_cli_once, two_out_pt2)  # test_multi_output's export
    nhwc = tmp_path / "nhwc.tflite"
    assert plain_run.exit_code == 0
    res = run_cli(two_out_pt2, "--channels-last", "-o", nhwc)
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


def test_deterministic_bytes(tmp_path, cnn_pt2, run_cli, run_cli_once):
    # a: test_no_validate_is_reported's export (the same process, run before or after this test); b: a run of its own
    a_run, a = _export_cnn_unvalidated(run_cli_once, cnn_pt2, "nv")
    b = tmp_path / "b.tflite"
    assert a_run.exit_code == 0
    assert run_cli(cnn_pt2, "--no-validate", "-o", b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    assert read_report(a)["flatbuffer"]["sha256"] == read_report(b)["flatbuffer"]["sha256"]


def test_no_validate_is_reported(cnn_pt2, run_cli_once):
    res, out = _export_cnn_unvalidated(run_cli_once, cnn_pt2, "nv")
    assert res.exit_code == 0
    report = read_report(out)
    assert report["validation"] == {"status": "skipped", "reason": "--no-validate was given"}
    assert report["verdict"] == "exported-unvalidated"
    assert "not validated" in (out.parent / "nv.report.md").read_text().lower()


def test_parity_failure_exits_1_and_keeps_artifacts(tmp_path, run_cli, cnn_pt2):
    out = tmp_path / "strict.tflite"
    # fp16 cannot reach 1e-9 absolute error: the gate must fail
    res = run_cli(cnn_pt2, "--quantize", "fp16", "--atol", "1e-9", "-o", out)
    assert res.exit_code == 1
    assert out.is_file()
    report = read_report(out)
    assert report["verdict"] == "failed" and report["exit_code"] == 1
    worst = report["validation"]["worst"]
    assert worst["output"] == "output_0" and "max_abs_error" in worst["failed_checks"]
    assert "FAILED" in res.stdout


def test_report_contents(cnn_pt2, run_cli_once):
    res, out = _export_cnn(run_cli_once, cnn_pt2, "none")  # the default precision: test_exported_program[none]'s export
    assert res.exit_code == 0
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


def test_channels_last_cnn_has_no_transpose(tmp_path, run_cli, cnn_pt2):
    out = tmp_path / "cnn_nhwc.tflite"
    assert run_cli(cnn_pt2, "--channels-last", "-o", out).exit_code == 0
    report = read_report(out)
    assert "TRANSPOSE" not in report["flatbuffer"]["op_counts"]
    _assert_passed(report, "none")


@pytest.mark.slow
def test_quiet_prints_nothing_and_library_chatter_is_hidden(tmp_path, cnn_pt2):
    from cli_harness import run_cli_subprocess

    # fp16 goes through ai-edge-quantizer, which prints its own size summary to stdout
    res = run_cli_subprocess(cnn_pt2, "--quantize", "fp16", "--quiet", "-o", tmp_path / "q.tflite")
    assert res.exit_code == 0
    assert res.stdout == "" and res.stderr == "", (res.stdout, res.stderr)
    res = run_cli_subprocess(cnn_pt2, "--quantize", "fp16", "-o", tmp_path / "v.tflite")
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
