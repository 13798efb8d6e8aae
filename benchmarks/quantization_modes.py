"""Every quantization mode on every benchmark architecture: size, host latency, parity.

For each architecture of bench_models.py (image models at 1x3xSIZExSIZE with --channels-last; the
transformer at its own 1x64x128) and each mode (none, fp16, dynamic-int8, int8, int16x8), exports
through the edge_export Python API (so sizes, backends and parity are the tool's own), then times
LiteRT on CPU with XNNPACK at each thread count, and PyTorch eager with torch.set_num_threads at the
same count. Timing is interleaved: every round times every variant once per thread count, a fresh
interpreter each time; the figure reported is the median of the per-round medians. Random weights
(BatchNorm statistics gathered on random inputs, so activations do not vanish) and synthetic
calibration (the tool's default): parity numbers say how faithful each mode is, not what accuracy a
trained model keeps (see examples/digits for that).

    .venv/bin/python benchmarks/quantization_modes.py [--models small_cnn,resnet18,mobilenetv2,mobilenetv2_like,transformer]
        [--modes none,fp16,dynamic-int8,int8,int16x8] [--size 224] [--threads 1,2] [--rounds 5]
        [--runs 20] [--warmup 3] [--max-seconds 2] [--calibration-samples N] [--json out.json]

Quick run: --size 64 --rounds 2 --runs 5 --models small_cnn
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(HERE)]

ALL_MODELS = ("small_cnn", "resnet18", "mobilenetv2", "mobilenetv2_like", "transformer")
ALL_MODES = ("none", "fp16", "dynamic-int8", "int8", "int16x8", "int4")
TORCH = "pytorch-eager"  # the row label of the PyTorch eager baseline


def _uptime() -> str:
    try:
        one, five, fifteen = os.getloadavg()
        return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"
    except OSError:
        return "load average unknown"


def _build(name: str, size: int):
    from bench_models import ARCHITECTURES, build

    shape = ARCHITECTURES[name][1]
    is_image = len(shape) == 4
    model, example = build(name, (1, 3, size, size) if is_image else shape)
    return model, example, is_image


def _export_mode(model, example, is_image: bool, mode: str, out_dir: Path, name: str, calibration_samples):
    from edge_export.api import export
    from edge_export.errors import EdgeExportError
    from edge_export.passes.flatbuffer import run_flatbuffer_passes, strip_tensor_names_pass

    path = out_dir / f"{name}_{mode}.tflite"
    kwargs = {"calibration_samples": calibration_samples} if calibration_samples and mode in ("int8", "int16x8") else {}
    start = time.perf_counter()
    try:
        result = export(model, example_inputs=example, output=path, quantize=mode, channels_last=is_image, **kwargs)
    except EdgeExportError as exc:
        return {"mode": mode, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}, None
    seconds = time.perf_counter() - start
    report = result.report
    validation = report.get("validation") or {}
    outputs = validation.get("outputs") or [{}]
    metrics = outputs[0].get("metrics") or {}
    quant = report.get("quantization") or {}
    fb = report.get("flatbuffer") or {}
    row = {
        "mode": mode,
        "exit_code": result.exit_code,
        "export_seconds": round(seconds, 2),
        "size_bytes": path.stat().st_size,
        # What --strip-names would write: the same model without inner tensor names.
        "size_bytes_stripped": len(run_flatbuffer_passes(path.read_bytes(), [strip_tensor_names_pass]).model_bytes),
        "backend": quant.get("backend") or ("litert-torch fp16" if mode == "fp16" else "litert-torch"),
        "quant_observer": quant.get("observer"),
        "quant_reason": quant.get("reason"),
        "fully_integer": bool(fb.get("fully_integer")),
        "sqnr_db": (validation.get("worst") or {}).get("sqnr_db", metrics.get("sqnr_db")),
        "cosine": metrics.get("cosine"),
        "top1_agreement": metrics.get("top1_agreement"),
        "op_counts": fb.get("op_counts"),
        "error": None,
    }
    return row, path.read_bytes()


def _time_torch(model, example, threads: int, runs: int, warmup: int) -> float:
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            for _ in range(warmup):
                model(*example)
            samples = []
            for _ in range(runs):
                start = time.perf_counter_ns()
                model(*example)
                samples.append((time.perf_counter_ns() - start) / 1e6)
    finally:
        torch.set_num_threads(previous)
    return statistics.median(samples)


def _time_litert(model_bytes: bytes, threads: int, runs: int, warmup: int) -> float:
    from edge_export.runtime.latency import benchmark_latency
    from edge_export.runtime.interpreter import Resolver

    report = benchmark_latency(model_bytes, threads=threads, runs=runs, warmup=warmup, resolvers=(Resolver.XNNPACK,))
    return report.stats(Resolver.XNNPACK).median_ms


def bench_model(name: str, opts, out_dir: Path) -> list[dict]:
    model, example, is_image = _build(name, opts.size)
    shape = list(example[0].shape)
    rows, variants = [], {}
    for mode in opts.modes:
        row, data = _export_mode(model, example, is_image, mode, out_dir, name, opts.calibration_samples)
        row.update(model=name, input_shape=shape)
        rows.append(row)
        if data is not None:
            variants[mode] = data
        done = row["error"] or f"{row['size_bytes']} bytes in {row['export_seconds']} s"
        print(f"# exported {name} {mode}: {done}", file=sys.stderr, flush=True)

    # Slow variants (int16x8: XNNPACK has no int16x8 kernels) get fewer runs per round, so that
    # one of them cannot take the whole time budget: at most --max-seconds per round.
    def runs_for(ms: float) -> int:
        return max(3, min(opts.runs, int(opts.max_seconds * 1000 / max(ms, 1e-3))))

    runs = {TORCH: runs_for(_time_torch(model, example, 1, 2, 1))}
    for mode, data in variants.items():
        try:
            runs[mode] = runs_for(_time_litert(data, 1, 2, 1))
        except Exception:  # reported by the timing loop below
            runs[mode] = 3
    warmup = {k: min(opts.warmup, max(1, n // 5)) for k, n in runs.items()}

    # Interleaved rounds: each round times every variant at every thread count, so slow spells of
    # the shared machine hit all variants alike.
    samples: dict[tuple[str, int], list[float]] = {}
    for _ in range(opts.rounds):
        for threads in opts.threads:
            samples.setdefault((TORCH, threads), []).append(
                _time_torch(model, example, threads, runs[TORCH], warmup[TORCH])
            )
            for mode, data in variants.items():
                try:
                    ms = _time_litert(data, threads, runs[mode], warmup[mode])
                except Exception as exc:  # a runtime failure of one variant must not hide the others
                    ms = float("nan")
                    print(f"# timing {name} {mode} failed: {exc}", file=sys.stderr)
                samples.setdefault((mode, threads), []).append(ms)

    def med(key):
        vals = [v for v in samples.get(key, []) if v == v]
        return statistics.median(vals) if vals else None

    fp32 = next((r for r in rows if r["mode"] == "none" and not r["error"]), None)
    for row in rows:
        if row["error"]:
            continue
        row["size_vs_fp32"] = row["size_bytes"] / fp32["size_bytes"] if fp32 else None
        row["stripped_size_vs_fp32"] = row["size_bytes_stripped"] / fp32["size_bytes_stripped"] if fp32 else None
        row["latency"] = {}
        for threads in opts.threads:
            ms, base, eager = med((row["mode"], threads)), med(("none", threads)), med((TORCH, threads))
            row["latency"][str(threads)] = {
                "litert_xnnpack_ms": ms,
                "runs_per_round": runs.get(row["mode"]),
                "per_round_ms": samples.get((row["mode"], threads)),
                "vs_fp32_tflite": ms / base if ms and base else None,
                "vs_pytorch_eager": ms / eager if ms and eager else None,
            }
    rows.append({
        "model": name, "mode": TORCH, "input_shape": shape, "error": None,
        "latency": {
            str(t): {"torch_ms": med((TORCH, t)), "runs_per_round": runs[TORCH], "per_round_ms": samples[(TORCH, t)]}
            for t in opts.threads
        },
    })
    return rows


def _fmt(value, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def markdown_table(rows: list[dict], threads: list[int]) -> str:
    head = ["model", "mode", "backend", "size KB", "size/fp32", "no names /fp32", "full int", "SQNR dB", "cosine", "exit"]
    for t in threads:
        head += [f"{t}T ms", f"{t}T /fp32", f"{t}T /torch"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['model']} | {r['mode']} | failed: {r['error'][:120]} |" + " |" * (len(head) - 3))
            continue
        if r["mode"] == TORCH:
            cells = [r["model"], "PyTorch eager", "-", "-", "-", "-", "-", "-", "-", "-"]
            for t in threads:
                cells += [_fmt(r["latency"][str(t)]["torch_ms"], ".2f"), "-", "1.00"]
        else:
            cells = [
                r["model"], r["mode"], r["backend"], f"{r['size_bytes'] / 1024:.0f}", _fmt(r.get("size_vs_fp32"), ".3f"),
                _fmt(r.get("stripped_size_vs_fp32"), ".3f"),
                "yes" if r["fully_integer"] else "no", _fmt(r["sqnr_db"], ".1f"), _fmt(r["cosine"], ".5f"),
                str(r["exit_code"]),  # 1: the export's parity check failed its default thresholds
            ]
            for t in threads:
                lat = r["latency"][str(t)]
                cells += [
                    _fmt(lat["litert_xnnpack_ms"], ".2f"), _fmt(lat["vs_fp32_tflite"], ".2f"),
                    _fmt(lat["vs_pytorch_eager"], ".2f"),
                ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    parser.add_argument("--modes", default=",".join(ALL_MODES))
    parser.add_argument("--size", type=int, default=224, help="image height and width of the image models")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median of round medians)")
    parser.add_argument("--runs", type=int, default=20, help="timed invocations per variant per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=2.0,
                        help="fewer runs (at least 3) for a variant whose runs would take longer per round")
    parser.add_argument("--calibration-samples", type=int, default=None, help="int8/int16x8 (default: the tool's)")
    parser.add_argument("--out-dir", type=Path, default=None, help="keep the flatbuffers and reports here")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    opts = parser.parse_args(argv)
    opts.models = [m for m in opts.models.split(",") if m]
    opts.modes = [m for m in opts.modes.split(",") if m]
    opts.threads = [int(t) for t in opts.threads.split(",")]
    unknown = [m for m in opts.models if m not in ALL_MODELS] + [m for m in opts.modes if m not in ALL_MODES]
    if unknown:
        parser.error(f"unknown model or mode: {', '.join(unknown)}")
    if opts.runs < 2 or opts.rounds < 1:
        parser.error("--runs must be at least 2 and --rounds at least 1")

    started = datetime.datetime.now(datetime.timezone.utc)
    meta = {
        "date_utc": started.strftime("%Y-%m-%d %H:%M"),
        "host": f"{platform.machine()} {platform.processor() or platform.system()}, {os.cpu_count()} CPUs",
        "load_before": _uptime(),
        "argv": sys.argv[1:] if argv is None else list(argv),
    }
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = opts.out_dir or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in opts.models:
            rows += bench_model(name, opts, out_dir)
    meta["load_after"] = _uptime()
    meta["minutes"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60, 1)
    print(f"{meta['date_utc']} UTC, {meta['host']}; {meta['load_before']} before, {meta['load_after']} after; "
          f"{meta['minutes']} min; {opts.rounds} rounds x {opts.runs} runs, LiteRT CPU + XNNPACK")
    print(markdown_table(rows, opts.threads))
    if opts.json:
        opts.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
