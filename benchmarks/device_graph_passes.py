"""What the device-graph passes (issue 24, item 2) cost and change, on models built in code.

    PYTHONPATH=. .venv/bin/python benchmarks/device_graph_passes.py

For each model: the time of the extra torch.export the FX passes need
(``passes/fx/pipeline.prepare_graph_for_litert``) against the conversion's own time
(``conversion.convert_module``), the rewrites made, and the operators, BROADCAST_TO/SELECT_V2 count
and predicted GPU partitions of the converted model before and after the flatbuffer passes
(``passes/flatbuffer/device_graph.simplify_device_graph``). Prints the load average: on a shared
machine read the ratios.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # testing_models


def _vit():
    from testing_models import hf_vit_encoder

    return hf_vit_encoder(layers=4, image_size=224), (torch.randn(1, 3, 224, 224),)


def _efficientnet_head():
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 256, 3, padding=1)
            self.pooler = torch.nn.AvgPool2d(2560, ceil_mode=True)

        def forward(self, x):
            return self.pooler(self.conv(x)).flatten(1)

    return Head().eval(), (torch.randn(1, 3, 7, 7),)


def _models():
    from bench_models import build

    yield "resnet18", build("resnet18")
    yield "vit-4x192", _vit()
    yield "efficientnet-head", _efficientnet_head()


def _summary(model) -> str:
    from edge_export.targets.gpu.target import check_gpu

    gpu = check_gpu(model)
    counts = model.op_counts
    return (f"{model.num_operators} ops, BROADCAST_TO {counts.get('BROADCAST_TO', 0)}, SELECT_V2 {counts.get('SELECT_V2', 0)}, "
            f"{gpu.num_partitions} GPU partition(s)")


def main() -> None:
    from edge_export.conversion.litert import convert_module
    from edge_export.errors import EdgeExportError
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.flatbuffer import align_buffers
    from edge_export.passes.flatbuffer.device_graph import simplify_device_graph
    from edge_export.passes.fx.pipeline import prepare_graph_for_litert

    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for name, (module, example) in _models():
        start = time.perf_counter()
        graph = prepare_graph_for_litert(module, example)
        traced = time.perf_counter() - start
        print(f"{name}: extra trace {traced:.2f} s; rewrites: {[r.kind for r in graph.rewrites] or 'none'}")
        for label, candidate in (("as written", module), ("after the FX passes", graph.module)):
            if label == "after the FX passes" and candidate is module:
                continue
            start = time.perf_counter()
            try:
                model = read_flatbuffer(align_buffers(convert_module(candidate, example)))
            except EdgeExportError as exc:
                print(f"  convert {label}: {time.perf_counter() - start:.2f} s, {type(exc).__name__}: {exc.message[:160]}")
                continue
            print(f"  convert {label}: {time.perf_counter() - start:.2f} s; {_summary(model)}")
            print(f"    after the flatbuffer passes: {_summary(simplify_device_graph(model))}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
