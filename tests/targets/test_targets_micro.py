from __future__ import annotations

import numpy as np
import pytest

from edge_export.errors import RuntimeRunError, TargetError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.runtime.interpreter import TFLiteRunner
from edge_export.targets.micro.checks import check_micro
from edge_export.targets.micro.kernels import TFLM_SUPPORTED_OPS, emit_op_resolver, installed_tflm_kernels, write_op_resolver
from edge_export.targets.micro.runner import MicroRunner
from edge_export.validators.metrics import sqnr_db
from tools_models import cnn_models  # noqa: F401  (a pytest fixture)
from edge_export.output.serialize import to_json_value


@pytest.fixture(scope="module")
def gelu_model() -> bytes:
    """A float model with GELU, which TFLite Micro has no kernel for."""
    import litert_torch
    import torch

    from edge_export.processes.library_output import quiet_libraries

    class GeluHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(torch.nn.functional.gelu(x))

    with quiet_libraries():
        return litert_torch.convert(GeluHead().eval(), (torch.randn(1, 8),)).model_content()


def test_supported_ops_table_matches_installed_tflm():
    kernels = installed_tflm_kernels()
    assert TFLM_SUPPORTED_OPS <= kernels, sorted(TFLM_SUPPORTED_OPS - kernels)
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "SOFTMAX"} <= TFLM_SUPPORTED_OPS
    assert "GELU" not in TFLM_SUPPORTED_OPS


def test_int8_cnn_end_to_end_on_tflm(cnn_models):
    import torch

    model = read_flatbuffer(cnn_models.int8)
    report = check_micro(model)
    assert report.ok, report.problems
    assert report.integer_io and report.fully_integer and report.unsupported_ops == ()
    assert set(report.ops) == set(model.op_counts)

    runner = MicroRunner(model)
    arena = runner.arena_bytes
    assert 1000 < arena < 64 * 1024
    assert runner.report.arena_bytes == arena and to_json_value(runner.report)["arena_bytes"] == arena
    # The estimate is in the same range as what TFLM measured.
    assert arena / 3 < report.arena_estimate_bytes < arena * 3
    # The measured arena is the smallest that works (to the arena's 16-byte alignment).
    with pytest.raises(RuntimeRunError, match="arena"):
        MicroRunner(cnn_models.int8, arena_size=arena - 32)

    rng = np.random.default_rng(1)
    batch = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    step = runner.outputs[0].scale
    litert = TFLiteRunner(cnn_models.int8)
    for x in batch:
        micro_out = runner.run([x])[0]
        assert micro_out.shape == (1, 10) and micro_out.dtype == np.float32
        # Same integer model on two runtimes: equal up to a rounding step or two.
        assert np.abs(micro_out - litert.run([x])[0]).max() <= 2 * step + 1e-6
        with torch.no_grad():
            fake_quant = cnn_models.quantized_module(torch.from_numpy(x)).numpy()
            float_ref = cnn_models.module(torch.from_numpy(x)).numpy()
        assert np.abs(micro_out - fake_quant).max() <= 4 * step + 1e-6
        assert sqnr_db(float_ref, micro_out) > 15


def test_tflm_rejection_names_the_operator(gelu_model):
    model = read_flatbuffer(gelu_model)
    report = check_micro(model)
    assert report.unsupported_ops == ("GELU",)
    assert not report.ok and any("GELU" in p for p in report.problems)
    assert not report.integer_io

    with pytest.raises(RuntimeRunError, match="GELU"):
        MicroRunner(gelu_model)
    with pytest.raises(TargetError, match="GELU"):
        emit_op_resolver(report.ops)


def test_op_resolver_text(tmp_path, cnn_models):
    text = emit_op_resolver(["CONV_2D", "FULLY_CONNECTED", "CONV_2D", "SOFTMAX", "CUSTOM:TFLite_Detection_PostProcess"])
    lines = text.splitlines()
    assert "inline TfLiteStatus RegisterEdgeExportOps(tflite::MicroMutableOpResolver<4>& resolver) {" in lines
    assert [ln.strip() for ln in lines if "resolver.Add" in ln and not ln.startswith("//")] == [
        "if (resolver.AddConv2D() != kTfLiteOk) return kTfLiteError;",
        "if (resolver.AddDetectionPostprocess() != kTfLiteOk) return kTfLiteError;",
        "if (resolver.AddFullyConnected() != kTfLiteOk) return kTfLiteError;",
        "if (resolver.AddSoftmax() != kTfLiteOk) return kTfLiteError;",
    ]
    assert '#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"' in lines
    _compiles(tmp_path, text, ["AddConv2D", "AddDetectionPostprocess", "AddFullyConnected", "AddSoftmax"])

    ops = check_micro(read_flatbuffer(cnn_models.int8)).ops
    path = write_op_resolver(tmp_path / "src" / "ops.inc", ops)
    written = path.read_text()
    assert f"MicroMutableOpResolver<{len(ops)}>" in written
    assert "resolver.AddTranspose()" in written and "resolver.AddQuantize()" in written


def _compiles(tmp_path, text, methods):
    """The emitted C++ compiles against a stand-in for TFLM's header with the same API shape."""
    import shutil
    import subprocess

    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    inc = tmp_path / "inc" / "tensorflow" / "lite" / "micro"
    inc.mkdir(parents=True)
    adds = "\n".join(f"  TfLiteStatus {m}() {{ return kTfLiteOk; }}" for m in methods)
    (inc / "micro_mutable_op_resolver.h").write_text(
        "#pragma once\nenum TfLiteStatus { kTfLiteOk = 0, kTfLiteError = 1 };\n"
        f"namespace tflite {{ template <unsigned N> class MicroMutableOpResolver {{ public:\n{adds}\n}}; }}\n"
    )
    src = tmp_path / "ops.cc"
    src.write_text(text + "\nint main() { static tflite::MicroMutableOpResolver<4> r; return RegisterEdgeExportOps(r); }\n")
    proc = subprocess.run([gxx, "-std=c++17", "-fsyntax-only", f"-I{tmp_path / 'inc'}", str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_float_model_fails_the_micro_rules(cnn_models):
    report = check_micro(read_flatbuffer(cnn_models.fp32))
    assert report.unsupported_ops == ()
    assert not report.integer_io and not report.fully_integer
    assert len(report.problems) == 2 and "int8" in report.problems[0]


def test_arena_search_survives_tflm_crashing_just_below_the_minimum(tmp_path):
    """Regression: on this Linear-ReLU-Linear model TFLM segfaults (rather than failing) for arena
    sizes up to 16 bytes below the smallest that allocates, and the arena search probed one: every
    --target micro export of it ended in exit 3. Probes now run in a forked child."""
    import torch

    import edge_export

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    result = edge_export.export(
        mlp, example_inputs=(torch.randn(1, 16),), output=tmp_path / "mlp.tflite", target="micro",
        samples=3, calibration_samples=16, no_emit_c=True,
    )
    assert result.exit_code == 0, result.report
    arena = result.report["target"]["micro"]["arena_bytes"]
    # The figure found is the smallest that allocates: a fresh interpreter takes it, and a smaller one (below the crash window) is refused.
    data = (tmp_path / "mlp.tflite").read_bytes()
    assert MicroRunner(data, arena_size=arena).arena_bytes == arena
    with pytest.raises(RuntimeRunError):
        MicroRunner(data, arena_size=arena - 64)
