"""--time-budget on a search that takes longer than the budget (issue 21, item 2).

A ViT-style encoder (patch embedding, ``--layers`` transformer encoder layers, mean pool, head) is
exported with ``--quantize int8 --sensitivity --min-sqnr 45`` (a target int8 misses, so the
sensitivity ranking and the mixed-precision search both run), once with ``--time-budget`` large
enough for the whole search and once with ``--time-budget 20``. Each run is the real CLI in a fresh
process; the table gives the wall time of the run, of the quantization stages (quantize +
mixed_precision, where the budget applies, and the first backend's share), the exit code, the SQNR kept and what the report says
was not tried (the first backend always finishes: without it there is no model). Prints a Markdown table (docs/BENCHMARKS.md, section 18).

    .venv/bin/python benchmarks/time_budget.py [--budgets 100000,20] [--backend auto] [--layers 4] [--dim 96] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _vit(dim: int, layers: int, tokens: int):
    import torch
    from torch import nn

    class ViTLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.embed = nn.Linear(48, dim)
            self.position = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
            layer = nn.TransformerEncoderLayer(dim, 4, dim * 4, dropout=0.0, batch_first=True, activation="gelu", norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, 10)

        def forward(self, patches):
            x = self.encoder(self.embed(patches) + self.position)
            return self.head(self.norm(x).mean(dim=1))

    return ViTLike().eval(), (torch.randn(1, tokens, 48),)


def _run(source: Path, out: Path, budget: str, backend: str) -> dict:
    command = [
        sys.executable, "-m", "edge_export.cli", "export", str(source), "-o", str(out), "--quantize", "int8",
        "--sensitivity", "--min-sqnr", "45", "--time-budget", budget, "--no-latency", "--quiet", "--quant-backend", backend,
    ]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - start
    report = json.loads(out.with_suffix(".report.json").read_text()) if out.with_suffix(".report.json").exists() else {}
    stages = {s["name"]: s["seconds"] for s in report.get("stages", [])}
    quant = report.get("quantization", {})
    mixed = report.get("mixed_precision") or {}
    return {
        "budget": budget, "exit": proc.returncode, "wall": wall,
        "quantize_s": stages.get("quantize", 0.0),
        "mixed_s": stages.get("mixed_precision", 0.0),
        "first_step_s": (quant.get("attempts") or [{}])[0].get("seconds", 0.0),
        "used": (quant.get("time_budget") or {}).get("used_seconds"),
        "skipped": (quant.get("time_budget") or {}).get("skipped", []),
        "sqnr": mixed.get("sqnr_db", quant.get("calibration_parity", {}).get("sqnr_db")),
        "promoted": len({p["op_index"] for p in mixed.get("promoted", [])}),
        "steps": len(mixed.get("steps", [])),
        "ranked": len((report.get("sensitivity") or {}).get("layers", [])),
        "error": proc.stderr.strip().splitlines()[-1] if proc.returncode not in (0, 1) and proc.stderr.strip() else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="100000,20")
    parser.add_argument("--backend", default="auto", help="--quant-backend (flatbuffer: the whole budget after it goes to the search)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=96)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    import torch

    model, example = _vit(args.dim, args.layers, args.tokens)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; ViT-like {args.layers} layers, {args.dim} wide, {args.tokens} tokens; --quant-backend {args.backend}")
    print()
    print("| --time-budget | exit | run s | quantize stage s (first backend) | mixed precision stage s | budget used s | operators ranked | search candidates | promoted | held-out SQNR kept dB | not tried |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "vit.pt2"
        torch.export.save(torch.export.export(model, example), source)
        for budget in args.budgets.split(","):
            row = _run(source, Path(folder) / f"vit_{budget}.tflite", budget, args.backend)
            skipped = "; ".join(row["skipped"]) or "nothing"
            print(
                f"| {budget} | {row['exit']} | {row['wall']:.1f} | {row['quantize_s']:.1f} ({row['first_step_s']:.1f}) | "
                f"{row['mixed_s']:.1f} | {row['used']} | {row['ranked']} | "
                f"{row['steps']} | {row['promoted']} | {row['sqnr']} | {skipped}{row['error']} |"
            )


if __name__ == "__main__":
    main()
