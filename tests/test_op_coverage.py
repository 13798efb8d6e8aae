"""The operator coverage sweep's machinery (benchmarks/op_coverage.py) on two operators, not the sweep:
each case runs in its own process, a hung child costs only its mode, float operators left in an int8
model are read from the file, and the table and failure lists are generated from the results."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import op_coverage  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swept():
    return {(r["case"], r["mode"]): r for r in op_coverage.sweep(["relu", "cumsum"], ["fp32", "int8"], timeout=240, progress=False)}


def test_each_case_is_exported_run_and_checked_on_every_target(swept):
    relu = swept[("relu", "fp32")]
    assert relu["status"] == "passed" and relu["exit_code"] == 0 and relu["sqnr_db"] > 60
    assert relu["gpu"]["fully_delegated"] and relu["micro"]["runs"]
    relu8 = swept[("relu", "int8")]
    assert relu8["status"] == "passed" and relu8["float_ops"] == [] and relu8["edgetpu"]["ops"] >= 1
    assert relu8["micro"]["runs"] and relu8["micro"]["sqnr_db"] > 20


def test_an_operator_left_in_float_is_named_with_what_each_backend_gave(swept):
    cumsum = swept[("cumsum", "int8")]
    assert cumsum["float_ops"] == ["CUMSUM"]
    assert {line.split(":")[0] for line in cumsum["attempts"]} <= {"pt2e", "flatbuffer"} and cumsum["attempts"]
    assert cumsum["edgetpu"]["fully_mapped"] is False and "CUMSUM" in cumsum["edgetpu"]["first_unmapped"]
    listed = op_coverage.failures(list(swept.values()))["stays_float_in_int8"]
    assert [item.split(":")[0] for item in listed] == ["cumsum"]


def test_a_child_that_hangs_costs_only_its_mode(tmp_path):
    # 0.01 s per mode: the child cannot even import torch; each mode gets its own child and verdict
    found = op_coverage.sweep_case("relu", ["fp32", "int8"], timeout=0.01, results_dir=tmp_path, workdir=tmp_path)
    assert [(r["mode"], r["status"]) for r in found] == [("fp32", "timeout"), ("int8", "timeout")]
    assert all("no result within" in r["error"] for r in found)


def test_the_table_lists_every_case_and_sorts_failures_by_kind(swept):
    hand_built = [
        {"case": "sorter", "family": "sort/select", "mode": "fp32", "status": "error", "exit_code": 3, "error_class": "RuntimeRunError",
         "error": "The LiteRT interpreter could not load the model: Didn't find op for builtin opcode 'STABLEHLO_SORT'"},
        {"case": "masker", "family": "attention", "mode": "int8", "status": "error", "exit_code": 4, "error_class": "ValueError",
         "error": "ValueError: cannot convert float NaN to integer"},
        {"case": "piped|name", "family": "x", "mode": "fp32", "status": "timeout", "exit_code": None, "error_class": "timeout", "error": "no result within 1 s"},
    ]
    results = [*swept.values(), *hand_built]
    found = op_coverage.failures(results)
    assert [i.split(" ")[0] for i in found["converts_but_does_not_run"]] == ["sorter"]
    assert [i.split(" ")[0] for i in found["exit_4"]] == ["masker"]
    assert [i.split(" ")[0] for i in found["other"]] == ["piped|name"]
    markdown = op_coverage.render_markdown(results, command="python benchmarks/op_coverage.py", date="2026-12-01")
    rows = [line for line in markdown.splitlines() if line.startswith("| `")]
    assert len(rows) == 5 and all(line.count(" | ") == 8 for line in rows)  # one row per case, 9 columns
    assert "**no run** (exit 3)" in markdown and "**fails** (exit 4)" in markdown and "piped\\|name" in markdown
    assert "no: float CUMSUM" in markdown


def test_a_rerun_replaces_only_its_cases_and_modes_and_is_noted():
    old = {"command": "full", "date": "d0", "seconds": 60, "results": [
        {"case": c, "mode": m, "status": "error"} for c in ("relu", "cumsum", "topk") for m in ("fp32", "int8")
    ]}
    rerun = [{"case": "cumsum", "mode": "int8", "status": "passed"}]
    merged = op_coverage._merged(old, rerun, {"cumsum"}, {"command": "again", "date": "d1"}, ["relu", "cumsum", "topk"])
    assert [(r["case"], r["mode"], r["status"]) for r in merged["results"]] == [
        ("relu", "fp32", "error"), ("relu", "int8", "error"), ("cumsum", "fp32", "error"),
        ("cumsum", "int8", "passed"), ("topk", "fp32", "error"), ("topk", "int8", "error"),
    ]
    assert merged["command"] == "full" and merged["reruns"] == [{"command": "again", "date": "d1"}]
    assert "Rerun on d1 with `again`" in op_coverage.render_markdown([], command="full", date="d0", reruns=merged["reruns"])
