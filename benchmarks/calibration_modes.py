"""The flatbuffer backend's calibration: LiteRT's profiler (min/max kept in C++, what the tool uses)
against ai-edge-quantizer's default mode (every tensor copied into Python after each sample).

For each zoo model, one `--quantize int8 --quant-backend flatbuffer` export is run as the zoo runs it
(benchmarks/zoo.py's options), and the float model and calibration samples it calibrates on are
recorded; both modes then calibrate and quantize those, timed, and the quantized bytes are compared.

    PYTHONPATH=. python benchmarks/calibration_modes.py --models resnet18,vit_4l,bert_4l_256

Results: docs/BENCHMARKS.md 23.7.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _recorded_calibration(name: str) -> tuple:
    """(float bytes, signature data) of the model's int8 export. The backend runs in a child process
    (edge_export.processes.isolation), so the recording goes through a file."""
    import pickle

    import edge_export
    from edge_export.quantization import flatbuffer_recipes
    from zoo import job_options
    from zoo_models import MODELS

    calibrate = flatbuffer_recipes._calibrate
    with tempfile.TemporaryDirectory() as folder:
        recording = Path(folder) / "calibration.pickle"

        def record(quantizer, float_model, float_bytes, data, observer):
            recording.write_bytes(pickle.dumps((float_bytes, data)))
            return calibrate(quantizer, float_model, float_bytes, data, observer)

        flatbuffer_recipes._calibrate = record
        try:
            model, example = MODELS[name].build(False)
            edge_export.export(model, example_inputs=example, output=Path(folder) / f"{name}.tflite",
                               **job_options("int8fb", MODELS[name].kind))
        finally:
            flatbuffer_recipes._calibrate = calibrate
        return pickle.loads(recording.read_bytes())  # our own file, written just now


def _default_mode(quantizer, float_model, float_bytes, data, observer):
    from ai_edge_quantizer import calibrator
    from ai_edge_quantizer.utils import qsv_utils

    calib = calibrator.Calibrator(float_bytes, num_threads=2, qsv_update_func=qsv_utils.min_max_update)
    calib.calibrate(data, quantizer._recipe_manager)
    return calib.get_model_qsvs()


def _timed_quantization(float_bytes: bytes, calibration, calibrate) -> tuple[bytes, float]:
    """The quantized bytes with ``calibrate`` as the backend's min/max calibration, and its seconds."""
    from edge_export.options import QuantizeMode
    from edge_export.quantization import flatbuffer_recipes

    seconds: list[float] = []
    kept = flatbuffer_recipes._min_max_ranges

    def timed(*args):
        began = time.perf_counter()
        try:
            return calibrate(*args)
        finally:
            seconds.append(time.perf_counter() - began)

    flatbuffer_recipes._min_max_ranges = timed
    try:
        model = flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode("int8"), calibration)
    finally:
        flatbuffer_recipes._min_max_ranges = kept
    return model, seconds[0]


def measure(name: str) -> dict:
    from edge_export.quantization import flatbuffer_recipes
    from edge_export.quantization.calibration import CalibrationSet

    float_bytes, data = _recorded_calibration(name)
    samples = next(iter(data.values()))
    calibration = CalibrationSet(samples=tuple(tuple(s.values()) for s in samples), source="recorded", real_data=False)
    default, default_s = _timed_quantization(float_bytes, calibration, _default_mode)
    profiled, profiled_s = _timed_quantization(float_bytes, calibration, flatbuffer_recipes._min_max_ranges)
    return {"model": name, "samples": len(samples), "default_s": default_s, "profiler_s": profiled_s,
            "same_bytes": default == profiled, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,vit_4l,bert_4l_256")
    args = parser.parse_args()
    print("| model | samples | default mode s | profiler s | speed-up | same quantized bytes | load |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        row = measure(name)
        print(f"| {name} | {row['samples']} | {row['default_s']:.1f} | {row['profiler_s']:.1f} | "
              f"{row['default_s'] / row['profiler_s']:.1f}x | {'yes' if row['same_bytes'] else '**no**'} | {row['load']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
