"""Helpers shared by the CLI tests (a plain module, so `from conftest import` never clashes between
the test folders' own conftest.py files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli_subprocess(*args: str, cwd: Path | None = None, timeout: float = 300) -> CliResult:
    """Run the installed console script in a fresh process (for import-time and safety checks)."""
    proc = subprocess.run(
        [*_cli_command(), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ}
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def validate_report(report: dict) -> dict:
    """Every report a test reads is checked against the published JSON schema (with the sections of
    targets a test registered, reports/schema.py)."""
    import jsonschema

    from edge_export.reports.schema import report_schema

    schema = report_schema()
    jsonschema.validate(report, schema, format_checker=jsonschema.FormatChecker())
    return report


def read_report(tflite_path: Path) -> dict:
    return validate_report(json.loads(Path(str(tflite_path.with_suffix("")) + ".report.json").read_text()))


def _cli_command() -> list[str]:
    exe = Path(sys.executable).with_name("edge-export")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "edge_export.cli"]


@dataclass
class PtyResult:
    exit_code: int
    output: str  # everything the terminal received, escape codes included


def run_cli_in_pty(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 300,
    interrupt_when: str | None = None,
    columns: int = 120,
) -> PtyResult:
    """Run the console script with a pseudo-terminal as its stdin, stdout and stderr, as in an
    interactive shell: the process leads its own session with the pty as controlling terminal, so
    rich sees a terminal and Ctrl-C (sent as the byte 0x03 once ``interrupt_when`` has appeared in
    the output) arrives as SIGINT through the terminal driver, not as a signal sent by hand."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [*_cli_command(), *map(str, args)], cwd=cwd, env=env,
        stdin=slave, stdout=slave, stderr=slave, preexec_fn=controlling_terminal, close_fds=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    interrupted = interrupt_when is None
    try:
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"edge-export {' '.join(args)} did not finish in {timeout} s")
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer of the pty has closed it
                    break
                if not data:
                    break
                chunks.append(data)
                if not interrupted and interrupt_when.encode() in b"".join(chunks):
                    os.write(master, b"\x03")
                    interrupted = True
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
    return PtyResult(code, b"".join(chunks).decode("utf-8", errors="replace"))


# The argument handling of a fake `edgetpu_compiler` (the only stand-in in these tests, at the
# process boundary): it finds -o and the model, then copies the model to <name>_edgetpu.tflite.
FAKE_COMPILER_PROLOGUE = """\
out=""; model=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--out_dir) out="$2"; shift 2;;
    -t|--timeout_sec) shift 2;;
    -s|--show_operations) shift;;
    *) model="$1"; shift;;
  esac
done
name=$(basename "$model" .tflite)
cp "$model" "$out/${name}_edgetpu.tflite" || exit 1
"""


def write_fake_compiler(bin_dir: Path, body: str) -> Path:
    """An executable shell script named edgetpu_compiler in ``bin_dir`` running ``body``."""
    import stat

    path = bin_dir / "edgetpu_compiler"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
