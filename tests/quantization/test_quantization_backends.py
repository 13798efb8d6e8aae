"""Backend fallback, the fully-integer check with module paths, and the auto choice rules."""

from __future__ import annotations

import pytest
import torch
from quantization_models import (
    GatedConv,
    GroupNormBlock,
    PadResidual,
    Residual,
    TinyEncoder,
    heldout,
    make,
    tflite_outputs,
    torch_outputs,
)

from edge_export.config import InputSpec, QuantBackend, QuantizeMode
from edge_export.errors import QuantizationError, TraceError, UsageError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization import (
    BackendAttempt,
    check_integer,
    QuantizationRequest,
    module_path_for,
    quantize_model,
    synthetic_calibration,
)
from edge_export.quantization.pt2e import quantize_pt2e
from edge_export.quantization.selection import choose_attempt
from edge_export.validators.metrics import sqnr_db

PAD_SPEC = InputSpec((1, 3, 8, 8))
SEQ_SPEC = InputSpec((1, 8, 16))


@pytest.fixture(scope="module")
def gated_conv_float() -> bytes:
    """GatedConv's float flatbuffer, converted once for the two auto runs on it: handed to
    quantize_model as the export hands it the float model it converted (still checked to run there)."""
    from edge_export.conversion.litert import convert_module

    return convert_module(make(GatedConv), (torch.zeros(PAD_SPEC.shape),))


def test_pt2e_failure_falls_back_to_a_fully_integer_flatbuffer_model(gated_conv_float):
    model = make(GatedConv)
    calib = synthetic_calibration([PAD_SPEC], n=8)
    result = quantize_model(model, (torch.zeros(PAD_SPEC.shape),), QuantizationRequest(
        QuantizeMode.INT8, calibration=calib, require_full_integer=True,
    ), float_model_bytes=gated_conv_float)
    flat, pt2e = result.attempts
    assert pt2e.backend == "pt2e" and not pt2e.ok and "LOGISTIC" in pt2e.error
    assert flat.ok and result.backend == "flatbuffer" and result.fully_integer
    assert "pt2e failed" in result.reason
    xs = heldout(PAD_SPEC, 6)
    assert sqnr_db(torch_outputs(model, xs), tflite_outputs(result.model.data, xs)) > 25.0


@pytest.mark.slow
def test_residual_blocks_are_fully_integer_with_both_backends():
    for cls in (Residual, PadResidual):
        model = make(cls)
        calib = synthetic_calibration([PAD_SPEC], n=8)
        # Each backend explicitly: auto may skip lowering PT2E when its simulation cannot win.
        for backend in (QuantBackend.FLATBUFFER, QuantBackend.PT2E):
            result = quantize_model(model, (torch.zeros(PAD_SPEC.shape),), QuantizationRequest(
                QuantizeMode.INT8, calibration=calib, backend=backend,
            ))
            assert result.attempts[0].ok and result.fully_integer, (cls.__name__, backend, result.attempts)


def test_full_integer_requirement_picks_the_integer_backend():
    model = make(GroupNormBlock)
    calib = synthetic_calibration([PAD_SPEC], n=8)
    example = (torch.zeros(PAD_SPEC.shape),)
    # A clipping flatbuffer observer keeps PT2E's simulated parity within reach, so PT2E is lowered and
    # the integer requirement, not parity, decides.
    result = quantize_model(model, example, QuantizationRequest(
        QuantizeMode.INT8, calibration=calib, require_full_integer=True, flatbuffer_observer="moving_average",
    ))
    flat, pt2e = result.attempts
    assert pt2e.ok and pt2e.fully_integer is False  # the GroupNorm stayed float
    assert flat.ok and flat.fully_integer and result.backend == "flatbuffer" and result.fully_integer
    # The PT2E model's float island is traced back to the GroupNorm module.
    data = quantize_pt2e(model, example, QuantizeMode.INT8, calib, observer="minmax")
    check = check_integer(read_flatbuffer(data), model)
    assert check.float_tensors and "norm" in check.float_modules


def test_explicit_pt2e_backend_reports_its_failure():
    calib = synthetic_calibration([PAD_SPEC], n=2)
    with pytest.raises(QuantizationError, match="LOGISTIC") as info:
        quantize_model(make(GatedConv), (torch.zeros(PAD_SPEC.shape),), QuantizationRequest(
            QuantizeMode.INT8, calibration=calib, backend=QuantBackend.PT2E,
        ))
    assert "--quant-backend flatbuffer" in str(info.value)


def test_transformer_pt2e_is_mixed_precision_and_the_float_parts_are_named():
    model = make(TinyEncoder)
    calib = synthetic_calibration([SEQ_SPEC], n=4)
    data = quantize_pt2e(model, (torch.zeros(SEQ_SPEC.shape),), QuantizeMode.INT8, calib)
    check = check_integer(read_flatbuffer(data), model)
    assert not check.fully_integer and check.float_tensors and check.inner_quantize_ops
    modules = dict(model.named_modules())
    # Every float island maps to a real submodule; LayerNorm is among them.
    assert set(check.float_modules) <= set(modules)
    assert any(isinstance(modules[m], torch.nn.LayerNorm) for m in check.float_modules)
    assert {op.opcode for op in check.inner_quantize_ops} <= {"QUANTIZE", "DEQUANTIZE"}


def test_transformer_flatbuffer_backend_is_fully_integer():
    model = make(TinyEncoder)
    calib = synthetic_calibration([SEQ_SPEC], n=8)
    result = quantize_model(model, (torch.zeros(SEQ_SPEC.shape),), QuantizationRequest(
        QuantizeMode.INT8, calibration=calib, backend=QuantBackend.FLATBUFFER,
    ))
    assert result.fully_integer and not result.integer_check.float_tensors
    assert result.sqnr_db > 20.0


def test_a_model_neither_backend_can_trace_fails_before_any_backend_runs(monkeypatch):
    """The float conversion is the precondition of both backends (issue 21): its failure is the
    export's, and PT2E no longer calibrates first only to fail the same way."""
    from edge_export.quantization import pt2e

    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # control flow on a value: torch.export cannot trace it for either backend
                return x * 2
            return x - 1

    monkeypatch.setattr(pt2e, "calibrate_pt2e", lambda *a, **k: pytest.fail("PT2E calibrated"))
    spec = InputSpec((1, 16))
    with pytest.raises(TraceError, match="torch.export cannot trace it"):
        quantize_model(DataDependent(), (torch.zeros(spec.shape),), QuantizationRequest(
            QuantizeMode.INT8, calibration=synthetic_calibration([spec], n=2),
        ))


def test_every_backend_failing_raises_quantization_error(monkeypatch, gated_conv_float):
    from edge_export.processes.isolation import CRASH_HOOK_ENV

    monkeypatch.setenv(CRASH_HOOK_ENV, "int8 quantization")  # the flatbuffer backend's child aborts
    model = make(GatedConv)  # and PT2E cannot lower its LOGISTIC
    with pytest.raises(QuantizationError, match="Every quantization backend failed") as info:
        quantize_model(model, (torch.zeros(PAD_SPEC.shape),), QuantizationRequest(
            QuantizeMode.INT8, calibration=synthetic_calibration([PAD_SPEC], n=2),
        ), float_model_bytes=gated_conv_float)
    assert "pt2e failed" in str(info.value) and "flatbuffer failed" in str(info.value)


def test_bad_argument_combinations():
    calib = synthetic_calibration([PAD_SPEC], n=1)
    model, example = make(PadResidual), (torch.zeros(PAD_SPEC.shape),)
    from edge_export.config import IODtype

    with pytest.raises(UsageError, match="pt2e cannot do --quantize int16x8"):
        quantize_model(model, example, QuantizationRequest(
            QuantizeMode.INT16X8, calibration=calib, backend=QuantBackend.PT2E,
        ))
    with pytest.raises(UsageError, match="--io-dtype uint8 applies to --quantize int8 only"):
        quantize_model(model, example, QuantizationRequest(
            QuantizeMode.DYNAMIC_INT8, calibration=calib, io_dtype=IODtype.UINT8,
        ))
    with pytest.raises(UsageError, match="not fp16"):
        quantize_model(model, example, QuantizationRequest(QuantizeMode.FP16, calibration=calib))


# ---- module paths from litert-torch tensor names ----------------------------------------------------


def test_module_path_from_tensor_names():
    name = "torch.nn.modules.container.Sequential/torch.nn.modules.linear.Linear_7;1"
    assert module_path_for(name) == "7"
    fused = (
        "torch.nn.modules.container.Sequential/torch.nn.modules.activation.ReLU_2;;"
        "torch.nn.modules.container.Sequential/torch.nn.modules.conv.Conv2d_0;"
    )
    assert module_path_for(fused) == "2"
    assert module_path_for("arith.constant1") is None and module_path_for("serving_default_args_0") is None
    assert module_path_for("conftest.Residual;;conftest.Residual;") == ""  # the root's own forward()
    assert module_path_for("torch.export._trace.<locals>._aot_export_non_strict.<locals>.Wrapper;1") is None

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 1, 1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.ModuleList([Block(), Block()])

    # The stack drops the ModuleList itself; resolving against the module restores "layer".
    nested = "__main__.Net/__main__.Block_1/torch.nn.modules.conv.Conv2d_conv;"
    assert module_path_for(nested) == "1.conv"
    assert module_path_for(nested, Net()) == "layer.1.conv"


# ---- the auto choice ------------------------------------------------------------------------------


def _ok(backend, sqnr, fully_integer):
    return BackendAttempt(backend=backend, ok=True, fully_integer=fully_integer, sqnr_db=sqnr, cosine=0.99)


def test_choice_prefers_full_integer_when_required_else_parity():
    attempts = [_ok("pt2e", 38.0, False), _ok("flatbuffer", 33.0, True)]
    index, reason = choose_attempt(attempts, require_full_integer=True)
    assert index == 1 and "fully integer" in reason
    index, reason = choose_attempt(attempts, require_full_integer=False)
    assert index == 0 and "better parity" in reason


def test_choice_ties_go_to_the_fully_integer_result_and_failures_are_explained():
    index, _ = choose_attempt([_ok("pt2e", 40.01, False), _ok("flatbuffer", 40.0, True)], False)
    assert index == 1
    failed = BackendAttempt(backend="pt2e", ok=False, error="boom")
    index, reason = choose_attempt([failed, _ok("flatbuffer", 30.0, False)], True)
    assert index == 1 and "pt2e failed (boom)" in reason and "not fully integer" in reason
    index, reason = choose_attempt([failed], False)
    assert index is None and "boom" in reason
