"""How early PT2E's ranges tell its result (issue 21, item 3): the zoo's models calibrated with
PT2E's default (histogram) observer, their quantized graph simulated in PyTorch after 8, 16, 32, 64
and 128 synthetic samples, on the 16 parity samples auto measures with and on the first 4 (what
auto's early look reads after EARLY_LOOK_SAMPLES). One intra-op thread, as the zoo.

    python benchmarks/pt2e_early_look.py --models mobilenet_v2,vit_4l,resnet18

Prints one JSON line per model: {samples: [SQNR on 16, SQNR on 4, seconds of the look, seconds of
calibration so far]}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

LOOKS = (8, 16, 32, 64, 128)


def trajectory(name: str) -> dict[int, list[float]]:
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    import zoo_models
    from edge_export.config import InputSpec, QuantizeMode
    from edge_export.passes.fx.restore_source_functions_pass import restore_source_functions_pass
    from edge_export.quantization import pt2e, selection
    from edge_export.quantization.synthetic_calibration import synthetic_calibration

    model, example = zoo_models.build(name)
    specs = [InputSpec(tuple(e.shape), str(e.dtype).replace("torch.", "")) for e in example]
    calibration = synthetic_calibration(specs, max(LOOKS), seed=1)
    parity = calibration.samples[:16]
    refs = selection.reference_outputs(model, parity)
    exported = torch.export.export(model, tuple(example), strict=False).module()
    restore_source_functions_pass(exported)
    prepared = prepare_pt2e(exported, pt2e._float_only(pt2e.make_pt2e_quantizer(QuantizeMode.INT8)))
    out: dict[int, list[float]] = {}
    start = time.perf_counter()
    with torch.no_grad():
        for index, batch in enumerate(calibration.torch_batches()):
            prepared(*batch)
            if index + 1 in LOOKS:
                look = time.perf_counter()
                converted = pt2e.convert_snapshot(prepared)  # auto's early look, as auto converts it
                on16 = selection.simulated_parity(converted, parity, refs)[0]
                on4 = selection.simulated_parity(converted, parity[:4], refs[:4])[0]
                out[index + 1] = [round(on16, 2), round(on4, 2), round(time.perf_counter() - look, 1), round(look - start, 1)]
    return out


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,vit_4l,resnet18,deit_4l,bert_4l_256,convnext_atto")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.models.split(","):
        print(name, json.dumps(trajectory(name)), flush=True)


if __name__ == "__main__":
    main()
