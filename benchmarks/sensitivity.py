"""Per-operator sensitivity and mixed precision on the benchmark models (issue 12, items 2 and 3).

Three parts, each printing a Markdown table (docs/BENCHMARKS.md, section "Sensitivity and mixed
precision"):

- ``predictors``: which sensitivity measure predicts the effect of promotions better. For each model,
  both rankings (``only-quantized``: the float model with one operator quantized; ``only-float``:
  the int8 model with one operator left in float) are measured on 8 calibration samples, then the
  operators are promoted to float in each ranking's order, top-k for growing k, and the held-out
  SQNR is measured after each: the better ranking reaches a given SQNR with fewer promotions.
- ``mixed``: int8 plain vs ``--mixed-precision auto`` vs ``--mixed-precision int16`` with
  ``--min-sqnr 30`` through the Python API (synthetic calibration, the tool's default): held-out
  SQNR, size, host latency (XNNPACK, 1 thread, measured by the search) and promoted operators.
- ``order``: the promotion order: the sensitivity ranking alone vs with near-equal sensitivities
  (within ``TIE_BAND_DB``) broken by cost, to float and to int16, ``--min-sqnr 30``: promotions,
  bytes and host latency of the model each reaches. Also the ranking's noise (the same ranking on 8
  other calibration samples: how far an operator's SQNR moves, which sets the band) and, for the
  single-operator steps, the measured size and latency change beside the estimated costs (which
  cost predicts which change, per precision).
- ``timing``: wall time of an int8 export with and without ``--sensitivity`` (back to back, same
  options), for the issue's target of at most 3x on ResNet-18 at 224x224.

    .venv/bin/python benchmarks/sensitivity.py predictors [--models resnet18,mobilenetv2,transformer] [--size 64]
    .venv/bin/python benchmarks/sensitivity.py mixed [--models ...] [--size 224]
    .venv/bin/python benchmarks/sensitivity.py order [--models mobilenetv2_like,resnet18] [--size 224]
    .venv/bin/python benchmarks/sensitivity.py timing [--models resnet18] [--size 224] [--backend auto]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(HERE)]


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} on {os.cpu_count()} CPUs"


def _build(name: str, size: int):
    from bench_models import ARCHITECTURES, build

    shape = ARCHITECTURES[name][1]
    image = len(shape) == 4
    return build(name, (1, 3, size, size) if image else shape)


def predictors(models: list[str], size: int) -> None:
    from edge_export.config import InputSpec
    from edge_export.conversion.litert import convert_module
    from edge_export.loading.inputs import make_samples
    from edge_export.quantization.synthetic_calibration import synthetic_calibration
    from edge_export.quantization.mixed_precision import (
        AccuracyTarget,
        evaluate_target,
        promotion_overrides,
    )
    from edge_export.quantization.selection import reference_outputs
    from edge_export.quantization.sensitivity import (
        RecipeQuantizer,
        measure_sensitivity,
        ops_by_index,
        run_outputs,
    )

    print(f"| model | ranking | ops | int8 dB | SQNR after promoting the top k to float: k = 1, 2, 4, 8, 16, 32, 64 | k for +10 dB | seconds |  ({_load()})")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        model, example = _build(name, size)
        spec = InputSpec(tuple(example[0].shape))
        float_bytes = convert_module(model, example)
        calibration = synthetic_calibration([spec], 128, seed=1_000_003)
        quantizer = RecipeQuantizer(float_bytes, calibration)
        ranking_samples = list(calibration.samples[:8])
        ranking_refs = reference_outputs(model, ranking_samples)
        heldout = [tuple(t.numpy() for t in s) for s in make_samples([spec], 8, 0, example)]
        heldout_refs = reference_outputs(model, heldout)
        by_index = ops_by_index(quantizer)
        target = AccuracyTarget(None)
        int8 = evaluate_target(run_outputs(quantizer.quantize("int8"), heldout), heldout_refs, target).sqnr_db
        for method in ("only-quantized", "only-float"):
            start = time.perf_counter()
            report = measure_sensitivity(quantizer, ranking_samples, ranking_refs, method=method)
            seconds = time.perf_counter() - start
            curve, first = [], None
            for k in (1, 2, 4, 8, 16, 32, 64):
                if k > len(report.layers):
                    break
                overrides = promotion_overrides(quantizer, [by_index[layer.op_index] for layer in report.layers[:k]], "float")
                sqnr = evaluate_target(run_outputs(quantizer.quantize("int8", overrides), heldout), heldout_refs, target).sqnr_db
                curve.append(f"{sqnr:.1f}")
                if first is None and sqnr >= int8 + 10:
                    first = k
            print(f"| {name} | {method} | {len(report.layers)} | {int8:.1f} | {', '.join(curve)} | {first or '>' + str(k)} | {seconds:.1f} |", flush=True)


def mixed(
    models: list[str], size: int, backend: str, modes: tuple[str, ...] = ("auto", "int16"), steps: bool = False, keep: str | None = None
) -> None:
    from edge_export.api import export

    print(f"| model | mode | exit | held-out SQNR dB | size bytes | latency ms (XNNPACK 1T) | fully integer | promoted | search s | top promoted modules |  ({_load()})")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in models:
        model, example = _build(name, size)
        image = example[0].dim() == 4
        with tempfile.TemporaryDirectory() as scratch:
            tmp = keep or scratch  # --keep: the models and reports stay, to time them again back to back
            for mode in modes:
                start = time.perf_counter()
                result = export(
                    model, example_inputs=example, output=Path(tmp) / f"{name}_{mode}.tflite", quantize="int8",
                    quant_backend=backend, channels_last=image, mixed_precision=mode, min_sqnr=30.0,
                )
                wall = time.perf_counter() - start
                rep = result.report
                m = rep.get("mixed_precision")
                parity = rep["validation"]["outputs"][0]["metrics"]["sqnr_db"]
                if m is None:
                    print(f"| {name} | {mode} | {result.exit_code} | {parity:.1f} (int8 already met it) | {rep['flatbuffer']['size_bytes']} | – | {rep['quantization']['fully_integer']} | 0 | – | – |", flush=True)
                    continue
                if mode == "auto":
                    print(f"| {name} | int8 plain (flatbuffer) | 1 | {m['int8_sqnr_db']:.1f} | {m['int8_size_bytes']} | {m['int8_latency_ms']} | True | 0 | – | – |")
                top = ", ".join(dict.fromkeys(p["module_path"] or p["opcode"] for p in m["promoted"][:4]))
                raised = len({p["op_index"] for p in m["promoted"]})
                split = [p for p in m["promoted"] if p["precision"] == "int16+split-weights"]
                split_text = ""
                if split:  # the weight-splitting phase (int16 only): how many, which first
                    first = ", ".join(p["module_path"] or p["opcode"] for p in split[:3])
                    split_text = f"; weights split: {len(split)} (first: {first})"
                deltas = {p["step"]: p["latency_delta_ms"] for p in m["promoted"]}
                if None not in deltas.values():  # each step's latency change (the search's own timings)
                    top += f"; order: {m.get('order')}; sum of step latency changes {sum(deltas.values()):+.3f} ms over {len(deltas)} steps"
                print(
                    f"| {name} | {mode} ({m['precision']}) | {result.exit_code} | {m['sqnr_db']:.1f} (parity {parity:.1f}) | {m['size_bytes']} | "
                    f"{m['latency_ms']} (int8 {m['int8_latency_ms']}) | {m['fully_integer']} | {raised} of {len(rep['sensitivity']['layers']) if rep.get('sensitivity') else '?'}{split_text} | "
                    f"{m['seconds']:.0f} (export {wall:.0f}) | {top} |",
                    flush=True,
                )
                if steps:
                    for step in m["steps"]:
                        print(f"|   | step | promoted {step['promoted']}, split {step.get('split_weights', 0)} | {step['sqnr_db']} | {step['size_bytes']} | | {step['met']} | | | |", flush=True)


def _spearman(a: list[float], b: list[float]) -> float:
    import numpy as np

    if len(a) < 3:
        return float("nan")
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def order(models: list[str], size: int, precisions: tuple[str, ...] = ("float", "int16"), min_sqnr: float = 30.0,
          band_db: float | None = None, noise: bool = True) -> None:
    import numpy as np

    from edge_export.config import InputSpec
    from edge_export.conversion.litert import convert_module
    from edge_export.loading.inputs import make_samples
    from edge_export.quantization.synthetic_calibration import synthetic_calibration
    from edge_export.quantization.mixed_precision import (
        TIE_BAND_DB,
        AccuracyTarget,
        promotion_costs,
        promotion_order,
        search_mixed_precision,
    )
    from edge_export.quantization.selection import reference_outputs
    from edge_export.quantization.sensitivity import (
        RecipeQuantizer,
        measure_sensitivity,
    )

    band_db = TIE_BAND_DB if band_db is None else band_db
    print(f"({_load()}; band {band_db} dB (TIE_BAND_DB = {TIE_BAND_DB}); --min-sqnr {min_sqnr:g})")
    rows, singles = [], []
    for name in models:
        model, example = _build(name, size)
        spec = InputSpec(tuple(example[0].shape))
        float_bytes = convert_module(model, example)
        calibration = synthetic_calibration([spec], 128, seed=1_000_003)
        start = time.perf_counter()
        quantizer = RecipeQuantizer(float_bytes, calibration)
        samples = list(calibration.samples)
        first = measure_sensitivity(quantizer, samples[:8], reference_outputs(model, samples[:8]))
        ranking_s = time.perf_counter() - start
        second = measure_sensitivity(quantizer, samples[8:16], reference_outputs(model, samples[8:16])) if noise else first
        again = {layer.op_index: layer.sqnr_db for layer in second.layers}
        moved = np.array([abs(layer.sqnr_db - again[layer.op_index]) for layer in first.layers if layer.op_index in again])
        moved = moved[np.isfinite(moved)]
        gaps = np.diff([layer.sqnr_db for layer in first.layers])
        gaps = gaps[np.isfinite(gaps)]
        print(
            f"| {name} {size} | {len(first.layers)} operators | |dSQNR| between two 8-sample rankings: median {np.median(moved):.2f}, "
            f"p90 {np.percentile(moved, 90):.2f}, p95 {np.percentile(moved, 95):.2f}, max {moved.max():.2f} dB | "
            f"adjacent ranked SQNRs: median gap {np.median(gaps):.2f} dB, SQNR range {first.layers[0].sqnr_db:.1f}-{first.layers[-1].sqnr_db:.1f} | "
            f"rank correlation of the two rankings {_spearman([l.sqnr_db for l in first.layers], [again.get(l.op_index, np.inf) for l in first.layers]):.3f} | ranking {ranking_s:.0f} s |",
            flush=True,
        )
        heldout = [tuple(t.numpy() for t in s) for s in make_samples([spec], 8, 0, example)]
        heldout_refs = reference_outputs(model, heldout)
        all_costs = promotion_costs(quantizer.float_model)
        target = AccuracyTarget(min_sqnr)
        for precision in precisions:
            costs = {i: c.for_precision(precision) for i, c in all_costs.items()}
            moved_ops = sum(a.op_index != b.op_index for a, b in zip(first.layers, promotion_order(first.layers, costs, band_db)))
            kept = {}
            for label, use in (("sensitivity", None), ("cost-aware", costs)):
                search = search_mixed_precision(quantizer, first.layers, heldout, heldout_refs, target, mode="bench", precision=precision, costs=use, tie_band_db=band_db)
                kept[label] = search.model_bytes or search.int8_bytes
                r = search.report
                rows.append(
                    f"| {name} {size} | {precision} | {label} ({moved_ops} of {len(first.layers)} moved) | {r.met} | {r.sqnr_db:.1f} (int8 {r.int8_sqnr_db:.1f}) | "
                    f"{len(r.promoted)} | {r.size_bytes} ({r.size_bytes - r.int8_size_bytes:+d}) | {r.latency_ms} (int8 {r.int8_latency_ms}) | "
                    f"{len(r.steps)} | {r.seconds:.0f} ({r.latency_seconds:.1f} timing) |"
                )
                print(rows[-1], flush=True)
                for p in r.promoted:
                    if sum(q.step == p.step for q in r.promoted) == 1:  # a single-operator step
                        c = all_costs[p.op_index]
                        singles.append((name, precision, label, p.opcode, p.op_index, c.float_bytes, c.int16_bytes, c.macs, p.size_delta_bytes, p.latency_delta_ms))
            # the two kept models timed interleaved (one invoke of each in turn): a comparison that a
            # change of load between the two searches does not bias
            from edge_export.flatbuffer import read_flatbuffer
            from edge_export.runtime.latency import _time_pair

            a, b, runs = _time_pair(read_flatbuffer(kept["sensitivity"]), read_flatbuffer(kept["cost-aware"]), 2, 5, 50, 3.0)
            rows.append(f"| {name} {size} | {precision} | kept models timed interleaved ({runs} runs each) | | | | | sensitivity {a:.3f}, cost-aware {b:.3f} (ratio {b / a:.3f}) | | |")
            print(rows[-1], flush=True)
    print()
    print("| model size | to | order | met | SQNR dB | promoted | size bytes (vs int8) | latency ms | prefixes measured | search s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| model | to | order | op | est. float bytes | est. int16 bytes | MACs | size delta | latency delta ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in singles:
        print("| " + " | ".join(str(x) for x in row[:3]) + f" | {row[3]} #{row[4]} | " + " | ".join(str(x) for x in row[5:]) + " |")
    for precision in precisions:
        sel = [r for r in singles if r[1] == precision and r[9] is not None]
        if sel:
            print(
                f"{precision}: Spearman(est. bytes, size delta) {_spearman([r[5] if precision == 'float' else r[6] for r in sel], [r[8] for r in sel]):.2f}; "
                f"Spearman(MACs, latency delta) {_spearman([r[7] for r in sel], [r[9] for r in sel]):.2f}; "
                f"Spearman(est. bytes, latency delta) {_spearman([r[5] if precision == 'float' else r[6] for r in sel], [r[9] for r in sel]):.2f}; n={len(sel)}"
            )


def timing(models: list[str], size: int, backend: str) -> None:
    from edge_export.api import export

    print(f"| model | backend | int8 export s | with --sensitivity s | ratio | sensitivity stage s | operators |  ({_load()})")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        model, example = _build(name, size)
        image = example[0].dim() == 4
        times = {}
        with tempfile.TemporaryDirectory() as tmp:
            for sensitivity in (False, True):
                start = time.perf_counter()
                result = export(
                    model, example_inputs=example, output=Path(tmp) / f"{name}_{sensitivity}.tflite", quantize="int8",
                    quant_backend=backend, channels_last=image, sensitivity=sensitivity, mixed_precision="off",
                )
                times[sensitivity] = (time.perf_counter() - start, result.report)
        (plain, _), (sens, rep) = times[False], times[True]
        stage = next(s["seconds"] for s in rep["stages"] if s["name"] == "sensitivity")
        print(f"| {name} {size} | {backend} | {plain:.0f} | {sens:.0f} | {sens / plain:.2f} | {stage:.0f} | {len(rep['sensitivity']['layers'])} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("predictors", "mixed", "order", "timing"))
    parser.add_argument("--models", default=None)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--modes", default="auto,int16", help="mixed: the --mixed-precision modes to run")
    parser.add_argument("--steps", action="store_true", help="mixed: also print every candidate the search measured")
    parser.add_argument("--keep", default=None, help="mixed: write the models and reports to this folder")
    parser.add_argument("--precisions", default="float,int16", help="order: the precisions to promote to")
    parser.add_argument("--min-sqnr", type=float, default=30.0, help="order: the target")
    parser.add_argument("--band", type=float, default=None, help="order: the tie band in dB (default TIE_BAND_DB)")
    parser.add_argument("--skip-noise", action="store_true", help="order: do not re-measure the ranking on other samples")
    args = parser.parse_args()
    if args.part == "predictors":
        predictors((args.models or "resnet18,mobilenetv2,transformer").split(","), args.size or 64)
    elif args.part == "mixed":
        mixed((args.models or "small_cnn,resnet18,mobilenetv2,mobilenetv2_like,transformer").split(","), args.size or 224, args.backend, tuple(args.modes.split(",")), args.steps, args.keep)
    elif args.part == "order":
        order((args.models or "mobilenetv2_like,resnet18").split(","), args.size or 224, tuple(args.precisions.split(",")), args.min_sqnr,
              args.band, not args.skip_noise)
    else:
        timing((args.models or "resnet18").split(","), args.size or 224, args.backend)


if __name__ == "__main__":
    main()
