"""int8 vs fp32 host latency of one convolution layer, across channel widths (XNNPACK on CPU).

The finding this script makes reproducible: on x86 with AMX (Sapphire Rapids and later), XNNPACK in
ai-edge-litert runs int8 dense and 1x1 convolutions with AMX GEMM kernels
(qs8-qc8w-igemm-16x64c4-minmax-fp32-avx512amx: 64 output channels per tile). The int8 cost per
output pixel then hardly depends on the width up to 64 channels, while fp32 (AVX-512 FMA) scales
with the MACs: narrow layers run slower in int8 than in fp32, wide ones much faster. Whole models
follow their layer mix: ResNet-18 (64-512 channels) gains a lot from int8, a small CNN or a
width-0.5 MobileNetV2 (8-64 channels) little or nothing. Depthwise layers do not go through the
GEMM kernels (XNNPACK has no AMX depthwise kernels); they are here for contrast, not as a case of
the same cause.

Each configuration is one layer, built in code (random weights, no downloads) and followed by
ReLU (fused into the convolution by the converter):

    dense3x3  Conv2d(cin, cout, 3, stride 1, padding 1)      (the stem cases have cin=3)
    conv1x1   Conv2d(cin, cout, 1)
    dw3x3     Conv2d(c, c, 3, padding 1, groups=c)           (depthwise)

at a spatial size (a column) that keeps the fp32 time in roughly 0.1-3 ms. Every layer is exported
through the edge_export Python API with NHWC I/O (channels_last=True, validate=False): fp32
(quantize="none"), int8 with float32 I/O (quant_backend="flatbuffer": the model has a QUANTIZE
and a DEQUANTIZE at its boundary) and int8 with int8 I/O (io_dtype="int8": the convolution alone).
Exported bytes are kept in memory for the run only. Timing is LiteRT on CPU with the XNNPACK
delegate, at each --threads count, interleaved: every round times every variant of every layer
once, a fresh interpreter each time; the figure is the median of the per-round medians. The JSON
also records the CPU model, its SIMD/AMX flags, the AMX kernels present in the LiteRT library and
the library versions.

    .venv/bin/python benchmarks/int8_conv_widths.py [--layers dense3x3,conv1x1,dw3x3]
        [--widths 8,16,32,64,128,256] [--no-stem] [--size N] [--io float32,int8] [--threads 1]
        [--rounds 5] [--runs 20] [--warmup 3] [--max-seconds 1] [--out-dir DIR] [--json out.json]

Quick check (3 layers, 2 rounds x 5 runs): --quick. A full default run (20 layers x 3 exports)
takes about 3-5 minutes on 2 cores; --threads 1,2 adds the 2-thread timings.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

ALL_LAYERS = ("dense3x3", "conv1x1", "dw3x3")
ALL_IO = ("float32", "int8")  # I/O of the int8 model
DEFAULT_WIDTHS = (8, 16, 32, 64, 128, 256)
FP32 = "fp32"

# Spatial size per (layer, width), chosen so that fp32 at 1 thread stays near 0.1-3 ms on an
# AVX-512 host (~60 GMAC/s fp32 for 3x3 convolutions). Wide dense layers get smaller maps.
_SIZES = {
    "dense3x3": {8: 112, 16: 112, 32: 56, 64: 56, 128: 28, 256: 14},
    "conv1x1": {8: 112, 16: 112, 32: 112, 64: 56, 128: 56, 256: 28},
    "dw3x3": {8: 112, 16: 112, 32: 112, 64: 112, 128: 56, 256: 56},
}
_STEMS = ((3, 16, 112), (3, 32, 112))  # dense3x3 stems: cin, cout, size
_QUICK = (("dense3x3", 3, 16, 112), ("dense3x3", 64, 64, 56), ("dw3x3", 64, 64, 112))

# /proc/cpuinfo flags worth recording for int8/fp32 kernels.
_CPU_FLAGS = (
    "sse4_1", "avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
)
_PACKAGES = ("edge-export", "torch", "ai-edge-litert", "litert-torch", "litert-converter", "numpy")


@dataclass(frozen=True)
class Layer:
    kind: str
    cin: int
    cout: int
    size: int

    @property
    def name(self) -> str:
        return f"{self.kind}_{self.cin}x{self.cout}_{self.size}"

    @property
    def macs(self) -> int:
        pixels = self.size * self.size  # stride 1, "same" padding: output map = input map
        if self.kind == "dense3x3":
            return self.cin * self.cout * 9 * pixels
        if self.kind == "conv1x1":
            return self.cin * self.cout * pixels
        return self.cout * 9 * pixels  # depthwise, multiplier 1

    def module(self):
        import torch
        from torch import nn

        torch.manual_seed(0)
        if self.kind == "dense3x3":
            conv = nn.Conv2d(self.cin, self.cout, 3, padding=1)
        elif self.kind == "conv1x1":
            conv = nn.Conv2d(self.cin, self.cout, 1)
        else:
            conv = nn.Conv2d(self.cin, self.cout, 3, padding=1, groups=self.cin)
        return nn.Sequential(conv, nn.ReLU()).eval(), (torch.randn(1, self.cin, self.size, self.size),)


def _uptime() -> str:
    try:
        one, five, fifteen = os.getloadavg()
        return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"
    except OSError:
        return "load average unknown"


def _cpu_info() -> dict:
    model, flags = None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model is None:
                model = value.strip()
            elif key == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {
        "model_name": model or platform.processor() or platform.machine(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "flags": {f: f in flags for f in _CPU_FLAGS},
    }


def _amx_kernels() -> list[str]:
    """Names of the int8 AMX XNNPACK micro-kernels compiled into LiteRT (what the CPU can select)."""
    try:
        import ai_edge_litert

        lib = Path(ai_edge_litert.__file__).parent / "libpywrap_litert_common.so"
        data = lib.read_bytes()
    except (ImportError, OSError):
        return []
    names = re.findall(rb"qs8-qc8w-i?gemm-[0-9a-z]+-minmax-fp32-avx512amx", data)
    return sorted({n.decode() for n in names})


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        out["edge-export git"] = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["edge-export git"] = None
    return out


def _layers(opts) -> list[Layer]:
    if opts.quick:
        return [Layer(k, ci, co, opts.size or s) for k, ci, co, s in _QUICK]
    layers = []
    for kind in opts.layers:
        if kind == "dense3x3" and opts.stem:
            layers += [Layer(kind, ci, co, opts.size or s) for ci, co, s in _STEMS]
        for w in opts.widths:
            size = opts.size or _SIZES[kind].get(w) or min(_SIZES[kind].values())
            layers.append(Layer(kind, w, w, size))
    return layers


def _export(layer: Layer, variant: str, out_dir: Path) -> tuple[dict, bytes | None]:
    from edge_export.api import export
    from edge_export.errors import EdgeExportError

    model, example = layer.module()
    path = out_dir / f"{layer.name}_{variant}.tflite"
    if variant == FP32:
        kwargs = {"quantize": "none"}
    else:  # "int8-<io dtype>"
        kwargs = {"quantize": "int8", "quant_backend": "flatbuffer", "io_dtype": variant.split("-", 1)[1]}
    start = time.perf_counter()
    try:
        result = export(model, example_inputs=example, output=path, channels_last=True, validate=False, **kwargs)
    except EdgeExportError as exc:
        return {"variant": variant, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}, None
    fb = result.report.get("flatbuffer") or {}
    row = {
        "variant": variant,
        "export_seconds": round(time.perf_counter() - start, 2),
        "size_bytes": path.stat().st_size,
        "op_counts": fb.get("op_counts"),
        "fully_integer": fb.get("fully_integer"),
        "error": None,
    }
    return row, path.read_bytes()


def _time_litert(model_bytes: bytes, threads: int, runs: int, warmup: int) -> float:
    from edge_export.runtime.latency import benchmark_latency
    from edge_export.runtime.interpreter import Resolver

    report = benchmark_latency(model_bytes, threads=threads, runs=runs, warmup=warmup, resolvers=(Resolver.XNNPACK,))
    return report.stats(Resolver.XNNPACK).median_ms


def run(opts, out_dir: Path) -> list[dict]:
    variants = [FP32] + [f"int8-{io}" for io in opts.io]
    rows, models = [], {}
    for layer in _layers(opts):
        row = {"layer": layer.kind, "cin": layer.cin, "cout": layer.cout, "size": layer.size, "macs": layer.macs,
               "exports": {}}
        for variant in variants:
            info, data = _export(layer, variant, out_dir)
            row["exports"][variant] = info
            if data is not None:
                models[(layer.name, variant)] = data
            done = info["error"] or f"{info['size_bytes']} bytes, ops {info['op_counts']}, {info['export_seconds']} s"
            print(f"# exported {layer.name} {variant}: {done}", file=sys.stderr, flush=True)
        rows.append(row)

    # Runs per round capped so that a slow variant takes at most --max-seconds per round.
    runs = {}
    for key, data in models.items():
        try:
            ms = _time_litert(data, 1, 2, 1)
        except Exception:  # reported by the timing loop below
            ms = 1e3
        runs[key] = max(3, min(opts.runs, int(opts.max_seconds * 1000 / max(ms, 1e-3))))

    # Interleaved rounds: each round times every variant of every layer at every thread count, so a
    # busy spell of the shared machine hits all variants alike.
    samples: dict[tuple, list[float]] = {}
    for rnd in range(opts.rounds):
        for threads in opts.threads:
            for key, data in models.items():
                try:
                    ms = _time_litert(data, threads, runs[key], min(opts.warmup, max(1, runs[key] // 5)))
                except Exception as exc:  # one failing variant must not hide the others
                    ms = float("nan")
                    print(f"# timing {key} failed: {exc}", file=sys.stderr)
                samples.setdefault((*key, threads), []).append(ms)
        print(f"# round {rnd + 1}/{opts.rounds} done", file=sys.stderr, flush=True)

    def med(key):
        vals = [v for v in samples.get(key, []) if v == v]
        return statistics.median(vals) if vals else None

    for row in rows:
        name = Layer(row["layer"], row["cin"], row["cout"], row["size"]).name
        row["latency"] = {}
        for threads in opts.threads:
            base = med((name, FP32, threads))
            entry = {}
            for variant in variants:
                ms = med((name, variant, threads))
                entry[variant] = {
                    "median_ms": ms,
                    "vs_fp32": ms / base if ms and base else None,
                    "ns_per_output_pixel": ms * 1e6 / (row["size"] ** 2) if ms else None,
                    "gmac_per_s": row["macs"] / (ms * 1e6) if ms else None,
                    "runs_per_round": runs.get((name, variant)),
                    "per_round_ms": samples.get((name, variant, threads)),
                }
            row["latency"][str(threads)] = entry
    return rows


def _fmt(value, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def markdown_table(rows: list[dict], threads: list[int], io: list[str]) -> str:
    head = ["layer", "cin", "cout", "HxW", "MMACs"]
    for t in threads:
        head += [f"{t}T fp32 ms"]
        for d in io:
            tag = "int8" if len(io) == 1 else f"int8 {d}-io"
            head += [f"{t}T {tag} ms", f"{t}T {tag}/fp32"]
        head += [f"{t}T int8 {io[-1]}-io ns/px"]  # per output pixel, of the last int8 variant
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["layer"], str(r["cin"]), str(r["cout"]), f"{r['size']}x{r['size']}", f"{r['macs'] / 1e6:.1f}"]
        for t in threads:
            lat = r["latency"][str(t)]
            cells.append(_fmt(lat[FP32]["median_ms"], ".3f"))
            for d in io:
                v = lat[f"int8-{d}"]
                cells += [_fmt(v["median_ms"], ".3f"), _fmt(v["vs_fp32"], ".2f")]
            cells.append(_fmt(lat[f"int8-{io[-1]}"]["ns_per_output_pixel"], ".1f"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default=",".join(ALL_LAYERS), help="layer kinds: dense3x3, conv1x1, dw3x3")
    parser.add_argument("--widths", default=",".join(map(str, DEFAULT_WIDTHS)), help="cin=cout values to sweep")
    parser.add_argument("--no-stem", dest="stem", action="store_false",
                        help="leave out the dense3x3 stems (3->16 and 3->32 at 112x112)")
    parser.add_argument("--size", type=int, default=None,
                        help="one height=width for every layer (default: per layer and width, see _SIZES)")
    parser.add_argument("--io", default=",".join(ALL_IO),
                        help="I/O dtypes of the int8 model: float32 (QUANTIZE/DEQUANTIZE at the boundary), int8")
    parser.add_argument("--threads", default="1", help="XNNPACK thread counts, e.g. 1,2")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median of round medians)")
    parser.add_argument("--runs", type=int, default=20, help="timed invocations per variant per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=1.0,
                        help="fewer runs (at least 3) for a variant whose runs would take longer per round")
    parser.add_argument("--quick", action="store_true",
                        help="3 layers (stem 3->16, dense 64->64, depthwise 64) with 2 rounds x 5 runs, to check the script")
    parser.add_argument("--out-dir", type=Path, default=None, help="keep the flatbuffers and reports here")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    opts = parser.parse_args(argv)
    opts.layers = [x for x in opts.layers.split(",") if x]
    opts.io = [x for x in opts.io.split(",") if x]
    try:
        opts.widths = [int(w) for w in opts.widths.split(",") if w]
        opts.threads = [int(t) for t in opts.threads.split(",") if t]
    except ValueError:
        parser.error("--widths and --threads take comma-separated integers")
    unknown = [x for x in opts.layers if x not in ALL_LAYERS] + [x for x in opts.io if x not in ALL_IO]
    if unknown:
        parser.error(f"unknown layer kind or I/O dtype: {', '.join(unknown)}")
    if not opts.io or not opts.threads or min(opts.threads) < 1 or (opts.widths and min(opts.widths) < 1):
        parser.error("--io, --threads and --widths need positive values")
    if opts.quick:
        opts.rounds, opts.runs = min(opts.rounds, 2), min(opts.runs, 5)
    if opts.runs < 2 or opts.rounds < 1:
        parser.error("--runs must be at least 2 and --rounds at least 1")

    started = datetime.datetime.now(datetime.timezone.utc)
    cpu = _cpu_info()
    meta = {
        "date_utc": started.strftime("%Y-%m-%d %H:%M"),
        "host": f"{cpu['machine']} {cpu['model_name']}, {cpu['cpus']} CPUs",
        "cpu": cpu,
        "xnnpack_int8_amx_kernels": _amx_kernels(),
        "versions": _versions(),
        "load_before": _uptime(),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "rounds": opts.rounds,
        "runs": opts.runs,
        "threads": opts.threads,
        "runtime": "LiteRT CPU + XNNPACK delegate, NHWC, random inputs",
    }
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = opts.out_dir or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        rows = run(opts, out_dir)
    meta["load_after"] = _uptime()
    meta["minutes"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60, 1)
    flags = ", ".join(f for f in ("avx512_vnni", "avx_vnni", "amx_int8") if cpu["flags"].get(f)) or "no VNNI/AMX"
    print(f"{meta['date_utc']} UTC, {meta['host']} ({flags}); {meta['load_before']} before, "
          f"{meta['load_after']} after; {meta['minutes']} min; {opts.rounds} rounds x {opts.runs} runs, "
          f"LiteRT {meta['versions']['ai-edge-litert']} CPU + XNNPACK")
    print(markdown_table(rows, opts.threads, opts.io))
    if opts.json:
        opts.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
