"""The cost of each step of the Android path (issue 10), on models built in code.

    .venv/bin/python benchmarks/android_steps.py [--rounds 3]

For the small CNN (16x16) and the MobileNetV2-like model (32x32) it prints:

- naming the signature from the model: the rename pass's time on the converted model and the bytes
  it adds to the file (against the converter's ``args_0``/``output_0``);
- interleaved exports (``--rounds`` of each, alternately): plain; ``--emit-test-vectors`` (the
  in-process time to build and serialize the vectors, the ``.npz`` size, the export's wall time);
  ``--runtime both`` (the validate stage against plain's); ``--target gpu`` (the target stage);
- ``validate --test-vectors`` against ``validate --reference`` on the same model (wall time of the API
  call, interleaved).

Prints the load average before and after: on a shared machine read the ratios of interleaved runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _stages(tflite: Path) -> dict[str, float]:
    report = json.loads(Path(str(tflite.with_suffix("")) + ".report.json").read_text())
    return {s["name"]: s["seconds"] for s in report["stages"]}


def _median_ms(values: list[float]) -> str:
    return f"median {1e3 * statistics.median(values):.0f} ms ({', '.join(f'{1e3 * v:.0f}' for v in values)})"


def _naming_cost(module, example) -> str:
    import litert_torch

    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.flatbuffer import align_buffers
    from edge_export.processes.library_output import quiet_libraries
    from edge_export.passes.flatbuffer import (
        rename_signature_pass,
        run_flatbuffer_passes,
    )

    with quiet_libraries():
        fb = read_flatbuffer(align_buffers(litert_torch.convert(module, example).model_content()))
    # names of the kind forward() gives (the test models take one image and return one tensor)
    inputs = ["pixel_values"] + [f"pixel_values_{i}" for i in range(1, len(fb.input_names))]
    outputs = ["logits"] + [f"logits_{i}" for i in range(1, len(fb.output_names))]
    rename = functools.partial(rename_signature_pass, input_names=inputs, output_names=outputs, signature_key="serving_default")
    times = []
    for _ in range(5):
        start = time.perf_counter()
        named = run_flatbuffer_passes(fb, [rename]).model
        times.append(time.perf_counter() - start)
    return (
        f"{fb.input_names}->{named.input_names}, {fb.output_names}->{named.output_names}: "
        f"{named.size_bytes - fb.size_bytes:+d} bytes ({fb.size_bytes} -> {named.size_bytes}), rename pass {_median_ms(times)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    import edge_export
    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.artifacts.testdata import build_reference_vectors, serialize_vectors
    from testing_models import mobilenet_v2_like, small_cnn

    print(f"load average before: {os.getloadavg()}")
    executable = Path(sys.executable).with_name("edge-export")
    cli = [str(executable)] if executable.exists() else [sys.executable, "-m", "edge_export.cli"]
    models = (
        ("small CNN 16x16", small_cnn, (1, 3, 16, 16)),
        ("MobileNetV2-like 32x32", mobilenet_v2_like, (1, 3, 32, 32)),
    )
    for name, make, shape in models:
        example = (torch.randn(*shape, generator=torch.Generator().manual_seed(0)),)
        print(f"== {name}")
        print(f"naming from the model: {_naming_cost(make(), example)}")
        wall: dict[str, list[float]] = {k: [] for k in ("plain", "vectors", "both", "gpu")}
        validate_stage: dict[str, list[float]] = {"plain": [], "both": []}
        gpu_stage: list[float] = []
        build_times: list[float] = []
        sizes: dict[str, int] = {}
        validate_wall: dict[str, list[float]] = {"reference": [], "test-vectors": []}
        cli_wall: dict[str, list[float]] = {"reference": [], "test-vectors": []}
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "model.pt2"
            torch.export.save(torch.export.export(make(), example), source)
            for r in range(args.rounds):
                for label, options in (
                    ("plain", {}),
                    ("vectors", {"emit_test_vectors": True}),
                    ("both", {"runtime": "both"}),
                    ("gpu", {"target": "gpu"}),
                ):
                    out = Path(tmp) / f"{label}_{r}.tflite"
                    start = time.perf_counter()
                    result = edge_export.export(source, output=out, **options)
                    wall[label].append(time.perf_counter() - start)
                    assert result.exit_code == 0, (label, result.verdict)
                    stages = _stages(out)
                    if label in validate_stage:
                        validate_stage[label].append(stages["validate"])
                    if label == "gpu":
                        gpu_stage.append(stages["target"])
                        sizes["gpu report.json"] = out.with_suffix(".report.json").stat().st_size
                    if label == "both":
                        sizes["both report.json"] = out.with_suffix(".report.json").stat().st_size
                    if label == "plain":
                        sizes["plain report.json"] = out.with_suffix(".report.json").stat().st_size
                        sizes["plain report.md"] = out.with_suffix(".report.md").stat().st_size
                        app = json.dumps(json.loads(out.with_suffix(".report.json").read_text())["app"], indent=2)
                        sizes["app section in report.json (indented)"] = len(app)
                        sizes["tflite"] = out.stat().st_size
                    if label == "vectors":
                        npz = Path(tmp) / f"{label}_{r}.testdata.npz"
                        sizes["testdata.npz"] = npz.stat().st_size
                        # the step alone, in process: build from 8 parity samples and serialize
                        import numpy as np

                        fb = load_flatbuffer(out)
                        feeds = [[np.random.default_rng(s).standard_normal(shape).astype(np.float32)] for s in range(8)]
                        refs = [[np.zeros(t.shape, np.float32) for t in fb.output_tensors] for _ in range(8)]
                        start = time.perf_counter()
                        serialize_vectors(build_reference_vectors(
                            fb, feeds, refs, result.run_report.validation, channels_last_inputs=(), channels_last_outputs=(),
                            count=4, model_class="bench", tool_version="bench",
                        ))
                        build_times.append(time.perf_counter() - start)
                vectors_model = Path(tmp) / f"vectors_{r}.tflite"
                for label, kwargs in (
                    ("reference", {"reference": source, "report_prefix": Path(tmp) / f"vr{r}"}),
                    ("test-vectors", {"test_vectors": Path(tmp) / f"vectors_{r}.testdata.npz", "report_prefix": Path(tmp) / f"vt{r}"}),
                ):
                    start = time.perf_counter()
                    assert edge_export.validate(vectors_model, **kwargs).exit_code == 0
                    validate_wall[label].append(time.perf_counter() - start)
                # what a CI job pays: a fresh `edge-export validate` process (no torch with --test-vectors)
                for label, check in (("reference", ["--reference", str(source)]),
                                     ("test-vectors", ["--test-vectors", str(Path(tmp) / f"vectors_{r}.testdata.npz")])):
                    start = time.perf_counter()
                    subprocess.run([*cli, "validate", str(vectors_model), *check, "--report", str(Path(tmp) / f"cli_{label}_{r}"), "--quiet"],
                                   check=True, capture_output=True)
                    cli_wall[label].append(time.perf_counter() - start)
        for label, values in wall.items():
            print(f"export wall, {label}: {_median_ms(values)}")
        print(f"validate stage, interpreter: {_median_ms(validate_stage['plain'])}; both: {_median_ms(validate_stage['both'])}")
        print(f"target stage, gpu: {_median_ms(gpu_stage)}")
        print(f"test vectors, build + serialize (4 of 8 samples): {_median_ms(build_times)}")
        for label, values in validate_wall.items():
            print(f"validate --{label} (in process): {_median_ms(values)}")
        for label, values in cli_wall.items():
            print(f"edge-export validate --{label} (fresh process): {_median_ms(values)}")
        print(f"sizes: {sizes}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
