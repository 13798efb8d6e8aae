"""The tensor types TFLite Micro's kernels take (targets/micro/kernel_types.py): the table checked
against the installed host interpreter, check_micro and the report listing what it would refuse,
the interpreter's own type refusals given the kernel's types as hint, and `--target micro` refusing
an int8 SQRT before any native run (it used to pass the check and fail parity with a shape hint)."""

from __future__ import annotations

import pytest
import torch

from edge_export.flatbuffer import read_flatbuffer
from edge_export.output.serialize import to_json_value
from edge_export.targets.micro.checks import check_micro
from edge_export.targets.micro.kernel_types import (
    TFLM_KERNEL_INPUT_TYPES, KernelTypeMismatch, kernel_type_fix, kernel_type_mismatches,
)
from edge_export.targets.micro.kernels import TFLM_OP_RESOLVER_METHODS
from micro_kernel_models import CASES, MEASURED_TYPES, build_model, run_case

# TFLM refuses MIRROR_PAD's int16 without a word ("failed to invoke with status 1" only).
_SILENT_REFUSALS = {("MIRROR_PAD", "int16")}


@pytest.fixture(scope="module")
def measured() -> dict[tuple[str, str], object]:
    """(operator, type) -> None when TFLM ran it, else its RuntimeRunError: every case in one child
    process (a kernel that crashes on a type fails the test, not the session), well under a second."""
    from edge_export.processes.isolation import run_isolated

    def run_all():
        return {(op, t): run_case(make(t)) for op, make in CASES.items() for t in MEASURED_TYPES}

    return run_isolated(run_all, stage="TFLite Micro kernel types", backend="the TFLite Micro interpreter")


def test_the_table_covers_the_measured_operators_and_only_tflm_kernels():
    assert set(TFLM_KERNEL_INPUT_TYPES) == set(CASES)
    assert set(TFLM_KERNEL_INPUT_TYPES) <= set(TFLM_OP_RESOLVER_METHODS)
    assert all(types <= set(MEASURED_TYPES) for types in TFLM_KERNEL_INPUT_TYPES.values())
    # every kernel runs float32 but DEQUANTIZE, whose input is integer by definition
    assert {op for op, types in TFLM_KERNEL_INPUT_TYPES.items() if "float32" not in types} == {"DEQUANTIZE"}


def test_the_table_matches_the_installed_interpreter(measured):
    ran = {(op, t) for (op, t), refusal in measured.items() if refusal is None}
    table = {(op, t) for op, types in TFLM_KERNEL_INPUT_TYPES.items() for t in types}
    assert table - ran == set(), "the table lists types TFLM refused"
    assert ran - table == set(), "TFLM ran types the table does not list"
    assert {("SQRT", "int8"), ("EXP", "int8"), ("DIV", "int16")} <= set(measured) - ran
    assert {("RSQRT", "int8"), ("MUL", "int8"), ("SOFTMAX", "int8")} <= ran
    # the requantizations at --mixed-precision's int16 boundaries run both ways
    assert {("QUANTIZE", "int8"), ("QUANTIZE", "int16"), ("DEQUANTIZE", "int16")} <= ran


def test_every_refusal_was_about_the_type_and_gets_the_kernels_types_as_hint(measured):
    """TFLM's words for each refusal are a type wording the runner knows (so a refused case is a
    type refusal, not a bad test model), and the runner's hint is the table's fix, not the shape one."""
    from edge_export.targets.micro.runner import _TYPE_REFUSAL

    for (op, dtype), refusal in measured.items():
        if refusal is None:
            continue
        assert bool(_TYPE_REFUSAL.search(refusal.message)) != ((op, dtype) in _SILENT_REFUSALS), refusal.message
        mismatch = KernelTypeMismatch(op, 0, dtype, tuple(t for t in MEASURED_TYPES if t in TFLM_KERNEL_INPUT_TYPES[op]))
        assert refusal.hint == kernel_type_fix(mismatch), (op, dtype, refusal.message)


def test_check_micro_names_every_operator_tflm_refuses(measured):
    """The first line of defence agrees with the interpreter on every case: check_micro lists
    exactly the models TFLM refused, with the operator, its type and the types its kernel takes."""
    for (op, dtype), refusal in measured.items():
        found = check_micro(read_flatbuffer(build_model(CASES[op](dtype)))).kernel_type_mismatches
        if refusal is None:
            assert found == (), (op, dtype)
        else:
            assert [(m.opcode, m.operator_index, m.input_type) for m in found] == [(op, 0, dtype)]
            assert dtype not in found[0].kernel_types
            assert "float32" in found[0].kernel_types or op == "DEQUANTIZE"


def test_the_report_lists_the_mismatches_in_json_and_problems():
    report = check_micro(read_flatbuffer(build_model(CASES["SQRT"]("int8"))))
    assert not report.ok
    assert to_json_value(report)["kernel_type_mismatches"] == [
        {"opcode": "SQRT", "operator_index": 0, "input_type": "int8", "kernel_types": ["float32"]}
    ]
    assert any("SQRT" in p and "int8" in p and "float32" in p for p in report.problems)
    assert kernel_type_mismatches(read_flatbuffer(build_model(CASES["RSQRT"]("int8")))) == ()


def test_the_fixes_say_what_tflm_runs_and_which_option_helps():
    sqrt = kernel_type_fix(KernelTypeMismatch("SQRT", 3, "int8", ("float32",)))
    assert "float32 only" in sqrt and "rsqrt" in sqrt and "--target cpu --quantize none" in sqrt
    div = kernel_type_fix(KernelTypeMismatch("DIV", 3, "int16", ("float32", "int8")))
    assert "float32 and int8, not int16" in div and "--mixed-precision" in div


def test_the_runner_hint_for_a_type_refusal_check_micro_did_not_foresee():
    """TFLM's exact words from the Silero VAD export, for an operator check_micro listed nothing
    about: the general kernel-type hint, never the shape one; a refusal of another kind: none."""
    from edge_export.targets.micro.runner import type_refusal_hint

    log = (
        "tensorflow/lite/micro/kernels/elementwise.cc:202 input->type != expected_type (INT8 != FLOAT32)\n"
        "Node SQRT (number 10) failed to invoke with status 1"
    )
    assert "SQRT kernel does not take the tensor type" in type_refusal_hint(log, ())
    known = KernelTypeMismatch("SQRT", 10, "int8", ("float32",))
    assert type_refusal_hint(log, (known,)) == kernel_type_fix(known)
    assert type_refusal_hint("Node ADD (number 1) failed to invoke with status 1", ()) is None


class SqrtFeatures(torch.nn.Module):
    """A Linear and a SQRT of a positive value: the SQRT quantizes to int8, which TFLM's kernel
    refuses. At module level: the converted names of a class local to a function lose its module."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.sqrt(self.fc(x) ** 2 + 1.0)


@pytest.fixture
def sqrt_pt2(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "sqrt_features.pt2"
    torch.export.save(torch.export.export(SqrtFeatures().eval(), (torch.randn(1, 16),)), path)
    return path


def test_cli_refuses_an_int8_sqrt_for_micro_before_running_it(sqrt_pt2, tmp_path, run_cli):
    out = tmp_path / "out" / "sqrt_features.tflite"
    res = run_cli(sqrt_pt2, "--target", "micro", "-o", out, "--calibration-samples", "8", "--samples", "2", "--no-weight-rounding")
    text = res.stdout + res.stderr
    assert res.exit_code == 3, text
    assert "SQRT" in res.stderr and "gets int8" in res.stderr and "takes float32" in res.stderr
    assert "SQRT (from aten.sqrt) in module '<root>' (SqrtFeatures), at " in res.stderr, res.stderr
    assert "torch.rsqrt" in res.stderr and "--target cpu --quantize none" in res.stderr
    assert "Check that the inputs match the shapes" not in text and "Traceback" not in text
    assert "Checking parity" not in text  # refused at the check, before TFLM ran anything
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sqrt_features.pt2"]  # no .tflite, bundle or report
