"""Predicted Edge TPU mapping of standard CNNs (and a small transformer encoder), before and after the
Edge TPU rewrites. PT2E int8, channels-last I/O, batch 1; models built in code (random weights).

    .venv/bin/python benchmarks/edgetpu_mapping.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "edgetpu")]


def main() -> None:
    import torch

    from conftest import export_int8
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.targets.edgetpu import check_edgetpu_bytes
    from edge_export.targets.edgetpu_rewrites import prepare_module_for_edgetpu, reorder_for_edgetpu
    from edgetpu_models import mobilenet_v2_like, random_batchnorm_stats, resnet_like, transformer_encoder_like

    cases = [
        ("MobileNetV2-style", random_batchnorm_stats(mobilenet_v2_like()), torch.randn(1, 3, 32, 32)),
        ("ResNet-style", random_batchnorm_stats(resnet_like()), torch.randn(1, 3, 32, 32)),
        ("Transformer encoder", transformer_encoder_like(), torch.randn(1, 16, 32)),
    ]
    print("| model | stage | ops | on TPU | share | segments | first unmapped op |")
    print("|---|---|---|---|---|---|---|")
    for name, module, x in cases:
        plain = export_int8(module, (x,))
        prep = prepare_module_for_edgetpu(module, (x,))
        fixed, _ = reorder_for_edgetpu(export_int8(prep.module, (x,)))
        for stage, data in (("plain PT2E", plain), ("--target edgetpu", fixed)):
            r = check_edgetpu_bytes(data)
            cut = r.first_unmapped.describe() if r.first_unmapped else "-"
            print(f"| {name} | {stage} | {r.num_ops} | {r.num_on_tpu} | {100 * r.share_on_tpu:.0f}% | {r.num_segments} | {cut} |")
        print(f"<!-- {name} rewrites: {[f'{w.kind}:{w.module_path}' for w in prep.rewrites]}; "
              f"ops after: {read_flatbuffer(fixed).op_counts} -->")


if __name__ == "__main__":
    main()
