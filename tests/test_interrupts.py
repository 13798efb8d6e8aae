"""Ctrl-C and SIGTERM in every stage of `edge-export MODEL` (a real process) leave nothing behind:
the documented exit code (130, 143), one line and no traceback, no artifact, report, temporary file
or created output folder, and no child process still running (the confined child of an untrusted
.pt2, the isolated children that run LiteRT and ai-edge-quantizer, and theirs).

Each run waits in its stage through the test hook ``EDGE_EXPORT_TEST_PAUSE`` (isolation.py) until
the signal comes, so the stage is the one named, whatever the machine's speed. Ctrl-C is SIGINT to
the whole process group, as a terminal sends it; SIGTERM goes to the edge-export process alone, as
`kill` sends it. The runs start together and wait in their stages side by side."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli_harness import _cli_command

NET_SOURCE = """
import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))
"""
SHAPE = "1,3,8,8"
INT8 = ("--quantize", "int8", "--quant-backend", "flatbuffer", "--calibration-samples", "4", "--no-latency")

# (pause in this stage, the label printed as it starts, options): the CLI prints the labels to stderr
STAGES = {
    "load": ("load", "Loading the model", ()),
    "convert": ("convert", "Tracing and converting", ()),
    "quantization child": ("int8 quantization", "Quantizing (int8", INT8),
    "parity child": ("parity check", "Checking parity", ()),
    "write": ("write", "Writing artifacts", ()),
}


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """One tiny model, as a package.module:attr reference (run in-process) and as an untrusted .pt2
    (run in the confined child)."""
    import torch

    folder = tmp_path_factory.mktemp("interrupts")
    (folder / "tiny_net.py").write_text(NET_SOURCE)
    sys.path.insert(0, str(folder))
    try:
        from tiny_net import TinyNet
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("tiny_net", None)
    torch.export.save(torch.export.export(TinyNet().eval(), (torch.zeros(1, 3, 8, 8),)), folder / "tiny.pt2")
    return folder


@dataclass
class Run:
    name: str
    proc: subprocess.Popen
    out_root: Path  # created by the run: must not exist afterwards
    tmpdir: Path  # TMPDIR of the run: the sandbox's private folders go here
    log: Path
    waits_for: str
    sig: signal.Signals
    signalled_at: float | None = None


def _start(model_folder: Path, tmp: Path, case: str, path_kind: str, sig: signal.Signals) -> Run:
    pause, label, extra = STAGES[case]
    name = f"{case}-{path_kind}-{sig.name}".replace(" ", "_")
    out_root, tmpdir = tmp / name / "new", tmp / name / "tmp"
    tmpdir.mkdir(parents=True)
    model = ["tiny.pt2"] if path_kind == "confined" else ["tiny_net:TinyNet", "--input-shape", SHAPE]
    log = tmp / name / "stderr.txt"
    env = {**os.environ, "EDGE_EXPORT_TEST_PAUSE": pause, "TMPDIR": str(tmpdir)}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*_cli_command(), *model, "-o", str(out_root / "deep" / "net.tflite"), "--samples", "2", *extra],
            cwd=model_folder, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
            preexec_fn=_as_a_terminal_starts_it,
        )
    return Run(name, proc, out_root, tmpdir, log, label, sig)


def _as_a_terminal_starts_it() -> None:
    """A shell starts a foreground command with Ctrl-C's default action; a test run launched in the
    background (`nohup ... &` without job control) ignores SIGINT, and a child would inherit that
    and never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _deliver(run: Run) -> None:
    """SIGINT to the group (Ctrl-C in a terminal), SIGTERM to the process (`kill`): once the stage's
    label is printed, and a moment later, so that an isolated child is in its pause by then."""
    if run.signalled_at is not None or run.waits_for not in run.log.read_text(errors="replace"):
        return
    time.sleep(1.0)
    if run.sig == signal.SIGINT:
        os.killpg(run.proc.pid, signal.SIGINT)
    else:
        run.proc.send_signal(run.sig)
    run.signalled_at = time.monotonic()


def _session_members(sid: int) -> list[str]:
    """Processes still alive in the run's session (every child it forked stays in it)."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            left.append(stat[: stat.rindex(")") + 1])
    return left


def _run_all(runs: list[Run], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    try:
        while any(r.proc.poll() is None for r in runs):
            assert time.monotonic() < deadline, [r.name for r in runs if r.proc.poll() is None]
            for run in runs:
                if run.proc.poll() is None:
                    _deliver(run)
            time.sleep(0.1)
    finally:
        for run in runs:
            if run.proc.poll() is None:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait()


def _check(run: Run) -> list[str]:
    if run.sig == signal.SIGKILL:
        return _check_killed(run)
    problems = []
    err = run.log.read_text(errors="replace")
    code, expected = run.proc.returncode, 130 if run.sig == signal.SIGINT else 143
    if run.signalled_at is None:
        problems.append(f"never reached '{run.waits_for}' (exit {code})")
    if code != expected:
        problems.append(f"exit {code}, not {expected}")
    word = "interrupted" if run.sig == signal.SIGINT else "terminated"
    if f"{word}: nothing was written." not in err:
        problems.append(f"no '{word}' line")
    if "Traceback" in err or "internal error" in err:
        problems.append("a traceback or an internal error")
    if run.out_root.exists():
        problems.append(f"left {sorted(str(p) for p in run.out_root.rglob('*')) or 'the output folder'}")
    if any(run.tmpdir.iterdir()):
        problems.append(f"left temporary files {sorted(p.name for p in run.tmpdir.iterdir())}")
    time.sleep(0.2)  # a killed child is reaped by its parent's waitpid before the parent exits
    left = _session_members(run.proc.pid)
    if left:
        problems.append(f"processes still running: {left}")
        os.killpg(run.proc.pid, signal.SIGKILL)
    return [f"{run.name}: {p}\n{err[-600:]}" for p in problems]


def _check_killed(run: Run) -> list[str]:
    """SIGKILL cannot be handled: the output folder it created stays (the next run removes what it
    left), but its children die with it (isolation.die_with_parent)."""
    time.sleep(0.5)
    left = _session_members(run.proc.pid)
    if left:
        os.killpg(run.proc.pid, signal.SIGKILL)
    problems = [f"exit {run.proc.returncode}"] if run.proc.returncode != -signal.SIGKILL else []
    problems += [f"processes still running: {left}"] if left else []
    return [f"{run.name}: {p}" for p in problems]


@pytest.mark.slow
def test_an_interrupt_in_any_stage_leaves_nothing(model_folder, tmp_path):
    """Every stage on both paths (confined .pt2, in-process reference; the write stage, the
    parent's on both, once), Ctrl-C on one path and SIGTERM on the other; and a SIGKILL."""
    cases = []
    for i, case in enumerate(STAGES):
        first, second = (signal.SIGINT, signal.SIGTERM) if i % 2 == 0 else (signal.SIGTERM, signal.SIGINT)
        cases.append((case, "confined", first))
        if case != "write":  # the parent writes on both paths, the confined child long gone
            cases.append((case, "in-process", second))
    # kill -9 of edge-export while the confined child's isolated child runs: both die with it
    cases.append(("parity child", "confined", signal.SIGKILL))
    runs = [_start(model_folder, tmp_path, *c) for c in cases]
    _run_all(runs)
    problems = [p for run in runs for p in _check(run)]
    assert not problems, "\n\n".join(problems)
