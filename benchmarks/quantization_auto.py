"""How long `--quantize int8` takes with `--quant-backend auto` against each single backend.

For each benchmark model, exports int8 through the Python API (`edge_export.export`, the tool's
defaults: 128 synthetic calibration samples, parity on 8 seeded inputs, NHWC I/O for image models)
with `quant_backend` flatbuffer, pt2e and auto, interleaved over `--rounds` rounds, and reports the
median wall time of each, the backend `auto` kept, why, and auto's time over the kept backend's
(the issue's target: at most 1.3x).

    python benchmarks/quantization_auto.py [--models small_cnn,transformer] [--size 224] [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ALL_MODELS = ("small_cnn", "mobilenetv2_like", "transformer", "resnet18", "mobilenetv2")
BACKENDS = ("flatbuffer", "pt2e", "auto")
TARGET_RATIO = 1.3  # issue 12: auto at most this times the wall time of the backend it keeps


def _export_once(name: str, size: int, backend: str, folder: Path) -> dict:
    from bench_models import ARCHITECTURES, build

    from edge_export import export

    shape = ARCHITECTURES[name][1]
    is_image = len(shape) == 4
    if is_image:
        shape = (shape[0], shape[1], size, size)
    model, example = build(name, shape)
    start = time.perf_counter()
    result = export(
        model, example_inputs=example, output=folder / f"{name}_{backend}.tflite", quantize="int8",
        quant_backend=backend, channels_last=is_image,
    )
    seconds = time.perf_counter() - start
    q = result.report["quantization"]
    outputs = (result.report.get("validation") or {}).get("outputs") or [{}]
    return {
        "seconds": seconds, "kept": q["backend"], "reason": q["reason"], "exit_code": result.exit_code,
        "attempts": [a["backend"] for a in q["attempts"]],
        "sqnr_db": (outputs[0].get("metrics") or {}).get("sqnr_db"),
    }


def warm_up() -> None:
    """One untimed export per backend on a tiny model: the first export in a process pays the
    libraries' imports (torch.export, litert-torch, torchao, ai-edge-quantizer), which would
    otherwise land on whichever variant runs first."""
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("flatbuffer", "pt2e"):
            _export_once("small_cnn", 16, backend, Path(tmp))


def run(models: list[str], size: int, rounds: int) -> list[dict]:
    warm_up()
    rows = []
    for name in models:
        times: dict[str, list[float]] = {b: [] for b in BACKENDS}
        last: dict[str, dict] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for round_index in range(rounds):
                # alternate the order so that no variant always runs right after the same one
                for backend in BACKENDS if round_index % 2 == 0 else BACKENDS[::-1]:
                    last[backend] = _export_once(name, size, backend, Path(tmp))
                    times[backend].append(last[backend]["seconds"])
        med = {b: statistics.median(v) for b, v in times.items()}
        kept = last["auto"]["kept"]
        row = {
            "model": name, "seconds": med, "all_seconds": times, "kept": kept, "auto_attempts": last["auto"]["attempts"],
            "reason": last["auto"]["reason"], "auto_vs_kept": med["auto"] / med[kept],
            "sqnr_db": {b: last[b]["sqnr_db"] for b in BACKENDS}, "exit_code": {b: last[b]["exit_code"] for b in BACKENDS},
            "load_average": os.getloadavg(),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def markdown_table(rows: list[dict]) -> str:
    head = ["model", "flatbuffer s (rounds)", "pt2e s (rounds)", "auto s (rounds)", "auto kept", "backends auto ran",
            "auto / kept", "1.3x target", "auto / (flatbuffer + pt2e)", "held-out SQNR dB (fb / pt2e / auto)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s = r["seconds"]
        sq = " / ".join("-" if r["sqnr_db"][b] is None else f"{r['sqnr_db'][b]:.1f}" for b in BACKENDS)
        # the median, then every round's time: on a shared machine the spread says how far to trust it
        times = {b: f"{s[b]:.1f} ({', '.join(f'{t:.1f}' for t in r['all_seconds'][b])})" for b in BACKENDS}
        verdict = "met" if r["auto_vs_kept"] <= TARGET_RATIO else "missed"
        lines.append(
            f"| {r['model']} | {times['flatbuffer']} | {times['pt2e']} | {times['auto']} | {r['kept']} | "
            f"{', '.join(r['auto_attempts'])} | {r['auto_vs_kept']:.2f}x | {verdict} | "
            f"{s['auto'] / (s['flatbuffer'] + s['pt2e']):.2f}x | {sq} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    parser.add_argument("--size", type=int, default=224, help="image height and width of the image models")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (median per backend)")
    parser.add_argument("--json", type=Path, default=None)
    opts = parser.parse_args(argv)
    models = [m for m in opts.models.split(",") if m]
    unknown = [m for m in models if m not in ALL_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(ALL_MODELS)}")
    print(f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}", flush=True)
    rows = run(models, opts.size, opts.rounds)
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}", flush=True)
    print(markdown_table(rows))
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
