"""What running native stages in a child process costs: the same exports through the Python API with
``run_isolated`` as shipped and with it replaced by a direct call, interleaved, in one process.

    .venv/bin/python benchmarks/isolation_overhead.py [--repeats 3]

Prints the median wall time of each export both ways and the difference (issue 13, item 7).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _direct(fn, *args, stage, backend, hint=None, **kwargs):
    return fn(*args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    import edge_export.isolation as isolation
    import edge_export.quantization as quantization
    from edge_export import export
    from edge_export.api import ExportOptions
    from model_zoo import small_cnn

    isolated = isolation.run_isolated
    module = small_cnn()
    example = (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),)
    cases = {"fp32": ExportOptions(samples=8), "int8 (auto: both backends)": ExportOptions(quantize="int8", samples=8)}
    times: dict[tuple[str, str], list[float]] = {}
    digests: dict[tuple[str, str], set] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats + 1):  # the first round warms caches and is not counted
            for how, runner in (("isolated", isolated), ("in-process", _direct)):
                isolation.run_isolated = quantization.run_isolated = runner
                for name, options in cases.items():
                    start = time.perf_counter()
                    result = export(module, example_inputs=example, output=Path(tmp) / "m.tflite", options=options)
                    if repeat:
                        times.setdefault((name, how), []).append(time.perf_counter() - start)
                    digests.setdefault((name, how), set()).add(Path(result.tflite_path).read_bytes())
    isolation.run_isolated = quantization.run_isolated = isolated
    for name in cases:
        a, b = (statistics.median(times[(name, h)]) for h in ("isolated", "in-process"))
        same = digests[(name, "isolated")] == digests[(name, "in-process")] and len(digests[(name, "isolated")]) == 1
        print(f"{name}: isolated {a:.2f} s, in-process {b:.2f} s, overhead {a - b:+.2f} s ({(a - b) / b:+.1%}); "
              f"identical bytes: {same}")


if __name__ == "__main__":
    main()
