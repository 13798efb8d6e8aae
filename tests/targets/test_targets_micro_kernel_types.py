"""The tensor types TFLite Micro's kernels take (targets/micro/kernel_types.py): the table checked
against the installed host interpreter."""

from __future__ import annotations

import pytest

from edge_export.targets.micro.kernel_types import TFLM_KERNEL_INPUT_TYPES
from edge_export.targets.micro.kernels import TFLM_OP_RESOLVER_METHODS
from micro_kernel_models import CASES, MEASURED_TYPES, run_case


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
