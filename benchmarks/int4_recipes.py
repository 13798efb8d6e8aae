"""Which int4 recipe for `--quantize int4`: ai-edge-quantizer's int4 variants compared on size and SQNR.

Converts each benchmark model to fp32 (litert-torch), applies each recipe with ai-edge-quantizer
directly, runs the result in LiteRT on 4 seeded random inputs and reports the size over fp32 and the
SQNR of the output vs PyTorch fp32. Variants: dynamic int8 (the reference), dynamic int4
channelwise (what `--quantize int4` uses), weight-only int4 channelwise, dynamic and weight-only
int4 32-blockwise, and dynamic int4 / int8 with the MSE and OCTAV weight-range algorithms.

    python benchmarks/int4_recipes.py [--models small_cnn,transformer,mobilenetv2_like] [--size 64]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _recipes() -> dict:
    from ai_edge_quantizer import qtyping, recipe, recipe_manager

    def blockwise(kind: str):
        manager = recipe_manager.RecipeManager()
        add = manager.add_dynamic_config if kind == "dynamic" else manager.add_weight_only_config
        add(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED, num_bits=4,
            granularity=qtyping.QuantGranularity.BLOCKWISE_32)
        return manager.get_quantization_recipe()

    algorithm = recipe.AlgorithmName
    return {
        "dynamic int8 (dynamic-int8)": recipe.dynamic_wi8_afp32(),
        "dynamic int4 channelwise (int4)": recipe.dynamic_wi4_afp32(),
        "weight-only int4 channelwise": recipe.weight_only_wi4_afp32(),
        "dynamic int4 blockwise 32": blockwise("dynamic"),
        "weight-only int4 blockwise 32": blockwise("weight_only"),
        "dynamic int4 channelwise, MSE": recipe.dynamic_wi4_afp32(algorithm.MSE),
        "dynamic int4 channelwise, OCTAV": recipe.dynamic_wi4_afp32(algorithm.OCTAV),
        "dynamic int8, MSE": recipe.dynamic_wi8_afp32(algorithm.MSE),
        "dynamic int8, OCTAV": recipe.dynamic_wi8_afp32(algorithm.OCTAV),
    }


def measure(name: str, size: int) -> list[dict]:
    import torch
    from ai_edge_quantizer import quantizer
    from bench_models import ARCHITECTURES, build

    from edge_export.conversion.litert import convert_module
    from edge_export.processes.library_output import quiet_libraries
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.validators.metrics import sqnr_db

    shape = ARCHITECTURES[name][1]
    if len(shape) == 4:
        shape = (shape[0], shape[1], size, size)
    model, example = build(name, shape)
    float_bytes = convert_module(model, example)
    xs = [np.random.default_rng(i).standard_normal(shape).astype(np.float32) for i in range(4)]
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(x)).numpy().ravel() for x in xs])
    rows = []
    for label, rp in _recipes().items():
        try:
            with quiet_libraries(False):
                data = bytes(quantizer.Quantizer(bytearray(float_bytes), rp).quantize().quantized_model)
            runner = TFLiteRunner(data)
            out = np.concatenate([runner.run([x])[0].ravel() for x in xs])
            rows.append({"model": name, "recipe": label, "size_bytes": len(data),
                         "size_vs_fp32": len(data) / len(float_bytes), "sqnr_db": sqnr_db(ref, out)})
        except Exception as exc:  # a recipe the model or LiteRT cannot take: recorded
            rows.append({"model": name, "recipe": label, "error": f"{type(exc).__name__}: {str(exc)[:150]}"})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="small_cnn,transformer,mobilenetv2_like")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None)
    opts = parser.parse_args(argv)
    rows = [r for m in opts.models.split(",") if m for r in measure(m, opts.size)]
    print("| model | recipe | size/fp32 | SQNR dB |\n|---|---|---|---|")
    for r in rows:
        cells = ("failed", r["error"][:60]) if "error" in r else (f"{r['size_vs_fp32']:.3f}", f"{r['sqnr_db']:.1f}")
        print(f"| {r['model']} | {r['recipe']} | {cells[0]} | {cells[1]} |")
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
