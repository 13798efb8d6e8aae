"""The int8 size target: the file with --strip-names against its per-channel payload.

The payload is what per-channel int8 cannot do without: the int8 weights (one byte each), the int32
biases (four bytes each) and their float32 scales (one per weight channel, and the bias's own
vector, which LiteRT requires to be the input scale times the weight's, so it cannot be shared). Everything else in the file
(zero points, stored as int64 by the schema; activation scales; operators, tensors' tables, the
signature, buffer alignment) is overhead. The issue's target: file / payload <= 1.03 on every
benchmark model.

Exports each benchmark model at int8 through the API with the flatbuffer backend (the file's
size does not depend on the backend's calibration, and on the input size only by tens of bytes:
which shapes are equal and shared; so this uses 8 calibration samples, 64x64 images by default and
no parity check to stay quick) and --strip-names.

Then it accounts for every byte of the file by category (``flatbuffer.byte_accounting``:
each byte belongs to exactly one table, vector or string, or is alignment padding) and prints the
schema's floor beside it (``schema_floor``: the fewest bytes any file holding the same model can
take and still load in LiteRT and TFLite Micro), so the reader sees which overhead a writer could
still cut and which the schema imposes.

    python benchmarks/int8_payload.py [--models small_cnn,resnet18] [--size 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from edge_export.flatbuffer import PAYLOAD_CATEGORIES  # noqa: E402

ALL_MODELS = ("small_cnn", "mobilenetv2_like", "transformer", "resnet18", "mobilenetv2")


def payload(data: bytes) -> dict:
    """Bytes of int8 weights, int32 biases and their float32 scales in the model ``data``."""
    from edge_export.flatbuffer import payload_bytes
    from edge_export.flatbuffer import read_model

    parts = payload_bytes(read_model(data))
    return {"weights": parts["int8 weights"], "biases": parts["int32 biases"], "scales": parts["weight and bias scales"], "total": sum(parts.values())}


def measure(name: str, size: int) -> dict:
    from bench_models import ARCHITECTURES, build

    from edge_export import export

    shape = ARCHITECTURES[name][1]
    is_image = len(shape) == 4
    if is_image:
        shape = (shape[0], shape[1], size, size)
    model, example = build(name, shape)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}.tflite"
        export(
            model, example_inputs=example, output=out, quantize="int8", quant_backend="flatbuffer",
            calibration_samples=8, validate=False, strip_names=True, channels_last=is_image,
        )
        data = out.read_bytes()
    from edge_export.flatbuffer import byte_accounting, schema_floor

    parts = payload(data)
    floor = schema_floor(data)
    return {
        "model": name, "file_bytes": len(data), "payload": parts, "ratio": len(data) / parts["total"],
        "floor": floor, "floor_ratio": floor["total"] / parts["total"], "accounting": byte_accounting(data),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None)
    opts = parser.parse_args(argv)
    rows = [measure(m, opts.size) for m in opts.models.split(",") if m]
    print("| model | file (--strip-names) | int8 weights | int32 biases | float32 scales | payload | file / payload | schema floor | floor / payload |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p = r["payload"]
        print(
            f"| {r['model']} | {r['file_bytes']:,} | {p['weights']:,} | {p['biases']:,} | {p['scales']:,} | {p['total']:,} "
            f"| {r['ratio']:.4f} | {r['floor']['total']:,} | {r['floor_ratio']:.4f} |"
        )
    print()
    print("Bytes over the payload, by category: in the file / in the schema's floor.")
    print()
    categories = sorted(
        {k for r in rows for k in (*r["accounting"], *r["floor"]) if k not in (*PAYLOAD_CATEGORIES, "total")},
        key=lambda k: -sum(r["accounting"].get(k, 0) for r in rows),
    )
    print("| category | " + " | ".join(r["model"] for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for k in categories:
        cells = [f"{r['accounting'].get(k, 0):,} / {r['floor'].get(k, 0):,}" for r in rows]
        print(f"| {k} | " + " | ".join(cells) + " |")
    over = [r["file_bytes"] - r["payload"]["total"] for r in rows]
    floor_over = [r["floor"]["total"] - r["payload"]["total"] for r in rows]
    print("| **total over the payload** | " + " | ".join(f"**{a:,} / {b:,}**" for a, b in zip(over, floor_over)) + " |")
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
