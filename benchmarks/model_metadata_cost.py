"""The cost of TFLite model metadata (issue 10, item 2): time and bytes of building and attaching it.

    .venv/bin/python benchmarks/model_metadata_cost.py [--models small_cnn mobilenetv2] [--repeats 7]

For each model (``bench_models``, random weights, NHWC I/O, 1000 classes): converts it once (the
convert time is printed for scale, measured in the same run), then builds the metadata (image input
normalization, labels file of 1000 lines, name/version/author) and attaches it ``--repeats`` times:
the median and range of each, the bytes added (metadata flatbuffer, labels zip, alignment padding),
and whether the model with metadata computes bit-identically to the one without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["small_cnn", "mobilenetv2"])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    import numpy as np
    import torch

    from bench_models import build
    from edge_export.api import ExportOptions
    from edge_export.conversion.litert import convert_module, plan_channels_last, wrap_channels_last
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.flatbuffer import align_buffers, misaligned_buffers
    from edge_export.processes.library_output import quiet_libraries
    from edge_export.artifacts.model_metadata import ImageInput, attach_metadata, build_model_metadata
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.validators.output_kinds import KindDecision, KindSource, LabelsFile
    from edge_export.config import OutputKind

    print("| model | .tflite bytes | convert s | build ms (median, range) | attach ms (median, range) | metadata B | labels B | added B | added % | bit-identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        labels = Path(tmp) / "labels.txt"
        labels.write_text("".join(f"class {i}\n" for i in range(1000)))
        for name in args.models:
            module, example = build(name)
            with torch.no_grad():
                classes = module(*example).shape[-1]
            labels.write_text("".join(f"class {i}\n" for i in range(classes)))
            plan = plan_channels_last([4], [2])
            nhwc = (example[0].permute(0, 2, 3, 1).contiguous(),)
            start = time.perf_counter()
            with quiet_libraries():
                model = read_flatbuffer(align_buffers(convert_module(wrap_channels_last(module, plan), nhwc)))
            convert_s = time.perf_counter() - start
            options = ExportOptions.from_keywords(labels=str(labels), mean=(0.5,), std=(0.5,), model_name=name, model_version="1.0", author="bench")
            kinds = [KindDecision(OutputKind.CLASSIFICATION, KindSource.LABELS, LabelsFile(str(labels), classes))]
            build_ms, attach_ms = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                metadata = build_model_metadata(model, options, kinds, ImageInput(0, 3))
                build_ms.append(1000 * (time.perf_counter() - start))
                start = time.perf_counter()
                attached = attach_metadata(model, metadata)
                attach_ms.append(1000 * (time.perf_counter() - start))
            assert misaligned_buffers(attached.data) == []
            feed = [np.random.default_rng(0).standard_normal(nhwc[0].shape).astype(np.float32)]
            same = all(np.array_equal(a, b) for a, b in zip(TFLiteRunner(attached).run(feed), TFLiteRunner(model).run(feed)))
            added = attached.size_bytes - model.size_bytes
            print(
                f"| {name} | {model.size_bytes} | {convert_s:.2f} | {statistics.median(build_ms):.1f} ({min(build_ms):.1f}-{max(build_ms):.1f}) "
                f"| {statistics.median(attach_ms):.1f} ({min(attach_ms):.1f}-{max(attach_ms):.1f}) | {metadata.section.metadata_bytes} "
                f"| {labels.stat().st_size} | {added} | {100 * added / model.size_bytes:.3f} | {'yes' if same else 'NO'} |"
            )


if __name__ == "__main__":
    main()
