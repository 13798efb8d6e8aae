"""Child process of the calibration-folder fuzz test and benchmarks/calibration_fuzz.py: each folder
named on stdin (one a line) is read with ``load_calibration_data`` for a 1x3x8x8 image input.

It runs in its own process, under an address-space limit (``--memory-mib`` beyond what it has
mapped at start), so that a huge allocation is a MemoryError reported here and a crash or a hang is
seen by the parent, not the test session. Protocol, flushed: ``START i`` before folder i,
``DONE i <outcome> <seconds>`` after, where the outcome is ``ok`` (samples read), ``exit2`` (an
edge-export error with exit code 2) or ``bug:<what>`` (anything else, which the CLI would show as a
traceback and exit 4). The last line is ``PEAK <MiB>``, the largest resident size it reached.

With ``--cli MODEL``, each folder goes through the real CLI instead (``edge-export MODEL --quantize
int8 --calibration-data FOLDER``, in this process): the outcome is its exit code, ``traceback`` or
``partial-output`` (a failed run that left a file).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time


def limit_memory(extra_mib: int) -> None:
    with open("/proc/self/statm", encoding="ascii") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (extra_mib << 20), resource.RLIM_INFINITY))


def check_folder(folder: str) -> str:
    from edge_export.config import InputSpec
    from edge_export.errors import EdgeExportError
    from edge_export.quantization import load_calibration_data

    try:
        data = load_calibration_data(folder, [InputSpec((1, 3, 8, 8), name="x")])
    except EdgeExportError as exc:
        return "exit2" if exc.exit_code == 2 else f"bug:exit{exc.exit_code}"
    except BaseException as exc:  # noqa: BLE001 - what would reach the CLI as a bug
        return f"bug:{type(exc).__name__}"
    return "ok" if len(data) and all(s[0].shape == (1, 3, 8, 8) for s in data.samples) else "bug:bad-samples"


def check_folder_cli(folder: str, model: str) -> str:
    from edge_export.cli import main

    out = os.path.join(os.path.dirname(folder), "out-" + os.path.basename(folder))
    log_fd = os.open(os.path.join(os.path.dirname(folder), "cli-" + os.path.basename(folder) + ".log"), os.O_RDWR | os.O_CREAT)
    saved = os.dup(2)
    os.dup2(log_fd, 2)
    try:
        main([model, "-o", os.path.join(out, "m.tflite"), "--quantize", "int8", "--quant-backend", "flatbuffer",
              "--no-latency", "--samples", "2", "--calibration-data", folder])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    os.lseek(log_fd, 0, os.SEEK_SET)
    text = os.read(log_fd, 1 << 20).decode("utf-8", "replace")
    os.close(log_fd)
    if "Traceback" in text or code == 4:
        return "traceback"
    if code not in (0, 1) and os.path.exists(out):
        return "partial-output"
    return str(code)


def run_worker(folders: list[str], worker_args: tuple[str, ...] = (), timeout: float = 300) -> tuple[dict, list[str], int]:
    """Feed the folders to worker processes (a new one after a crash, which names its culprit):
    ({folder: (outcome, seconds)}, failures, the workers' largest resident size in MiB). A hang is
    a TimeoutExpired."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(here)), os.path.dirname(here), here])}
    results: dict = {}
    failures: list[str] = []
    todo, peak = list(folders), 0
    while todo:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), *worker_args], input="\n".join(todo) + "\n",
                              capture_output=True, text=True, timeout=timeout, env=env)
        last = -1
        for line in proc.stdout.splitlines():
            parts = line.split()
            if parts[0] == "START":
                last = int(parts[1])
            elif parts[0] == "DONE":
                results[todo[int(parts[1])]] = (parts[2], float(parts[3]))
            elif parts[0] == "PEAK":
                peak = max(peak, int(parts[1]))
        if proc.returncode == 0:
            break
        culprit = todo[last] if last >= 0 else "(before the first folder)"
        failures.append(f"{culprit}: exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
        todo = todo[last + 1 :] if last >= 0 else []
    return results, failures, peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-mib", type=int, default=1536)
    parser.add_argument("--cli", metavar="MODEL")
    args = parser.parse_args()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the CLI's summary goes nowhere
    if not args.cli:
        limit_memory(args.memory_mib)  # the CLI run imports torch, whose mappings no fixed limit fits
    for i, line in enumerate(sys.stdin):
        print(f"START {i}", file=protocol, flush=True)
        start = time.perf_counter()
        outcome = check_folder_cli(line.strip(), args.cli) if args.cli else check_folder(line.strip())
        print(f"DONE {i} {outcome} {time.perf_counter() - start:.3f}", file=protocol, flush=True)
    print(f"PEAK {peak_resident_mib()}", file=protocol, flush=True)


def peak_resident_mib() -> int:
    """This process's own largest resident size: /proc's VmHWM belongs to the memory of this
    program. getrusage's ru_maxrss does not: it keeps the peak of the process it was forked from
    (a pytest worker holding torch read 3.2 GB here before this worker read a file)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:  # no /proc (macOS)
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


if __name__ == "__main__":
    main()
