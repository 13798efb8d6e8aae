"""What running native stages in a child process costs: the same exports through the Python API with
``run_isolated`` as shipped and with it replaced by a direct call, interleaved, in one process.

    .venv/bin/python benchmarks/isolation_overhead.py [--repeats 4]

Prints, per export, the median wall time both ways, and the time spent inside the isolated stages
both ways (the direct measure of the cost: fork, pickling through the pipe, child exit), with the
number of isolated stages. End-to-end medians move by +-10% between runs on this 2-CPU machine; the
stage sums do not (issue 13, item 7).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testing_models


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()

    import torch

    import edge_export.processes.isolation as isolation
    import edge_export.quantization.candidates as candidates
    from edge_export import export
    from edge_export.api import ExportOptions
    from testing_models import small_cnn

    isolated = isolation.run_isolated
    stage_seconds: list[float] = []

    def timed(direct: bool):
        def run(fn, *a, stage, backend, hint=None, preload=(), **kw):
            start = time.perf_counter()
            try:
                return fn(*a, **kw) if direct else isolated(fn, *a, stage=stage, backend=backend, preload=preload, **kw)
            finally:
                stage_seconds.append(time.perf_counter() - start)

        return run

    module = small_cnn()
    example = (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),)
    cases = {"fp32": ExportOptions.from_keywords(samples=8), "int8 (auto: both backends)": ExportOptions.from_keywords(quantize="int8", samples=8)}
    walls: dict[tuple[str, str], list[float]] = {}
    stages: dict[tuple[str, str], list[float]] = {}
    counts: dict[str, int] = {}
    digests: dict[tuple[str, str], set] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats + 1):  # the first round warms caches and is not counted
            for how in ("isolated", "in-process"):
                isolation.run_isolated = candidates.run_isolated = timed(direct=how == "in-process")
                for name, options in cases.items():
                    stage_seconds.clear()
                    start = time.perf_counter()
                    result = export(module, example_inputs=example, output=Path(tmp) / "m.tflite", options=options)
                    if repeat:
                        walls.setdefault((name, how), []).append(time.perf_counter() - start)
                        stages.setdefault((name, how), []).append(sum(stage_seconds))
                        counts[name] = len(stage_seconds)
                    digests.setdefault((name, how), set()).add(Path(result.tflite_path).read_bytes())
    isolation.run_isolated = candidates.run_isolated = isolated
    for name in cases:
        a, b = (statistics.median(walls[(name, h)]) for h in ("isolated", "in-process"))
        sa, sb = (statistics.median(stages[(name, h)]) for h in ("isolated", "in-process"))
        same = digests[(name, "isolated")] == digests[(name, "in-process")] and len(digests[(name, "isolated")]) == 1
        print(
            f"{name}: wall isolated {a:.2f} s, in-process {b:.2f} s; {counts[name]} isolated stages took "
            f"{sa * 1000:.0f} ms isolated vs {sb * 1000:.0f} ms in-process (+{(sa - sb) * 1000:.0f} ms, "
            f"{(sa - sb) / b:+.1%} of the export); identical bytes: {same}"
        )


if __name__ == "__main__":
    main()
