"""The cost of issue 10's two checks: the GPU delegate prediction (``--target gpu``) and parity through
CompiledModel as well as the Interpreter (``--runtime both``), on models built in code.

    .venv/bin/python benchmarks/gpu_and_runtimes.py [--rounds 4]

Prints the in-process time of the prediction and of the analyzer cross-check on the MobileNetV2-like
and transformer test models, each runtime's load and run time on the small CNN, and the stage times
of interleaved small-CNN exports with ``--runtime interpreter``, ``--runtime both`` and ``--target gpu``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _convert(module, example):
    import litert_torch

    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.processes.library_output import quiet_libraries

    with quiet_libraries():
        return read_flatbuffer(litert_torch.convert(module, example).model_content())


def _stages(tflite: Path) -> dict[str, float]:
    report = json.loads(Path(str(tflite.with_suffix("")) + ".report.json").read_text())
    return {s["name"]: s["seconds"] for s in report["stages"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    import numpy as np
    import torch

    import edge_export
    from edge_export.runtime.interpreter import CompiledModelRunner, TFLiteRunner
    from edge_export.targets.gpu.target import check_gpu, run_gpu_analyzer
    from testing_models import mobilenet_v2_like, small_cnn, transformer_encoder_like

    for name, module, example in (
        ("MobileNetV2-like 32x32", mobilenet_v2_like(), (torch.randn(1, 3, 32, 32),)),
        ("transformer encoder", transformer_encoder_like(), (torch.randn(1, 16, 32),)),
    ):
        model = _convert(module, example)
        start = time.perf_counter()
        check_gpu(model)
        predicted = time.perf_counter()
        run_gpu_analyzer(model)
        analyzed = time.perf_counter()
        print(f"{name}: {len(model.operators)} ops, prediction {1e3 * (predicted - start):.1f} ms, analyzer {1e3 * (analyzed - predicted):.0f} ms")

    cnn = _convert(small_cnn(), (torch.randn(1, 3, 16, 16),))
    samples = [np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32) for i in range(8)]
    for _ in range(3):
        for runner_class in (TFLiteRunner, CompiledModelRunner):
            start = time.perf_counter()
            runner = runner_class(cnn)
            loaded = time.perf_counter()
            for x in samples:
                runner.run([x])
            ran = time.perf_counter()
            print(f"{runner_class.__name__}: load {1e3 * (loaded - start):.1f} ms, 8 samples {1e3 * (ran - loaded):.1f} ms")

    example = (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),)
    times: dict[str, list[float]] = {"validate, interpreter": [], "validate, both": [], "target, gpu": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for runtime in ("interpreter", "both"):
                out = Path(tmp) / f"cnn_{runtime}_{r}.tflite"
                edge_export.export(small_cnn(), example_inputs=example, output=out, runtime=runtime)
                times[f"validate, {runtime}"].append(_stages(out)["validate"])
            out = Path(tmp) / f"cnn_gpu_{r}.tflite"
            edge_export.export(small_cnn(), example_inputs=example, output=out, target="gpu")
            times["target, gpu"].append(_stages(out)["target"])
    for label, values in times.items():
        print(f"{label}: median {1e3 * statistics.median(values):.0f} ms ({', '.join(f'{1e3 * v:.0f}' for v in values)})")


if __name__ == "__main__":
    main()
