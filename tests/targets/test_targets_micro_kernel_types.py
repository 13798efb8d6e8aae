"""The tensor types TFLite Micro's kernels take (targets/micro/kernel_types.py): the table checked
against the installed host interpreter, and check_micro and the report listing what it would refuse."""

from __future__ import annotations

import pytest

from edge_export.flatbuffer import read_flatbuffer
from edge_export.output.serialize import to_json_value
from edge_export.targets.micro.checks import check_micro
from edge_export.targets.micro.kernel_types import (
    TFLM_KERNEL_INPUT_TYPES, KernelTypeMismatch, kernel_type_fix, kernel_type_mismatches,
)
from edge_export.targets.micro.kernels import TFLM_OP_RESOLVER_METHODS
from micro_kernel_models import CASES, MEASURED_TYPES, build_model, run_case


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
    assert all(types <= set(MEASURED_TYPES) and "float32" in types for types in TFLM_KERNEL_INPUT_TYPES.values())


def test_the_table_matches_the_installed_interpreter(measured):
    ran = {(op, t) for (op, t), refusal in measured.items() if refusal is None}
    table = {(op, t) for op, types in TFLM_KERNEL_INPUT_TYPES.items() for t in types}
    assert table - ran == set(), "the table lists types TFLM refused"
    assert ran - table == set(), "TFLM ran types the table does not list"
    assert {("SQRT", "int8"), ("EXP", "int8"), ("DIV", "int16")} <= set(measured) - ran
    assert {("RSQRT", "int8"), ("MUL", "int8"), ("SOFTMAX", "int8")} <= ran


def test_check_micro_names_every_operator_tflm_refuses(measured):
    """The first line of defence agrees with the interpreter on every case: check_micro lists
    exactly the models TFLM refused, with the operator, its type and the types its kernel takes."""
    for (op, dtype), refusal in measured.items():
        found = check_micro(read_flatbuffer(build_model(CASES[op](dtype)))).kernel_type_mismatches
        if refusal is None:
            assert found == (), (op, dtype)
        else:
            assert [(m.opcode, m.operator_index, m.input_type) for m in found] == [(op, 0, dtype)]
            assert dtype not in found[0].kernel_types and "float32" in found[0].kernel_types


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
