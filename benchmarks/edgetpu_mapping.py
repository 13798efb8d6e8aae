"""Predicted Edge TPU mapping of standard CNNs (and a small transformer encoder), before and after the
Edge TPU handling of the exporter. Models built in code (random weights, random BatchNorm statistics).

- "plain PT2E": litert-torch PT2E int8 (per-channel weights) with channels-last I/O, batch 1, no
  Edge TPU rewrites: what a user gets by hand today.
- "--target edgetpu": the edge_export pipeline, `export(model, target="edgetpu")` (int8, NHWC,
  uint8 I/O, the module rewrites and operator reordering); the numbers are the report's own.

Small test models (tests/targets/edgetpu/edgetpu_models.py, 32x32) and the benchmark architectures of
bench_models.py (ResNet-18 and MobileNetV2-style, at --size, default 224).

    .venv/bin/python benchmarks/edgetpu_mapping.py [--size 224] [--small-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]  # testing_models, bench_models


def _cases(size: int, small_only: bool):
    import torch

    from testing_models import mobilenet_v2_like, random_batchnorm_stats, resnet_like, transformer_encoder_like

    torch.manual_seed(0)
    yield "MobileNetV2-style (tests, 32x32)", random_batchnorm_stats(mobilenet_v2_like()), torch.randn(1, 3, 32, 32)
    yield "ResNet-style (tests, 32x32)", random_batchnorm_stats(resnet_like()), torch.randn(1, 3, 32, 32)
    yield "Transformer encoder (tests, 1x16x32)", transformer_encoder_like(), torch.randn(1, 16, 32)
    if small_only:
        return
    from bench_models import build

    for name, label in (("mobilenetv2_like", "MobileNetV2-style (bench, width 0.5)"), ("resnet18", "ResNet-18 (bench)")):
        model, _ = build(name)
        yield f"{label}, {size}x{size}", random_batchnorm_stats(model), torch.randn(1, 3, size, size)


def _plain_row(module, x) -> dict:
    from edgetpu_helpers import export_int8

    from edge_export.targets.edgetpu.checks import check_edgetpu_bytes

    r = check_edgetpu_bytes(export_int8(module, (x,), channels_last=x.dim() == 4))
    return {
        "num_ops": r.num_ops, "num_on_tpu": r.num_on_tpu, "share_on_tpu": r.share_on_tpu,
        "num_segments": r.num_segments, "fully_mapped": r.fully_mapped,
        "first_unmapped": r.first_unmapped.describe() if r.first_unmapped else None,
    }


def _pipeline_row(module, x, tmp: Path) -> dict:
    from edge_export.api import export

    result = export(module, example_inputs=(x,), output=tmp / "model.tflite", target="edgetpu")
    target = result.report["target"]
    m = target["edgetpu"]
    first = m["first_unmapped"]
    return {
        "num_ops": m["num_ops"], "num_on_tpu": m["num_on_tpu"], "share_on_tpu": m["share_on_tpu"],
        "num_segments": m["num_segments"], "fully_mapped": m["fully_mapped"],
        "first_unmapped": (
            f"operator #{first['index']} {first['opcode']}"
            + (f" in module '{first['module_path']}'" if first.get("module_path") else "")
            + f": {first['reason']}"
            if first else None
        ),
        "summary": m.get("summary"),
        "rewrites": target.get("rewrites"),
        "op_counts": result.report.get("flatbuffer", {}).get("op_counts"),
        "exit_code": result.exit_code,
        "quant_backend": (result.report.get("quantization") or {}).get("backend"),
        "compiler": (target.get("compiler") or {}).get("compiled"),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224, help="image size of the bench_models CNNs")
    parser.add_argument("--small-only", action="store_true", help="only the 32x32 test models")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    rows = []
    print("| model | stage | ops | on TPU | share | segments | first unmapped op |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, module, x in _cases(args.size, args.small_only):
            for stage in ("plain PT2E", "--target edgetpu"):
                try:
                    r = _plain_row(module, x) if stage == "plain PT2E" else _pipeline_row(module, x, Path(tmp))
                except Exception as exc:  # one failing case must not hide the others
                    r = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                r.update(model=name, stage=stage)
                rows.append(r)
                if "error" in r:
                    print(f"| {name} | {stage} | failed: {r['error']} | | | | |", flush=True)
                    continue
                print(f"| {name} | {stage} | {r['num_ops']} | {r['num_on_tpu']} | {100 * r['share_on_tpu']:.0f}% | "
                      f"{r['num_segments']} | {r['first_unmapped'] or '-'} |", flush=True)
    for r in rows:
        if r.get("rewrites") is not None:
            print(f"<!-- {r['model']}: rewrites {r['rewrites']}; ops {r['op_counts']} -->")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
