"""Every command as a user runs it in an interactive terminal (issue 15).

The rest of the suite runs the CLI through pipes, where rich draws no live display and nothing
swaps the process's streams; in a terminal every export used to end in an ``excepthook`` dump with
exit 1 while its report said exit 0. These tests give the process a pseudo-terminal for stdin,
stdout and stderr and check what the user sees: the exit code equals the report's, the summary or
the one-paragraph error is printed, colours are on, and no traceback appears.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from cli_harness import read_report, run_cli_in_pty, run_cli_subprocess
from model_zoo import small_cnn

# The pseudo-terminal child is started with a preexec hook (to take the terminal as its controlling
# one), which makes subprocess fork a process that has imported JAX; the child execs at once.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")

CRASH_MARKERS = ("Traceback", "excepthook", "lost sys.stderr", "closed file", "Original exception")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """The terminal output without escape codes and carriage-return redraws."""
    return ANSI.sub("", text).replace("\r", "")


def assert_clean(output: str) -> None:
    for marker in CRASH_MARKERS:
        assert marker not in output, f"{marker!r} in terminal output:\n{plain(output)}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("terminal")
    model = small_cnn()
    example = (torch.randn(1, 3, 16, 16),)
    torch.export.save(torch.export.export(model, example), root / "net.pt2")
    return root


@pytest.fixture(scope="module")
def fp32_run(workdir):
    """One fp32 export in a terminal: checked by the first test, its file shared by the validate,
    inspect and bench tests."""
    return run_cli_in_pty("net.pt2", "-o", "fp32/net.tflite", cwd=workdir)


@pytest.fixture(scope="module")
def exported(workdir, fp32_run) -> Path:
    assert fp32_run.exit_code == 0, plain(fp32_run.output)
    return workdir / "fp32" / "net.tflite"


@pytest.mark.slow
def test_export_fp32_passes_with_summary_and_colours(workdir, fp32_run):
    result = fp32_run
    assert_clean(result.output)
    report = read_report(workdir / "fp32" / "net.tflite")
    assert result.exit_code == report["exit_code"] == 0
    text = plain(result.output)
    assert "PASSED  fp32/net.tflite" in text
    assert "parity (8 samples): worst output" in text
    assert "reports: fp32/net.report.json" in text
    assert "• Tracing and converting with litert-torch" in text
    assert "\x1b[1;32mPASSED" in result.output  # a terminal gets colour; pipes do not (below)
    assert "\x1b[?25l" in result.output and "\x1b[?25h" in result.output  # the spinner hid the cursor and gave it back


@pytest.mark.slow
def test_export_int8_passes(workdir):
    result = run_cli_in_pty(
        "net.pt2", "-o", "int8/net.tflite", "--quantize", "int8", "--quant-backend", "flatbuffer",
        "--calibration-samples", "16", cwd=workdir,
    )
    assert_clean(result.output)
    report = read_report(workdir / "int8" / "net.tflite")
    assert result.exit_code == report["exit_code"] == 0
    text = plain(result.output)
    assert "PASSED  int8/net.tflite" in text
    assert "quantization: int8 via flatbuffer" in text
    assert "warning: Activation ranges were calibrated on synthetic inputs" in text


@pytest.mark.slow
def test_export_parity_failure_exits_1(workdir):
    result = run_cli_in_pty("net.pt2", "-o", "strict/net.tflite", "--min-sqnr", "400", cwd=workdir)
    assert_clean(result.output)
    report = read_report(workdir / "strict" / "net.tflite")
    assert result.exit_code == report["exit_code"] == 1
    text = plain(result.output)
    assert "FAILED  strict/net.tflite" in text and "failed: sqnr_db" in text


def test_user_error_prints_one_paragraph_and_exits_2(workdir):
    result = run_cli_in_pty("missing.pt2", "-o", "missing/net.tflite", cwd=workdir)
    assert_clean(result.output)
    assert result.exit_code == 2
    text = plain(result.output)
    assert "error: No such model file: missing.pt2" in text
    assert "(run with --debug for the full traceback)" in text
    assert not (workdir / "missing" / "net.tflite").exists()


@pytest.mark.slow
def test_quiet_prints_nothing_and_draws_no_spinner(workdir):
    result = run_cli_in_pty("net.pt2", "-o", "quiet/net.tflite", "--quiet", cwd=workdir)
    assert result.exit_code == read_report(workdir / "quiet" / "net.tflite")["exit_code"] == 0
    assert result.output == "", repr(result.output)


def test_quiet_still_prints_the_error(workdir):
    result = run_cli_in_pty("missing.pt2", "--quiet", cwd=workdir)
    assert_clean(result.output)
    assert result.exit_code == 2
    assert "error: No such model file" in plain(result.output)


@pytest.mark.slow
def test_verbose_shows_library_output_and_the_summary(workdir):
    result = run_cli_in_pty("net.pt2", "-o", "verbose/net.tflite", "--verbose", cwd=workdir)
    assert_clean(result.output)
    assert result.exit_code == read_report(workdir / "verbose" / "net.tflite")["exit_code"] == 0
    text = plain(result.output)
    assert "PASSED  verbose/net.tflite" in text
    assert "\x1b[?25l" not in result.output  # no spinner fighting with the libraries' output


def test_ctrl_c_exits_130_and_writes_nothing(workdir):
    result = run_cli_in_pty(
        "net.pt2", "-o", "interrupted/net.tflite", cwd=workdir, interrupt_when="Tracing and converting"
    )
    assert_clean(result.output)
    assert result.exit_code == 130
    assert "interrupted: nothing was written." in plain(result.output)
    folder = workdir / "interrupted"
    assert not (folder.exists() and any(folder.iterdir())), list(folder.iterdir())


def test_validate_in_terminal(workdir, exported):
    result = run_cli_in_pty("validate", exported, "--reference", "net.pt2", cwd=workdir)
    assert_clean(result.output)
    report = json.loads((exported.parent / "net.validate.report.json").read_text())
    assert result.exit_code == report["exit_code"] == 0
    assert "PASSED" in plain(result.output)


def test_inspect_and_bench_in_terminal(workdir, exported):
    inspected = run_cli_in_pty("inspect", exported, cwd=workdir)
    assert_clean(inspected.output)
    assert inspected.exit_code == 0
    assert "Operators" in plain(inspected.output) and "CONV_2D" in plain(inspected.output)

    bench = run_cli_in_pty("bench", exported, "--runs", "3", "--warmup", "1", cwd=workdir)
    assert_clean(bench.output)
    assert bench.exit_code == 0
    assert "XNNPACK" in plain(bench.output)

    bad = run_cli_in_pty("inspect", "net.pt2", cwd=workdir)
    assert_clean(bad.output)
    assert bad.exit_code == 2 and "error:" in plain(bad.output)


def test_help_and_version_in_terminal(workdir):
    helped = run_cli_in_pty("--help", cwd=workdir)
    assert_clean(helped.output)
    assert helped.exit_code == 0 and "Usage: edge-export" in plain(helped.output)
    version = run_cli_in_pty("--version", cwd=workdir)
    assert version.exit_code == 0 and "edge-export 0." in plain(version.output)


def test_pipes_get_no_escape_codes(workdir, exported):
    """What a CI log gets: the same summary, without colours or spinner frames."""
    result = run_cli_subprocess("validate", exported, "--reference", "net.pt2", cwd=workdir)
    assert result.exit_code == 0
    assert "\x1b[" not in result.stdout + result.stderr
    assert "PASSED" in result.stdout and "• Checking parity" in result.stderr


def test_narrow_terminal_folds_tensor_names_instead_of_cutting_them(workdir, exported):
    result = run_cli_in_pty("inspect", exported, cwd=workdir, columns=60)
    assert result.exit_code == 0
    text = plain(result.output)
    assert "…" not in text
    # the input's full name is still there, folded over the lines of its table cell
    inputs = text.split("Inputs")[1].split("Outputs")[0]
    cells = [line.split("│")[2].strip() for line in inputs.splitlines() if line.count("│") == 6]
    assert "".join(cells) == "serving_default_x"  # the input is named after forward()'s parameter
    assert len([c for c in cells if c]) > 1  # folded over more than one line


def test_a_reader_that_closed_the_pipe_keeps_the_runs_exit_code(workdir, exported):
    """`edge-export ... | head -1`: the reader goes away before the summary. The run is done and its
    files are written, so its exit code stands; rich's console made it 1 (a failed parity's code)."""
    import subprocess

    from cli_harness import _cli_command

    proc = subprocess.Popen([*_cli_command(), "validate", str(exported), "--reference", "net.pt2"], cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line: every write to stdout fails
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr
