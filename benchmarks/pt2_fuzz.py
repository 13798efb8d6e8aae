"""Structure-aware fuzzing of the untrusted-archive path: mutants of a real .pt2 archive (member
names, duplicates, program JSON fields, symbolic expressions, payload configs and sizes, bytes; see
tests/pt2_mutations.py), each run through the real CLI (`edge-export MUTANT -o ... --no-validate`)
in a forked child of a warm process, with a time limit per case.

    .venv/bin/python benchmarks/pt2_fuzz.py [--cases 2000] [--seed 7] [--timeout 30] [--clean ARCHIVE]

A case fails the run when its payload's marker exists afterwards (code ran outside the sandbox),
when it hangs (more than --timeout seconds of CPU in its processes, or ten times that of wall time:
on a shared machine wall time measures the load, not the case), when it exits 4 (an internal error instead of a
clear refusal) or is killed by a signal. Prints one row per mutation kind (exit codes seen) and the
totals; exits 1 on any failure. ``--clean`` mutates an archive built beforehand by
tests/hostile_archives.py's build_clean (the test's, which saves this run a process that imports
torch to build it).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def build_clean(folder: Path) -> Path:
    """In a subprocess: torch ops here would start OpenMP threads that a forked case could not use."""
    code = "import sys; sys.path.insert(0, sys.argv[2]); import hostile_archives as h; from pathlib import Path; print(h.build_clean(Path(sys.argv[1])))"
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    out = subprocess.run([sys.executable, "-c", code, str(folder), tests], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of it and its reaped children)."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    return table


def _descendants(pid: int, table: dict) -> list[int]:
    found, frontier = [pid], [pid]
    while frontier:
        frontier = [p for p, (parent, _) in table.items() if parent in frontier]
        found += frontier
    return found


def _tree_cpu_seconds(pid: int) -> float:
    table = _process_table()
    return sum(table[p][1] for p in _descendants(pid, table) if p in table)


def _kill_tree(pid: int) -> None:
    for p in reversed(_descendants(pid, _process_table())):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_case(archive: Path, out_dir: Path, timeout: float) -> tuple[int | str, float]:
    """The CLI's exit code for one archive (or 'hang' / 'signal N'), and the seconds it took."""
    from edge_export.cli import main

    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        code = 70
        try:
            main([str(archive), "-o", str(out_dir / "m.tflite"), "--no-validate"])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # noqa: BLE001 - an escape from main is itself a finding
            code = 99
        os._exit(code)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        elapsed = time.monotonic() - start
        if done:
            break
        # A hang is --timeout seconds of CPU in the case's processes (a runaway computation), or ten
        # times that of wall time (a deadlock): wall time alone measures the machine's load.
        if elapsed > 10 * timeout or (elapsed > timeout and _tree_cpu_seconds(pid) > timeout):
            _kill_tree(pid)
            os.waitpid(pid, 0)
            return "hang", elapsed
        time.sleep(0.05)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}", elapsed
    return os.WEXITSTATUS(status), elapsed


def fuzz(cases: int, seed: int, timeout: float, work: Path, progress: bool = True, clean: Path | None = None) -> dict:
    # Warm the imports every case would otherwise repeat (about 10 s of the 12 an accepted case
    # took): forked cases inherit them. No torch op runs here, so no OpenMP pool is forked.
    import ai_edge_litert.interpreter  # noqa: F401
    import litert_torch  # noqa: F401
    import torch  # noqa: F401

    import edge_export.api  # noqa: F401
    import pt2_mutations as mutations

    from hostile_archives import members

    entries = members(clean or build_clean(work))
    rng = random.Random(seed)
    kinds = sorted(mutations.MUTATIONS)
    table: dict[str, collections.Counter] = {k: collections.Counter() for k in kinds}
    failures, times = [], []
    for i in range(cases):
        kind = kinds[i % len(kinds)]
        marker = work / f"MARKER_{i}"
        mutant = mutations.MUTATIONS[kind](entries, rng, marker)
        if rng.random() < 0.3:  # a second mutation of another kind
            mutant = mutations.MUTATIONS[rng.choice(kinds)](mutant, rng, marker)
        archive = mutations.write_case(mutant, work / f"case_{i}.pt2", rng)
        out_dir = work / f"out_{i}"
        out_dir.mkdir()
        code, seconds = run_case(archive, out_dir, timeout)
        times.append(seconds)
        table[kind][code] += 1
        ran = marker.exists() or any(work.glob("MARKER_*"))
        if ran or code in ("hang", 4, 99, 70) or str(code).startswith("signal"):
            failures.append((i, kind, code, "payload ran" if ran else ""))
            print(f"  failure: case {i} ({kind}): {code}{' payload ran' if ran else ''} after {seconds:.1f} s", flush=True)
            keep = work / "failures"
            keep.mkdir(exist_ok=True)
            archive.rename(keep / archive.name)
        else:
            archive.unlink()
        for p in out_dir.iterdir():
            p.unlink()
        out_dir.rmdir()
        if progress and (i + 1) % 50 == 0:
            print(f"  {i + 1}/{cases} cases, {len(failures)} failures, median {sorted(times)[len(times) // 2]:.2f} s", flush=True)
    return {"table": table, "failures": failures, "times": times}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--clean", type=Path, default=None, help="the archive to mutate (default: build one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pt2-fuzz-") as tmp:
        start = time.monotonic()
        result = fuzz(args.cases, args.seed, args.timeout, Path(tmp), clean=args.clean)
        wall = time.monotonic() - start
        codes = sorted({c for counter in result["table"].values() for c in counter}, key=str)
        print("| mutation | " + " | ".join(f"exit {c}" for c in codes) + " |")
        print("|---|" + "---|" * len(codes))
        for kind, counter in result["table"].items():
            print(f"| {kind} | " + " | ".join(str(counter.get(c, 0)) for c in codes) + " |")
        times = sorted(result["times"])
        print(f"\n{args.cases} cases in {wall:.0f} s; per case median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s; "
              f"failures: {len(result['failures'])}")
        for failure in result["failures"][:20]:
            print("  failure:", failure)
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
