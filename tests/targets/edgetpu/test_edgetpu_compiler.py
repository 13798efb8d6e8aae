"""edgetpu_compiler integration: output parsing, a fake compiler at the process boundary, the
missing-compiler and missing-delegate paths (for real)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from edgetpu_helpers import FAKE_COMPILER_PROLOGUE, write_fake_compiler

from edge_export.errors import ConversionError, TargetError
from edge_export.targets.edgetpu.checks import check_edgetpu_bytes
from edge_export.output.serialize import to_json_value
from edge_export.targets.edgetpu.compiler import (
    compare_with_prediction,
    compile_for_edgetpu,
    find_compiler,
    load_edgetpu_delegate,
    parse_compiler_output,
    parse_operation_log,
    require_compiled,
    run_compiler,
)

PARTIAL_STDOUT = """\
Edge TPU Compiler version 16.0.384591198
Started a compilation timeout timer of 180 seconds.

Model compiled successfully in 1436 ms.

Input model: /models/resnet18_int8.tflite
Input size: 11.23MiB
Output model: /out/resnet18_int8_edgetpu.tflite
Output size: 11.26MiB
On-chip memory used for caching model parameters: 6.91MiB
On-chip memory remaining for caching model parameters: 832.00KiB
Off-chip memory used for streaming uncached model parameters: 4.28MiB
Number of Edge TPU subgraphs: 1
Total number of operations: 52
Operation log: /out/resnet18_int8_edgetpu.log

Model successfully compiled but not all operations are supported by the Edge TPU. A percentage of the model will instead run on the CPU, which is slower. If possible, consider updating your model to use only operations supported by the Edge TPU. For details, visit g.co/coral/model-reqs.
Number of operations that will run on Edge TPU: 2
Number of operations that will run on CPU: 50

Operator                       Count      Status

CONV_2D                        1          Mapped to Edge TPU
PAD                            1          Mapped to Edge TPU
PADV2                          1          Operation not supported
CONV_2D                        19         More than one subgraph is not supported
ADD                            8          Operation is working on an unsupported data type
DEQUANTIZE                     12         Operation not supported
QUANTIZE                       8          Operation is working on an unsupported data type
MAX_POOL_2D                    1          More than one subgraph is not supported
MEAN                           1          More than one subgraph is not supported
Compilation child process completed within timeout period.
Compilation succeeded!
"""

FULL_STDOUT = """\
Edge TPU Compiler version 16.0.384591198
Started a compilation timeout timer of 180 seconds.

Model compiled successfully in 412 ms.

Input model: model.tflite
Input size: 75.06KiB
Output model: out/model_edgetpu.tflite
Output size: 151.47KiB
On-chip memory used for caching model parameters: 98.50KiB
On-chip memory remaining for caching model parameters: 7.88MiB
Off-chip memory used for streaming uncached model parameters: 0.00B
Number of Edge TPU subgraphs: 1
Total number of operations: 4
Operation log: out/model_edgetpu.log
See the operation log file for individual operation details.
Compilation child process completed within timeout period.
Compilation succeeded!
"""

FULL_LOG = """\
Edge TPU Compiler version 16.0.384591198
Input: model.tflite
Output: out/model_edgetpu.tflite

Operator                       Count      Status

CONV_2D                        1          Mapped to Edge TPU
MAX_POOL_2D                    1          Mapped to Edge TPU
MEAN                           1          Mapped to Edge TPU
FULLY_CONNECTED                1          Mapped to Edge TPU
"""


def test_parse_partial_mapping_output():
    out = parse_compiler_output(PARTIAL_STDOUT)
    assert out.version == "16.0.384591198" and out.compile_time_ms == 1436
    assert out.input_model == "/models/resnet18_int8.tflite"
    assert out.on_chip_used_bytes == round(6.91 * 1024**2)
    assert out.on_chip_remaining_bytes == 832 * 1024 and out.off_chip_used_bytes == round(4.28 * 1024**2)
    assert out.num_subgraphs == 1 and out.total_ops == 52
    assert (out.ops_on_tpu, out.ops_on_cpu) == (2, 50)
    assert out.log_path == "/out/resnet18_int8_edgetpu.log"
    assert len(out.table) == 9 and sum(r.count for r in out.table) == 52
    assert out.table[2].operator == "PADV2" and out.table[2].status == "Operation not supported"
    assert out.errors == ()


def test_parse_full_mapping_output_and_log():
    out = parse_compiler_output(FULL_STDOUT)
    assert out.off_chip_used_bytes == 0 and out.total_ops == 4
    assert (out.ops_on_tpu, out.ops_on_cpu) == (4, 0)  # no split printed when everything maps
    log = parse_operation_log(FULL_LOG)
    assert log.version == "16.0.384591198" and log.input_model == "model.tflite"
    assert [r.operator for r in log.table] == ["CONV_2D", "MAX_POOL_2D", "MEAN", "FULLY_CONNECTED"]
    assert (log.ops_on_tpu, log.ops_on_cpu) == (4, 0)


def test_parse_failure_lines():
    out = parse_compiler_output("Edge TPU Compiler version 16.0.384591198\nERROR: Model not quantized\n")
    assert out.errors == ("ERROR: Model not quantized",) and out.total_ops is None


# Writes <name>_edgetpu.tflite and .log into the -o directory and prints the documented output.
_WRITING_BODY = FAKE_COMPILER_PROLOGUE + """\
cat > "$out/${name}_edgetpu.log" <<'LOG'
%s
LOG
cat <<'OUT'
%s
OUT
""" % (FULL_LOG, FULL_STDOUT)


def test_run_fake_compiler_end_to_end(tmp_path, fake_compiler_dir, small_cnn_int8, monkeypatch):
    write_fake_compiler(fake_compiler_dir, _WRITING_BODY)
    monkeypatch.setenv("PATH", f"{fake_compiler_dir}{os.pathsep}{os.environ['PATH']}")
    model = tmp_path / "model.tflite"
    model.write_bytes(small_cnn_int8)
    result = compile_for_edgetpu(model, tmp_path / "out", timeout_s=30)
    assert result.compiled and result.exit_code == 0 and result.reason == ""
    assert Path(result.compiled_model).name == "model_edgetpu.tflite" and Path(result.compiled_model).is_file()
    assert result.output.log_path.endswith("model_edgetpu.log")
    assert (result.ops_on_tpu, result.ops_on_cpu) == (4, 0) and result.output.num_subgraphs == 1
    report = check_edgetpu_bytes(small_cnn_int8)
    assert compare_with_prediction(report, result) == []
    require_compiled(result)  # no error


def test_compare_reports_disagreements(tmp_path, small_cnn_int8):
    report = check_edgetpu_bytes(small_cnn_int8)
    from edge_export.targets.edgetpu.compiler import CompilerResult

    result = CompilerResult(compiled=True, reason="", output=parse_compiler_output(PARTIAL_STDOUT))
    found = compare_with_prediction(report, result)
    assert "total operations: predicted 4, compiler says 52" in found
    assert any(line.startswith("PADV2 'Operation not supported'") for line in found)


def test_fake_compiler_nonzero_exit(tmp_path, fake_compiler_dir, small_cnn_int8):
    compiler = write_fake_compiler(
        fake_compiler_dir,
        'echo "Edge TPU Compiler version 16.0.384591198"\necho "Internal compiler error. Aborting!"\nexit 1\n',
    )
    model = tmp_path / "m.tflite"
    model.write_bytes(small_cnn_int8)
    result = run_compiler(model, tmp_path / "out", str(compiler), timeout_s=30)
    assert not result.compiled and result.exit_code == 1
    assert "exit status 1" in result.reason and "Internal compiler error" in result.reason
    assert result.output.version == "16.0.384591198"
    with pytest.raises(ConversionError, match="compile failed"):
        require_compiled(result)


def test_fake_compiler_timeout(tmp_path, fake_compiler_dir, small_cnn_int8):
    compiler = write_fake_compiler(fake_compiler_dir, "exec sleep 30\n")
    model = tmp_path / "m.tflite"
    model.write_bytes(small_cnn_int8)
    result = run_compiler(model, tmp_path / "out", str(compiler), timeout_s=0.2)
    assert not result.compiled and "did not finish" in result.reason and result.exit_code is None
    assert result.elapsed_s < 20


def test_missing_compiler_is_reported_not_raised(tmp_path, small_cnn_int8, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_compiler(None) is None
    model = tmp_path / "m.tflite"
    model.write_bytes(small_cnn_int8)
    result = compile_for_edgetpu(model, tmp_path / "out")
    assert not result.compiled and result.compiler is None and "not on PATH" in result.reason
    assert to_json_value(result)["compiled"] is False
    assert compare_with_prediction(check_edgetpu_bytes(small_cnn_int8), result) == []
    with pytest.raises(TargetError, match="not on PATH"):
        require_compiled(result)


def test_explicit_compiler_path_must_be_executable(tmp_path):
    with pytest.raises(TargetError, match="not an executable"):
        find_compiler(str(tmp_path / "nope" / "edgetpu_compiler"))


def test_missing_libedgetpu_is_a_target_error():
    with pytest.raises(TargetError, match="libedgetpu"):
        load_edgetpu_delegate()
